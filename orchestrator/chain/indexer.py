"""The chain side of the event indexer: heights, block hashes and decoded logs of the mesh
contracts, read in adaptive chunks. It keeps nothing: the cursor, the stored hashes and the
events live in the DB, and `services/chain_index.py` decides what to roll back and re-read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import requests
from eth_typing import HexStr
from eth_utils import event_abi_to_log_topic
from web3.contract import Contract
from web3.exceptions import BlockNotFound, TransactionNotFound, Web3RPCError

from orchestrator.chain.errors import ChainError
from orchestrator.chain.sdk import MeshChain
from orchestrator.domain.chain_events import ChainEvent, Heights, LogChunk

FINALITY_TAGS = ("finalized", "safe", "none")
# What nodes answer when an eth_getLogs range holds too much (geth, erigon, nethermind,
# Alchemy, Infura, QuickNode, Ankr phrase it differently).
_TOO_LARGE = ("more than", "too many", "limit exceeded", "exceeds", "too large", "block range",
              "response size", "timeout", "timed out")


class LogRangeTooLarge(ChainError):
    """The node refused or timed out on an eth_getLogs range: read a smaller one."""


class ChainIndexReader:
    """Reads the StakeManager, JobEscrow and Disputes logs of one deployment."""

    def __init__(self, chain: MeshChain, *, finality_tag: str = "finalized",
                 max_chunk: int = 2_000) -> None:
        if finality_tag not in FINALITY_TAGS:
            raise ValueError(f"finality tag {finality_tag!r} is not one of {FINALITY_TAGS}")
        self.w3 = chain.w3
        self.finality_tag = finality_tag
        self.max_chunk = max_chunk
        self.start_block = chain.deployment.deployed_at_block
        self._contracts: dict[str, tuple[str, Contract]] = {}
        self._events: dict[tuple[str, bytes], str] = {}  # (address, topic0) -> event name
        for name, contract in (("StakeManager", chain.stake_manager),
                               ("JobEscrow", chain.job_escrow), ("Disputes", chain.disputes)):
            address = str(contract.address)
            self._contracts[address.lower()] = (name, contract)
            for abi in contract.abi:
                if abi["type"] == "event" and not abi.get("anonymous", False):
                    self._events[(address.lower(), event_abi_to_log_topic(abi))] = abi["name"]

    @property
    def addresses(self) -> list[str]:
        return [str(contract.address) for _, contract in self._contracts.values()]

    def heights(self, margin: int) -> Heights:
        """The head, and the finality point: `margin` blocks below the head, or the chain's
        finality tag where it offers one and it is the stricter of the two."""
        head = int(self.w3.eth.block_number)
        final = head - margin
        if self.finality_tag != "none":
            try:
                tag = cast(Literal["finalized", "safe"], self.finality_tag)
                tagged = int(self.w3.eth.get_block(tag)["number"])
            except (BlockNotFound, Web3RPCError, ValueError):
                tagged = None  # the node knows no such tag: the margin alone decides
            if tagged is not None:
                final = min(final, tagged)
        return Heights(head=head, final=max(final, -1))

    def block_hashes(self, numbers: Sequence[int]) -> dict[int, bytes]:
        """The canonical chain's hash at each height (absent: the chain is shorter now)."""
        hashes: dict[int, bytes] = {}
        for number in numbers:
            try:
                hashes[number] = bytes(self.w3.eth.get_block(number)["hash"])
            except BlockNotFound:
                break
        return hashes

    def mined_at(self, tx_hashes: Sequence[str]) -> dict[str, int]:
        """Of `tx_hashes` (0x hex), those the canonical chain has a receipt for, and its block."""
        mined: dict[str, int] = {}
        for tx_hash in tx_hashes:
            try:
                receipt = self.w3.eth.get_transaction_receipt(HexStr(tx_hash))
            except TransactionNotFound:
                continue
            mined[tx_hash] = int(receipt["blockNumber"])
        return mined

    def read_logs(self, from_block: int, to_block: int, chunk: int) -> LogChunk:
        """Logs of `chunk` blocks from `from_block` (at most to `to_block`), halving the chunk
        while the node says the range is too large; grows it by half after a success."""
        chunk = max(1, min(chunk, self.max_chunk))
        while True:
            last = min(to_block, from_block + chunk - 1)
            try:
                events = self._logs(from_block, last)
            except LogRangeTooLarge:
                if chunk == 1:
                    raise
                chunk = max(1, chunk // 2)
                continue
            return LogChunk(events=events, last_block=last,
                            chunk=min(self.max_chunk, chunk + max(1, chunk // 2)))

    def _logs(self, from_block: int, to_block: int) -> list[ChainEvent]:
        try:
            logs = self.w3.eth.get_logs({"fromBlock": from_block, "toBlock": to_block,
                                         "address": self.addresses})  # type: ignore[typeddict-item]
        except requests.Timeout as exc:
            raise LogRangeTooLarge(f"eth_getLogs {from_block}-{to_block}: {exc}") from None
        except Web3RPCError as exc:
            if any(marker in str(exc).lower() for marker in _TOO_LARGE):
                raise LogRangeTooLarge(f"eth_getLogs {from_block}-{to_block}: {exc}") from None
            raise
        events = [event for log in logs if (event := self._decode(log)) is not None]
        events.sort(key=lambda event: event.key)
        return events

    def _decode(self, log: Any) -> ChainEvent | None:
        address = str(log["address"]).lower()
        if log.get("removed") or not log["topics"]:
            return None
        name = self._events.get((address, bytes(log["topics"][0])))
        if name is None:
            return None  # an event of an ABI newer than ours: nothing here reflects it
        contract_name, contract = self._contracts[address]
        decoded = contract.events[name]().process_log(log)
        return ChainEvent(contract=contract_name, name=name,
                          args={key: _plain(value) for key, value in decoded["args"].items()},
                          block_number=int(log["blockNumber"]),
                          block_hash=bytes(log["blockHash"]),
                          tx_hash=bytes(log["transactionHash"]), log_index=int(log["logIndex"]))


def _plain(value: Any) -> Any:
    """web3's decoded values (HexBytes, tuples) as plain Python ones."""
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, list | tuple):
        return tuple(_plain(item) for item in value)
    return value
