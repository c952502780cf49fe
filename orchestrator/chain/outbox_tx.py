"""The web3 side of the outbox sender (`services.outbox`): each typed chain action's contract
call, signing (the slasher key for slashes), broadcasts, receipts, the escrow and epoch reads
that judge a revert, and the decoding of reverts (at estimation, or replayed when mined).

What to send, in what order and what an outcome means for the outbox rows and the jobs is
the service's; nothing here touches the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hexbytes import HexBytes
from web3.contract import Contract
from web3.exceptions import ContractLogicError, TransactionNotFound, Web3Exception, Web3RPCError
from web3.types import TxParams

from orchestrator.chain.errors import ContractError, RevertError
from orchestrator.chain.sdk import MeshAccount, MeshChain, Settlement, settle_batch_call
from orchestrator.chain.tx import SignedTx, revert_data
from orchestrator.domain.chain_actions import (
    ChainAction,
    CommitEpoch,
    LockCollateral,
    SetTier,
    SettleJob,
    SlashCollateral,
)
from orchestrator.domain.chain_views import EscrowStatus

# Worth retrying: connection refused/reset, timeouts, a node refusing a request for now.
TRANSIENT_ERRORS = (OSError, Web3Exception)
Revert = ContractError | RevertError


@dataclass(frozen=True, slots=True)
class MinedReceipt:
    succeeded: bool
    block: int


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

    def resync_nonces(self) -> None:
        """The chain's pending count is the truth for the next nonce of both keys."""
        self.account.sender.resync_nonce()
        self.slasher.sender.resync_nonce()

    # ----- signing (a revert at estimation raises the decoded `Revert`)

    def sign(self, action: ChainAction) -> SignedTx:
        """One transaction for one non-settle action."""
        contract, function, args = self._call_for(action)
        signer = self.slasher if isinstance(action, SlashCollateral) else self.account
        return signer.build_signed(contract, function, *args)

    def sign_settlements(self, actions: Sequence[SettleJob]) -> SignedTx:
        """One `settleBatch(Solo)` for every settle in `actions`."""
        function, args = settle_batch_call([settlement_of(a) for a in actions])
        return self.account.build_signed(self.chain.job_escrow, function, args)

    def simulate_settlement(self, action: SettleJob) -> Revert | None:
        """The revert this settle would hit on its own, or None when it would land."""
        try:
            function, args = settle_batch_call([settlement_of(action)])
            self.chain.job_escrow.functions[function](args).call({"from": self.account.address})
        except ContractLogicError as exc:
            error = self.chain.decoder.decode(revert_data(exc))
            return error if isinstance(error, ContractError | RevertError) else RevertError(
                str(error))
        return None

    def _call_for(self, action: ChainAction) -> tuple[Contract, str, tuple[Any, ...]]:
        if isinstance(action, CommitEpoch):
            return self.chain.stake_manager, "commitEpoch", (action.epoch, action.root)
        if isinstance(action, LockCollateral):
            return self.chain.job_escrow, "lockCollateral", (
                action.job_id, list(action.providers), list(action.amounts))
        if isinstance(action, SetTier):
            return self.chain.stake_manager, "setTier", (action.provider, action.tier)
        if isinstance(action, SlashCollateral):
            return self.chain.stake_manager, "slashCollateral", (
                action.job_id, action.provider, action.amount, action.reason, action.evidence)
        raise TypeError(f"{type(action).__name__} goes out in a settle batch")

    # ----- broadcasts and receipts

    def broadcast(self, raw: bytes) -> None:
        self.account.sender.broadcast(raw)

    def rebroadcast(self, raw_hex: str) -> bool:
        """Send persisted bytes again; False when the node says their nonce is spent."""
        try:
            self.account.sender.broadcast(bytes(HexBytes(raw_hex)))
        except Web3RPCError as exc:
            if "nonce too low" not in str(exc).lower():
                raise
            return False
        return True

    def receipt(self, tx_hash: str) -> MinedReceipt | None:
        try:
            receipt = self.chain.w3.eth.get_transaction_receipt(HexBytes(tx_hash))
        except TransactionNotFound:
            return None
        return MinedReceipt(succeeded=receipt["status"] == 1, block=int(receipt["blockNumber"]))

    def latest_block(self) -> int:
        return int(self.chain.w3.eth.block_number)

    def mined_revert(self, tx_hash: str, block: int) -> Revert:
        """Why a mined transaction reverted: the same call on the state before its block."""
        tx = self.chain.w3.eth.get_transaction(HexBytes(tx_hash))
        request: TxParams = {"from": tx["from"], "to": tx["to"], "data": tx["input"],
                             "value": tx["value"], "gas": tx["gas"]}
        try:
            self.chain.w3.eth.call(request, block - 1)
        except ContractLogicError as exc:
            error = self.chain.decoder.decode(revert_data(exc))
            if isinstance(error, ContractError | RevertError):
                return error
        return RevertError(f"{tx_hash} reverted when mined (out of gas or state changed)")

    # ----- reads that judge an outcome

    def escrow_status(self, job_id: bytes) -> EscrowStatus:
        escrow = self.chain.escrowed_job(job_id)
        return escrow.status if escrow is not None else EscrowStatus.NONE

    def epoch_root(self, epoch: int) -> bytes | None:
        return self.chain.epoch_root(epoch)
