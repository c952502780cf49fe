"""Typed Python wrappers over the mesh contracts: the only module that knows their ABIs.

`MeshChain` reads state and hands out `MeshAccount`s, one per signing key, whose methods send
transactions (`stake`, `create_job`, `settle_batch`, ...). Reverts surface as
`ContractError` with the Solidity error name and snake_case arguments, raised before the
transaction is sent because every call is gas-estimated first.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eth_abi import encode as abi_encode
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_typing import ChecksumAddress, HexAddress, HexStr
from eth_utils import keccak
from hexbytes import HexBytes
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import ContractLogicError
from web3.logs import DISCARD

from orchestrator.chain.artifacts import Artifacts, load_artifacts
from orchestrator.chain.deployment import Deployment
from orchestrator.chain.errors import ChainError, ErrorDecoder, snake_case
from orchestrator.chain.tx import Receipt, TransactionSender, connect, revert_data
from orchestrator.config import Settings
from orchestrator.domain.chain_views import (
    DisputeKind,
    DisputeRecord,
    DisputeStatus,
    EscrowBalance,
    EscrowedJob,
    EscrowStatus,
    ProviderStake,
    ReservationTerms,
    SlashRecord,
    SlashStatus,
    UnbondingLock,
)
from orchestrator.domain.types import SlashReason


@dataclass(frozen=True, slots=True)
class Settlement:
    """One job's settlement inside `settle_batch`: payouts per provider, result commitment."""

    job_id: bytes
    providers: tuple[str, ...]
    payouts: tuple[int, ...]
    result_root: bytes


def settle_batch_call(settlements: Sequence[Settlement]) -> tuple[str, list[tuple[Any, ...]]]:
    """The JobEscrow function and argument that settle `settlements` in one transaction.

    A batch of single-provider jobs goes to `settleBatchSolo`, whose packed calldata (4 words a
    job instead of 9) saves ~0.7k gas a job; any other batch to the general `settleBatch`.
    """
    if all(len(s.providers) == 1 == len(s.payouts) for s in settlements):
        return "settleBatchSolo", [(s.job_id, s.providers[0], s.payouts[0], s.result_root)
                                   for s in settlements]
    return "settleBatch", [(s.job_id, list(s.providers), list(s.payouts), s.result_root)
                           for s in settlements]


