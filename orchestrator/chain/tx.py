"""Send contract transactions signed locally: EIP-1559 fees, local nonces, decoded reverts.

Every transaction is gas-estimated before it is signed, so a call that would revert raises
the contract's custom error without spending a nonce or gas. Nonces are counted locally
(one RPC saved per transaction, which matters at anvil's ~145 tx/s) and re-read from the
chain whenever a send fails or the caller reverts chain state (`evm_revert`).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

from eth_account.signers.local import LocalAccount
from eth_account.typed_transactions import TypedTransaction
from hexbytes import HexBytes
from web3 import HTTPProvider, Web3
from web3.exceptions import ContractLogicError, Web3Exception, Web3RPCError
from web3.types import RPCEndpoint, TxParams, TxReceipt

from orchestrator.chain.errors import (
    ChainError,
    ErrorDecoder,
    OutOfGasError,
    RevertError,
    ran_out_of_gas,
)
from orchestrator.domain.fees import Fees
from orchestrator.domain.ids import hex0x

# What a node's refusal surfaces as (no gas money, a dropped transaction), named here so that
# callers outside chain/ can tell it from a bug without importing web3.
NodeError = Web3Exception
DEFAULT_PRIORITY_FEE_WEI = 1_000_000_000  # 1 gwei: enough on anvil and on quiet L2s
GAS_LIMIT_MARGIN = 1.2  # estimates are exact on anvil, but state may shift before inclusion
# A later block can make one storage write a fresh slot where the estimate overwrote one: a
# stake checkpoint is keyed by the block's timestamp, so within the second of the last one it
# is rewritten in place and in the next second appended (about 25,000 gas more, measured on
# an arbiter's ruling that restores a slash). A small call's margin alone does not cover it.
GAS_LIMIT_HEADROOM = 30_000


def connect(rpc_url: str, timeout_s: float = 30.0) -> Web3:
    """A Web3 over HTTP that keeps one pooled session.

    Only eth_chainId is cached: web3's validation asks for it twice per transaction, which
    costs a third of anvil throughput, and it cannot change under a running node. Blocks and
    receipts are never cached, because reorgs and `evm_revert` change them.
    """
    provider = HTTPProvider(rpc_url, request_kwargs={"timeout": timeout_s},
                            cache_allowed_requests=True,
                            cacheable_requests={RPCEndpoint("eth_chainId")})
    w3 = Web3(provider)
    if not w3.is_connected():
        raise ChainError(f"no JSON-RPC node answers at {rpc_url}")
    return w3


@dataclass(frozen=True, slots=True)
class Receipt:
    """What callers need from a mined transaction; `raw` keeps the logs for event decoding."""

    tx_hash: str
    gas_used: int
    block_number: int
    raw: TxReceipt = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class SignedTx:
    """A transaction signed but not yet sent: persist it first, then `broadcast` the bytes.

    Sending the same bytes again can never land twice (same nonce), which is what lets an
    outbox resend after a crash without knowing whether the first send reached the node.
    """

    raw: bytes
    tx_hash: str
    nonce: int
    fees: Fees


def revert_data(error: ContractLogicError) -> bytes:
    """The raw revert bytes web3 attached to the error (empty for a bare `revert()`)."""
    data = error.data
    if isinstance(data, str) and data.startswith("0x"):
        return bytes(HexBytes(data))
    return b""


class TransactionSender:
    """Signs and sends transactions for one key; safe to share between threads."""

    def __init__(
        self,
        w3: Web3,
        account: LocalAccount,
        decoder: ErrorDecoder,
        *,
        priority_fee_wei: int = DEFAULT_PRIORITY_FEE_WEI,
        receipt_timeout_s: float = 120.0,
        poll_latency_s: float = 0.01,
        base_fee_ttl_s: float = 1.0,
    ) -> None:
        self._w3 = w3
        self._account = account
        self._decoder = decoder
        self._priority_fee_wei = priority_fee_wei
        self._receipt_timeout_s = receipt_timeout_s
        self._poll_latency_s = poll_latency_s
        self._chain_id = w3.eth.chain_id
        self._nonce: int | None = None
        self._base_fee_ttl_s = base_fee_ttl_s
        self._cached_base_fee = 0
        self._base_fee_at = -math.inf
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return str(self._account.address)

    def resync_nonce(self) -> None:
        """Forget the local nonce; the next send re-reads it (after a revert of chain state)."""
        with self._lock:
            self._nonce = None

    def transact(self, to: str | None, data: str, value: int = 0) -> Receipt:
        """Estimate, sign, send, and wait for the receipt; raise the decoded error on revert."""
        request: dict[str, Any] = {"from": self.address, "data": data, "value": value}
        if to is not None:
            request["to"] = to
        gas_estimate = self._estimate_gas(request)
        with self._lock:
            try:
                tx_hash = self._sign_and_send(request, gas_estimate)
            except Web3RPCError as exc:
                # The node refused the transaction, so sending it again cannot pay twice.
                message = str(exc).lower()
                if "nonce" in message:
                    self._nonce = None  # another writer used this key
                elif "fee" in message:
                    self._base_fee_at = -math.inf  # base fee rose past our cached cap
                else:
                    raise
                tx_hash = self._sign_and_send(request, gas_estimate)
        raw = self._w3.eth.wait_for_transaction_receipt(
            tx_hash, timeout=self._receipt_timeout_s, poll_latency=self._poll_latency_s
        )
        if raw["status"] != 1:
            raise self._replay_failure(request, raw)
        return Receipt(
            tx_hash=hex0x(raw["transactionHash"]),
            gas_used=int(raw["gasUsed"]),
            block_number=int(raw["blockNumber"]),
            raw=raw,
        )

    def sign(self, to: str, data: str, value: int = 0, *, nonce: int | None = None,
             fees: Fees | None = None) -> SignedTx:
        """Estimate and sign WITHOUT sending (outbox: persist first).

        A revert raises the decoded error here, before any nonce is used. Without `nonce` the
        next local one is taken and counts as used from now on (if the bytes are never sent,
        call `resync_nonce`); an outbox that keeps its nonces in its database passes its own,
        and its `fees`.
        """
        request: dict[str, Any] = {"from": self.address, "to": to, "data": data, "value": value}
        gas_estimate = self._estimate_gas(request)
        with self._lock:
            local = nonce is None
            nonce = self._next_nonce() if nonce is None else nonce
            transaction = self._transaction(request, gas_estimate, nonce)
            if fees is not None:
                transaction |= {"maxFeePerGas": fees.max_fee_per_gas,
                                "maxPriorityFeePerGas": fees.max_priority_fee_per_gas}
            signed = self._signed(transaction)
            if local:
                self._nonce = nonce + 1
        return signed

    def replace(self, raw: bytes, fees: Fees) -> SignedTx:
        """The same transaction (nonce, call, gas) as the signed `raw`, with other fees: what
        a node takes in place of a stuck one when the fees rose enough (`domain.fees`)."""
        fields = TypedTransaction.from_bytes(HexBytes(raw)).as_dict()
        for signature_part in ("v", "r", "s"):
            fields.pop(signature_part, None)
        return self._signed({**fields, "maxFeePerGas": fees.max_fee_per_gas,
                             "maxPriorityFeePerGas": fees.max_priority_fee_per_gas})

    def filler(self, nonce: int, fees: Fees) -> SignedTx:
        """A transfer of nothing to ourselves at `nonce`: it fills a gap below our own waiting
        transactions (nonces must be used in order) and has no effect of its own."""
        return self._signed({"chainId": self._chain_id, "nonce": nonce, "to": self.address,
                             "value": 0, "data": b"", "gas": 21_000, "type": 2,
                             "maxFeePerGas": fees.max_fee_per_gas,
                             "maxPriorityFeePerGas": fees.max_priority_fee_per_gas})

    def _signed(self, transaction: dict[str, Any]) -> SignedTx:
        signed = self._account.sign_transaction(transaction)
        return SignedTx(raw=bytes(signed.raw_transaction),
                        tx_hash=hex0x(signed.hash), nonce=int(transaction["nonce"]),
                        fees=Fees(max_fee_per_gas=int(transaction["maxFeePerGas"]),
                                  max_priority_fee_per_gas=int(
                                      transaction["maxPriorityFeePerGas"])))

    def nonce_count(self, block: str) -> int:
        """Transactions of this key counted by the node: "latest" (mined) or "pending"
        (mined plus those waiting in its pool without a gap)."""
        return int(self._w3.eth.get_transaction_count(self._account.address, block))  # type: ignore[arg-type]

    def next_base_fee(self) -> int:
        """The next block's base fee, read now."""
        return int(self._w3.eth.get_block("pending")["baseFeePerGas"])

    def broadcast(self, raw: bytes) -> None:
        """Submit signed bytes; a node that already holds them counts as accepted."""
        try:
            self._w3.eth.send_raw_transaction(raw)
        except Web3RPCError as exc:
            if "already" not in str(exc).lower():  # anvil/geth: "already imported"/"known"
                raise

    def _transaction(self, request: dict[str, Any], gas_estimate: int,
                     nonce: int) -> dict[str, Any]:
        return {
            **{key: value for key, value in request.items() if key != "from"},
            "chainId": self._chain_id,
            "nonce": nonce,
            "gas": int(gas_estimate * GAS_LIMIT_MARGIN) + GAS_LIMIT_HEADROOM,
            "maxPriorityFeePerGas": self._priority_fee_wei,
            "maxFeePerGas": 2 * self._base_fee() + self._priority_fee_wei,
            "type": 2,
        }

    def _sign_and_send(self, request: dict[str, Any], gas_estimate: int) -> HexBytes:
        """Sign with the next local nonce and submit; the caller holds the lock."""
        nonce = self._next_nonce()
        signed = self._account.sign_transaction(self._transaction(request, gas_estimate, nonce))
        try:
            tx_hash = self._w3.eth.send_raw_transaction(signed.raw_transaction)
        except Exception:
            self._nonce = None  # unknown whether the node counted it: re-read next time
            raise
        self._nonce = nonce + 1
        return tx_hash

    def deploy(self, bytecode: str, constructor_args: bytes = b"") -> tuple[str, Receipt]:
        """Deploy creation code (+ ABI-encoded constructor args); returns the new address."""
        receipt = self.transact(None, bytecode + constructor_args.hex())
        address = receipt.raw["contractAddress"]
        if address is None:
            raise ChainError(f"deployment {receipt.tx_hash} produced no contract address")
        return str(address), receipt

    def _base_fee(self) -> int:
        """The next block's base fee, re-read at most every `base_fee_ttl_s` (saves an RPC per tx).

        A cap of twice the base fee survives six full blocks of increases; a node that
        still refuses the fee makes `transact` re-read it and send again.
        """
        now = time.monotonic()
        if now - self._base_fee_at > self._base_fee_ttl_s:
            self._cached_base_fee = self.next_base_fee()
            self._base_fee_at = now
        return self._cached_base_fee

    def _next_nonce(self) -> int:
        if self._nonce is None:
            self._nonce = self._w3.eth.get_transaction_count(self._account.address, "pending")
        return self._nonce

    def _estimate_gas(self, request: dict[str, Any]) -> int:
        # Against the pending block, where the transaction will run: a call that needs a block
        # after the last mined one (a score finding revealed after its commitment) estimates there.
        try:
            return int(self._w3.eth.estimate_gas(cast(TxParams, request), "pending"))
        except ContractLogicError as exc:
            raise self._decoder.decode(revert_data(exc)) from None

    def _replay_failure(self, request: dict[str, Any], raw: TxReceipt) -> ChainError:
        """A transaction that passed estimation but reverted when mined: replay it for the data."""
        block = int(raw["blockNumber"])
        tx_hash = hex0x(raw["transactionHash"])
        gas_limit = int(self._w3.eth.get_transaction(raw["transactionHash"])["gas"])
        if ran_out_of_gas(int(raw["gasUsed"]), gas_limit):
            return OutOfGasError(tx_hash, int(raw["gasUsed"]), gas_limit)
        try:
            self._w3.eth.call(cast(TxParams, request), block - 1)
        except ContractLogicError as exc:
            return self._decoder.decode(revert_data(exc))
        return RevertError(f"transaction {raw['transactionHash'].hex()} reverted when mined")
