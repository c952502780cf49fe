"""The web3 side of the outbox sender (`services.outbox`): each typed chain action's contract
call, signing (the slasher key for slashes), broadcasts, receipts, the escrow and epoch reads
that judge a revert, and the decoding of reverts (at estimation, or replayed when mined).

What to send, in what order and what an outcome means for the outbox rows and the jobs is
the service's; nothing here touches the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from hexbytes import HexBytes
from web3.contract import Contract
from web3.exceptions import ContractLogicError, TransactionNotFound, Web3Exception, Web3RPCError
from web3.types import TxParams

from orchestrator.chain.errors import ContractError, OutOfGasError, RevertError, ran_out_of_gas
from orchestrator.chain.sdk import MeshAccount, MeshChain, Settlement, settle_batch_call
from orchestrator.chain.tx import SignedTx, TransactionSender, revert_data
from orchestrator.domain.chain_actions import (
    AssignCollateral,
    ChainAction,
    CommitEpoch,
    ProveAssignment,
    ReserveCollateral,
    SetTier,
    SettleJob,
    SlashCollateral,
    assignment_tree,
)
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.fees import Fees
from orchestrator.domain.merkle import assignment_leaf

# Worth retrying: connection refused/reset, timeouts, a node refusing a request for now.
TRANSIENT_ERRORS = (OSError, Web3Exception)
Revert = ContractError | RevertError


class Resent(Enum):
    """What a node did with a transaction sent again."""

    IN_POOL = "in pool"  # taken (or already held): it waits to be mined
    NONCE_SPENT = "nonce spent"  # its nonce is used: it can never land
    # Its fees no longer get it in (the base fee rose past its cap, or the pool holds another
    # transaction at its nonce that pays more): only a replacement with higher fees can.
    UNDERPRICED = "underpriced"


@dataclass(frozen=True, slots=True)
class MinedReceipt:
    succeeded: bool
    block: int
    gas_used: int


def settlement_of(action: SettleJob) -> Settlement:
    """The escrow's view of one settle action (no result root: 32 zero bytes)."""
    return Settlement(job_id=action.job_id, providers=action.providers, payouts=action.payouts,
                      result_root=action.merkle_root or bytes(32))


def error_name(error: Revert) -> str:
    """The contract's custom error name, or "Revert" for one it does not name."""
    return error.name if isinstance(error, ContractError) else "Revert"


def named_job(error: Revert) -> bytes | None:
    """The job id a revert names (a batch's culprit), if it names one."""
    job_id = error.arguments.get("job_id") if isinstance(error, ContractError) else None
    return job_id if isinstance(job_id, bytes) else None