class MeshChain:
    """Read access to one deployment, and the factory for per-key signing accounts."""

    def __init__(
        self, w3: Web3, deployment: Deployment, artifacts: Artifacts | None = None
    ) -> None:
        artifacts = artifacts or load_artifacts()
        self.w3 = w3
        self.deployment = deployment
        self.decoder = ErrorDecoder(artifacts.all_abis())

        def bind(address: str, name: str) -> Contract:
            return w3.eth.contract(address=ChecksumAddress(HexAddress(HexStr(address))),
                                   abi=artifacts[name].abi)

        self.token = bind(deployment.token, "TestToken")
        self.stake_manager = bind(deployment.stake_manager, "StakeManager")
        self.job_escrow = bind(deployment.job_escrow, "JobEscrow")
        self.disputes = bind(deployment.disputes, "Disputes")
        self._accounts: dict[str, MeshAccount] = {}

    @classmethod
    def connect(cls, rpc_url: str, deployment: Deployment) -> MeshChain:
        w3 = connect(rpc_url)
        if w3.eth.chain_id != deployment.chain_id:
            raise ChainError(f"{rpc_url} is chain {w3.eth.chain_id}, the deployment is for "
                             f"chain {deployment.chain_id}")
        return cls(w3, deployment)

    @classmethod
    def from_settings(cls, settings: Settings) -> MeshChain:
        """The chain at `settings.rpc_url` with the deployment saved under `settings.data_dir`."""
        chain = cls.connect(settings.rpc_url, Deployment.load(settings.data_dir))
        if chain.deployment.chain_id != settings.chain_id:
            raise ChainError(f"deployment is for chain {chain.deployment.chain_id}, settings "
                             f"expect chain {settings.chain_id}")
        return chain

    def account(self, key: str | bytes | LocalAccount) -> MeshAccount:
        """The signing account for `key`; one per address, so its nonces stay in one place."""
        local = key if isinstance(key, LocalAccount) else Account.from_key(key)
        address = str(local.address)
        if address not in self._accounts:
            self._accounts[address] = MeshAccount(self, local)
        return self._accounts[address]

    def resync_nonces(self) -> None:
        """Re-read every account's nonce from the chain (after `evm_revert` or a foreign send)."""
        for account in self._accounts.values():
            account.sender.resync_nonce()

    def _read(self, contract: Contract, function: str, *args: Any) -> Any:
        try:
            return contract.functions[function](*args).call()
        except ContractLogicError as exc:
            raise self.decoder.decode(revert_data(exc)) from None

    def _read_struct(self, contract: Contract, function: str, *args: Any) -> dict[str, Any]:
        """A struct-returning view as {snake_case field: value}, matched by the ABI's names.

        Reading by name keeps the SDK right when the contracts reorder or add struct fields.
        """
        values = self._read(contract, function, *args)
        (output,) = contract.get_function_by_name(function).abi["outputs"]
        names = [snake_case(component["name"]) for component in output["components"]]
        return dict(zip(names, values, strict=True))

    def gas_used(self, tx_hash: str) -> int:
        """Gas of a mined transaction someone else sent (e.g. the orchestrator's outbox)."""
        return int(self.w3.eth.get_transaction_receipt(HexStr(tx_hash))["gasUsed"])

    # ------------------------------------------------------------------ token

    def token_balance(self, owner: str) -> int:
        return int(self._read(self.token, "balanceOf", owner))

    def allowance(self, owner: str, spender: str) -> int:
        return int(self._read(self.token, "allowance", owner, spender))

    # ------------------------------------------------------------------ stake

    def provider_stake(self, provider: str) -> ProviderStake:
        info = self._read_struct(self.stake_manager, "stakeOf", provider)
        reserved, until = self._read(self.stake_manager, "reservationOf", provider)
        terms_set, ceiling, horizon = self._read(self.stake_manager, "reservationTermsOf", provider)
        return ProviderStake(provider=Web3.to_checksum_address(provider), bonded=info["bonded"],
                             locked=info["locked"] - reserved, unbonding=info["unbonding"],
                             tier=info["tier"], reserved=reserved, reserved_until=until,
                             terms=ReservationTerms(ceiling, horizon) if terms_set else None)

    def unbonding_lock(self, provider: str, lock_id: int) -> UnbondingLock | None:
        lock = self._read_struct(self.stake_manager, "unbondingLock", provider, lock_id)
        if lock["amount"] == 0:
            return None
        return UnbondingLock(lock_id=lock_id, amount=lock["amount"],
                             withdrawable_at=lock["withdrawable_at"])

    def open_unbonding_locks(self, provider: str) -> list[UnbondingLock]:
        """The provider's unbonding requests not yet withdrawn or cancelled, by lock id."""
        found = (self.unbonding_lock(provider, int(lock_id))
                 for lock_id in self._read(self.stake_manager, "openLocks", provider))
        return sorted((lock for lock in found if lock is not None), key=lambda lk: lk.lock_id)

    def locked_for(self, job_id: bytes, provider: str) -> int:
        return int(self._read(self.stake_manager, "lockedFor", job_id, provider))

    def epoch_root(self, epoch: int) -> bytes | None:
        root = bytes(self._read(self.stake_manager, "epochRoot", epoch))
        return None if root == bytes(32) else root

    def slash_of(self, slash_id: int) -> SlashRecord | None:
        slash = self._read_struct(self.stake_manager, "slashOf", slash_id)
        if slash["status"] == SlashStatus.NONE:
            return None
        return SlashRecord(slash_id=slash_id, provider=slash["provider"],
                           releasable_at=slash["releasable_at"],
                           status=SlashStatus(slash["status"]),
                           reason=SlashReason(slash["reason"]), beneficiary=slash["beneficiary"],
                           amount=slash["amount"], finder=slash["finder"],
                           finder_amount=slash["finder_amount"],
                           evidence=bytes(slash["evidence"]), prior_tier=slash["prior_tier"])

    def unbonding_period(self) -> int:
        return int(self._read(self.stake_manager, "unbondingPeriod"))

    # ------------------------------------------------------------------ escrow

    def escrowed_job(self, job_id: bytes) -> EscrowedJob | None:
        job = self._read_struct(self.job_escrow, "jobOf", job_id)
        if job["status"] == EscrowStatus.NONE:
            return None
        return EscrowedJob(job_id=bytes(job_id), customer=job["customer"], amount=job["amount"],
                           deadline=job["deadline"], spec_hash=bytes(job["spec_hash"]),
                           status=EscrowStatus(job["status"]))

    def settled_result_root(self, tx_hash: str, job_id: bytes) -> bytes | None:
        """The result root a mined settlement transaction committed for `job_id` (`settle`,
        `settleBatch` or `settleBatchSolo` to this escrow); None when the transaction did not
        succeed, is not a settlement, or does not settle that job. The root is only in the
        transaction (the escrow emits it, it does not store it), so evidence is checked here."""
        receipt = self.w3.eth.get_transaction_receipt(HexStr(tx_hash))
        tx = self.w3.eth.get_transaction(HexStr(tx_hash))
        if receipt["status"] != 1 or str(tx["to"]).lower() != self.job_escrow.address.lower():
            return None
        try:
            function, args = self.job_escrow.decode_function_input(tx["input"])
        except ValueError:
            return None
        name = function.fn_name
        if name == "settle":
            matches = [args] if bytes(args["jobId"]) == job_id else []
        elif name in ("settleBatch", "settleBatchSolo"):
            matches = [dict(zip(("jobId", "_", "__", "resultRoot"), item, strict=True))
                       if isinstance(item, tuple) else item for item in args["settlements"]]
            matches = [m for m in matches if bytes(m["jobId"]) == job_id]
        else:
            return None
        return bytes(matches[0]["resultRoot"]) if matches else None

    def refund_owed(self, job_id: bytes) -> int:
        """What a settled job still owes its customer (claimable after the dispute window)."""
        return int(self._read_struct(self.job_escrow, "jobOf", job_id)["refund"])

    def escrow_balance(self, account: str) -> EscrowBalance:
        balance = self._read_struct(self.job_escrow, "balanceOf", account)
        return EscrowBalance(claimable=balance["claimable"], pending=balance["pending"],
                             release_at=balance["release_at"], frozen=balance["frozen"])

    def settlement_dispute_window(self) -> int:
        return int(self._read(self.job_escrow, "disputeWindow"))

    def payout_period(self) -> int:
        """Payout release times are rounded up to whole periods: a payout settled at t is
        claimable by t + dispute window + one period."""
        return int(self._read(self.job_escrow, "PAYOUT_PERIOD"))

    def grace_period(self) -> int:
        return int(self._read(self.job_escrow, "gracePeriod"))

    # ------------------------------------------------------------------ disputes

    def dispute_of(self, dispute_id: int) -> DisputeRecord | None:
        dispute = self._read_struct(self.disputes, "disputeOf", dispute_id)
        if dispute["status"] == DisputeStatus.NONE:
            return None
        return DisputeRecord(dispute_id=dispute_id, opener=dispute["opener"],
                             ruling_deadline=dispute["ruling_deadline"],
                             kind=DisputeKind(dispute["kind"]),
                             status=DisputeStatus(dispute["status"]),
                             respondent=dispute["respondent"], bond=dispute["bond"],
                             subject=bytes(dispute["subject"]),
                             frozen_amount=dispute["frozen_amount"])

    def dispute_bond(self) -> int:
        return int(self._read(self.disputes, "bond"))

    def payout_proven(self, job_id: bytes, provider: str) -> bool:
        """Whether what `job_id` paid `provider` is proven on chain (`provePayout`): what a
        dispute of that payout may freeze at most."""
        proven, _paid, _frozen = self._read(self.job_escrow, "payeeOf", job_id,
                                            Web3.to_checksum_address(provider))
        return bool(proven)

    def settlement_pairs(self, tx_hash: str) -> list[tuple[bytes, str, int, bytes]]:
        """The (job, provider, payout, resultRoot) list the settlement `tx_hash` committed,
        read back from its calldata: what `provePayout` takes."""
        tx = self.w3.eth.get_transaction(HexBytes(tx_hash))
        function, args = self.job_escrow.decode_function_input(tx["input"])
        name = function.fn_name
        if name == "settle":
            return [(bytes(args["jobId"]), str(provider), int(payout), bytes(args["resultRoot"]))
                    for provider, payout in zip(args["providers"], args["payouts"], strict=True)]
        if name == "settleBatchSolo":
            return [(bytes(s["jobId"]), str(s["provider"]), int(s["payout"]),
                     bytes(s["resultRoot"])) for s in args["settlements"]]
        if name == "settleBatch":
            return [(bytes(s["jobId"]), str(provider), int(payout), bytes(s["resultRoot"]))
                    for s in args["settlements"]
                    for provider, payout in zip(s["providers"], s["payouts"], strict=True)]
        raise ChainError(f"{tx_hash} is a call of {name}, not a settlement")

    def is_arbiter(self, address: str) -> bool:
        """Whether `address` holds ARBITER_ROLE on the Disputes contract."""
        role = self._read(self.disputes, "ARBITER_ROLE")
        return bool(self._read(self.disputes, "hasRole", role,
                               Web3.to_checksum_address(address)))


class MeshAccount:
    """Transactions signed by one key. Which calls succeed depends on the key's roles."""

    def __init__(self, chain: MeshChain, account: LocalAccount) -> None:
        self.chain = chain
        self.sender = TransactionSender(chain.w3, account, chain.decoder)

    @property
    def address(self) -> str:
        return self.sender.address

    def _send(self, contract: Contract, function: str, *args: Any) -> Receipt:
        return self.sender.transact(contract.address, contract.encode_abi(function, args))

    def _event_arg(self, contract: Contract, receipt: Receipt, event: str, arg: str) -> Any:
        logs = contract.events[event]().process_receipt(receipt.raw, errors=DISCARD)
        if not logs:
            raise ChainError(f"{receipt.tx_hash} emitted no {event}")
        return logs[0]["args"][arg]

    # ------------------------------------------------------------------ token

    def approve(self, spender: str, amount: int) -> Receipt:
        return self._send(self.chain.token, "approve", spender, amount)

    def ensure_allowance(self, spender: str, amount: int) -> Receipt | None:
        """Approve `spender` only when the current allowance does not cover `amount`."""
        if self.chain.allowance(self.address, spender) >= amount:
            return None
        return self.approve(spender, amount)

    def transfer(self, to: str, amount: int) -> Receipt:
        return self._send(self.chain.token, "transfer", to, amount)

    def mint(self, to: str, amount: int) -> Receipt:
        """TestToken only: mint test funds (local chains and tests)."""
        return self._send(self.chain.token, "mint", to, amount)

    # ------------------------------------------------------------------ provider

    def stake(self, amount: int) -> Receipt:
        """Bond `amount`; approves the StakeManager first when the allowance is short."""
        self.ensure_allowance(self.chain.stake_manager.address, amount)
        return self._send(self.chain.stake_manager, "stake", amount)

    def request_unbond(self, amount: int) -> tuple[int, Receipt]:
        """Start unbonding `amount` of free stake; returns the new lock id with the receipt."""
        receipt = self._send(self.chain.stake_manager, "requestUnbond", amount)
        lock_id = self._event_arg(self.chain.stake_manager, receipt, "UnbondRequested", "lockId")
        return int(lock_id), receipt

    def cancel_unbond(self, lock_id: int) -> Receipt:
        return self._send(self.chain.stake_manager, "cancelUnbond", lock_id)

    def withdraw(self, lock_id: int) -> Receipt:
        return self._send(self.chain.stake_manager, "withdraw", lock_id)

    # ------------------------------------------------------------------ orchestrator role

    def set_tier(self, provider: str, tier: int) -> Receipt:
        return self._send(self.chain.stake_manager, "setTier", provider, tier)

    def commit_epoch(self, epoch: int, score_root: bytes) -> Receipt:
        return self._send(self.chain.stake_manager, "commitEpoch", epoch, score_root)

    # ------------------------------------------------------------------ slashing

    def slash_for_score(self, provider: str, epoch: int, score_bps: int,
                        telemetry_digest: bytes, proof: Sequence[bytes]) -> tuple[int, Receipt]:
        """Prove a low committed score; returns the slash id (0: demoted, nothing to slash).

        Commits to the finding first and reveals it in a later transaction (block), so a copy
        of the reveal earns a front-runner nothing.
        """
        salt = secrets.token_bytes(32)
        commitment = keccak(abi_encode(
            ["address", "address", "uint64", "uint256", "bytes32", "bytes32"],
            [self.address, provider, epoch, score_bps, telemetry_digest, salt]))
        self._send(self.chain.stake_manager, "commitFinding", commitment)
        receipt = self._send(self.chain.stake_manager, "slashForScore", provider, epoch,
                             score_bps, telemetry_digest, list(proof), salt)
        logs = self.chain.stake_manager.events.Slashed().process_receipt(receipt.raw,
                                                                       errors=DISCARD)
        return (int(logs[0]["args"]["slashId"]) if logs else 0), receipt

    def slash_collateral(self, job_id: bytes, provider: str, placement: int, amount: int,
                         reason: int, evidence: bytes) -> tuple[int, Receipt]:
        """Slash `provider`'s placement `placement` on `job_id` (0: its job lock)."""
        receipt = self._send(self.chain.stake_manager, "slashCollateral", job_id, provider,
                             placement, amount, reason, evidence)
        slash_id = self._event_arg(self.chain.stake_manager, receipt, "Slashed", "slashId")
        return int(slash_id), receipt

    def release_slash(self, slash_id: int) -> Receipt:
        return self._send(self.chain.stake_manager, "releaseSlash", slash_id)

    # ------------------------------------------------------------------ customer

    def create_job(self, job_id: bytes, amount: int, deadline: int, spec_hash: bytes) -> Receipt:
        """Escrow `amount` for `job_id`; approves the JobEscrow first if the allowance is short."""
        self.ensure_allowance(self.chain.job_escrow.address, amount)
        return self._send(self.chain.job_escrow, "createJob", job_id, amount, deadline, spec_hash)

    def claim_refund(self, job_id: bytes) -> tuple[int, Receipt]:
        """Customer: collect a settled job's unused escrow once its dispute window has passed."""
        receipt = self._send(self.chain.job_escrow, "claimRefund", job_id)
        amount = self._event_arg(self.chain.job_escrow, receipt, "RefundClaimed", "amount")
        return int(amount), receipt

    def reclaim(self, job_id: bytes) -> Receipt:
        return self._send(self.chain.job_escrow, "reclaim", job_id)

    def claim(self) -> tuple[int, Receipt]:
        """Collect everything claimable; returns the amount paid with the receipt."""
        receipt = self._send(self.chain.job_escrow, "claim")
        amount = self._event_arg(self.chain.job_escrow, receipt, "Claimed", "amount")
        return int(amount), receipt

    def release_collateral(self, job_id: bytes, providers: Sequence[str]) -> Receipt:
        return self._send(self.chain.job_escrow, "releaseCollateral", job_id, list(providers))

    # ------------------------------------------------------------------ orchestrator role

    def lock_collateral(self, job_id: bytes, providers: Sequence[str],
                        amounts: Sequence[int]) -> Receipt:
        return self._send(self.chain.job_escrow, "lockCollateral", job_id, list(providers),
                          list(amounts))

    def set_reservation_terms(self, ceiling: int, horizon_s: int) -> Receipt:
        """Provider: the most the orchestrator may reserve of this stake, lapsing at most
        `horizon_s` after it is made or extended (a lower bound never shrinks a live one)."""
        return self._send(self.chain.stake_manager, "setReservationTerms", ceiling, horizon_s)

    def reserve_collateral(self, providers: Sequence[str], amounts: Sequence[int],
                           until: int) -> Receipt:
        """Standing reservations: each provider's stake backing its assignments until `until`."""
        return self._send(self.chain.stake_manager, "reserveCollateral", list(providers),
                          list(amounts), until)

    def commit_assignments(self, root: bytes) -> Receipt:
        return self._send(self.chain.job_escrow, "commitAssignments", root)

    def prove_payout(self, job_id: bytes, provider: str,
                     pairs: Sequence[tuple[bytes, str, int, bytes]]) -> Receipt:
        """Prove what `job_id` paid `provider` from the list its settlement committed
        (`MeshChain.settlement_pairs`); anyone may."""
        return self._send(self.chain.job_escrow, "provePayout", job_id,
                          Web3.to_checksum_address(provider), list(pairs))

    def settle(self, job_id: bytes, providers: Sequence[str], payouts: Sequence[int],
               result_root: bytes) -> Receipt:
        return self._send(self.chain.job_escrow, "settle", job_id, list(providers),
                          list(payouts), result_root)

    def settle_batch(self, settlements: Sequence[Settlement]) -> Receipt:
        function, args = settle_batch_call(settlements)
        return self._send(self.chain.job_escrow, function, args)

    # ------------------------------------------------------------------ disputes

    def open_settlement_dispute(self, job_id: bytes, respondent: str, amount: int,
                                evidence: bytes) -> tuple[int, Receipt]:
        """Dispute a settlement inside its window, freezing `amount` of the respondent's payout.

        Approves the bond for the Disputes contract first when the allowance is short.
        """
        self.ensure_allowance(self.chain.disputes.address, self.chain.dispute_bond())
        receipt = self._send(self.chain.disputes, "disputeSettlement", job_id, respondent,
                             amount, evidence)
        return self._dispute_id(receipt), receipt

    def open_slash_dispute(self, slash_id: int, evidence: bytes) -> tuple[int, Receipt]:
        """The slashed provider disputes slash `slash_id`, posting the bond."""
        self.ensure_allowance(self.chain.disputes.address, self.chain.dispute_bond())
        receipt = self._send(self.chain.disputes, "disputeSlash", slash_id, evidence)
        return self._dispute_id(receipt), receipt

    def resolve_dispute(self, dispute_id: int, *, granted: bool, slash_amount: int = 0,
                        evidence: bytes = bytes(32)) -> Receipt:
        """Arbiter only: rule for the opener (`granted`) or the respondent."""
        return self._send(self.chain.disputes, "rule", dispute_id, granted, slash_amount,
                          evidence)

    def apply_default_ruling(self, dispute_id: int) -> Receipt:
        return self._send(self.chain.disputes, "applyDefaultRuling", dispute_id)

    def _dispute_id(self, receipt: Receipt) -> int:
        return int(self._event_arg(self.chain.disputes, receipt, "DisputeOpened", "disputeId"))