class OutboxChain:
    """Signs with the orchestrator's key (and the slasher's for slashes) on one deployment."""

    def __init__(self, chain: MeshChain, account: MeshAccount,
                 slasher: MeshAccount | None = None) -> None:
        self.chain = chain
        self.account = account
        self.slasher = slasher or account

    def signer(self, kind: str) -> MeshAccount:
        """The key that signs actions of `kind`: the slasher's for slashes."""
        return self.slasher if kind == SlashCollateral.kind else self.account

    def sender_of(self, address: str) -> TransactionSender:
        return next(signer.sender for signer in (self.account, self.slasher)
                    if signer.address == address)

    # ----- signing (a revert at estimation raises the decoded `Revert`)

    def sign(self, action: ChainAction, *, nonce: int, fees: Fees) -> SignedTx:
        """One transaction for one non-settle action, at the outbox's nonce and fees."""
        contract, function, args = self._call_for(action)
        return self.signer(action.kind).sender.sign(
            contract.address, contract.encode_abi(function, args), nonce=nonce, fees=fees)

    def sign_settlements(self, actions: Sequence[SettleJob], *, nonce: int,
                         fees: Fees) -> SignedTx:
        """One `settleBatch(Solo)` for every settle in `actions`."""
        function, args = settle_batch_call([settlement_of(a) for a in actions])
        escrow = self.chain.job_escrow
        return self.account.sender.sign(escrow.address, escrow.encode_abi(function, (args,)),
                                        nonce=nonce, fees=fees)

    def _escrow_call(self, function: str, args: tuple[object, ...], *, nonce: int,
                     fees: Fees) -> SignedTx:
        escrow = self.chain.job_escrow
        return self.account.sender.sign(escrow.address, escrow.encode_abi(function, args),
                                        nonce=nonce, fees=fees)

    def sign_assignments(self, actions: Sequence[AssignCollateral], *, nonce: int,
                         fees: Fees) -> SignedTx:
        """One `commitAssignments` of the root over every assign in `actions`."""
        return self._escrow_call("commitAssignments", (assignment_tree(actions).root,),
                                 nonce=nonce, fees=fees)

    def sign_proof(self, action: ProveAssignment, batch: Sequence[AssignCollateral], *,
                   nonce: int, fees: Fees) -> SignedTx:
        """`proveAssignment` of the placement `action` names, from `batch`, the assigns one
        committed root was built over (the placement being slashed, whatever else the root
        holds for the same job and provider)."""
        wanted = (action.job_id, action.provider, action.placement)
        assign = next(a for a in batch if (a.job_id, a.provider, a.placement) == wanted)
        proof = assignment_tree(batch).proof(assignment_leaf(
            assign.job_id, assign.provider, assign.placement, assign.collateral))
        return self._escrow_call("proveAssignment", (assign.job_id, assign.provider,
                                                     assign.placement, assign.collateral,
                                                     proof), nonce=nonce, fees=fees)

    def simulate_settlement(self, action: SettleJob) -> Revert | None:
        """The revert this settle would hit on its own, or None when it would land. On the
        pending block, as the batch's estimate was made: a settlement of one of its jobs
        waiting in the pool must show as that job's revert, not as the whole batch's."""
        try:
            function, args = settle_batch_call([settlement_of(action)])
            self.chain.job_escrow.functions[function](args).call(
                {"from": self.account.address}, "pending")
        except ContractLogicError as exc:
            error = self.chain.decoder.decode(revert_data(exc))
            return error if isinstance(error, ContractError | RevertError) else RevertError(
                str(error))
        return None

    def _call_for(self, action: ChainAction) -> tuple[Contract, str, tuple[Any, ...]]:
        if isinstance(action, CommitEpoch):
            return self.chain.stake_manager, "commitEpoch", (action.epoch, action.root)
        if isinstance(action, ReserveCollateral):
            return self.chain.stake_manager, "reserveCollateral", (
                [action.provider], [action.amount], action.until)
        if isinstance(action, SetTier):
            return self.chain.stake_manager, "setTier", (action.provider, action.tier)
        if isinstance(action, SlashCollateral):
            return self.chain.stake_manager, "slashCollateral", (
                action.job_id, action.provider, action.placement, action.amount, action.reason,
                action.evidence)
        raise TypeError(f"{type(action).__name__} goes out in a batch or with its proof")

    # ----- broadcasts and receipts

    def broadcast(self, raw: bytes) -> None:
        self.account.sender.broadcast(raw)

    def rebroadcast(self, raw_hex: str) -> Resent:
        """Send persisted bytes again, and say what the node made of them."""
        try:
            self.account.sender.broadcast(bytes(HexBytes(raw_hex)))
        except Web3RPCError as exc:
            message = str(exc).lower()
            if "nonce too low" in message:
                return Resent.NONCE_SPENT
            if "underpriced" in message or "less than block base fee" in message:
                return Resent.UNDERPRICED
            raise
        return Resent.IN_POOL

    def receipt(self, tx_hash: str) -> MinedReceipt | None:
        try:
            receipt = self.chain.w3.eth.get_transaction_receipt(HexBytes(tx_hash))
        except TransactionNotFound:
            return None
        return MinedReceipt(succeeded=receipt["status"] == 1, block=int(receipt["blockNumber"]),
                            gas_used=int(receipt["gasUsed"]))

    def latest_block(self) -> int:
        return int(self.chain.w3.eth.block_number)

    def mined_revert(self, tx_hash: str, receipt: MinedReceipt) -> Revert:
        """Why a mined transaction reverted: out of gas (`OutOfGasError`), or else the same
        call on the state before its block."""
        tx = self.chain.w3.eth.get_transaction(HexBytes(tx_hash))
        if ran_out_of_gas(receipt.gas_used, int(tx["gas"])):
            return OutOfGasError(tx_hash, receipt.gas_used, int(tx["gas"]))
        block = receipt.block
        request: TxParams = {"from": tx["from"], "to": tx["to"], "data": tx["input"],
                             "value": tx["value"], "gas": tx["gas"]}
        try:
            self.chain.w3.eth.call(request, block - 1)
        except ContractLogicError as exc:
            error = self.chain.decoder.decode(revert_data(exc))
            if isinstance(error, ContractError | RevertError):
                return error
        return RevertError(f"{tx_hash} reverted when mined (the state changed)")

    # ----- reads that judge an outcome

    def escrow_status(self, job_id: bytes) -> EscrowStatus:
        escrow = self.chain.escrowed_job(job_id)
        return escrow.status if escrow is not None else EscrowStatus.NONE

    def epoch_root(self, epoch: int) -> bytes | None:
        return self.chain.epoch_root(epoch)
