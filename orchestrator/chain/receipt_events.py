"""The mesh contracts' logs in one transaction receipt, as `ChainEvent`s.

What a sender learns from its own receipt (a dispute it just opened, a ruling it just made)
and what the event indexer reads block by block have the same shape, so the services that
reflect events take either."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from eth_typing import ABIEvent
from eth_utils import event_abi_to_log_topic
from web3.contract import Contract
from web3.types import LogReceipt

from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import Receipt
from orchestrator.domain.chain_events import ChainEvent


def _plain(value: Any) -> Any:
    """web3's HexBytes and AttributeDicts as bytes, lists and dicts (the ChainEvent contract)."""
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _contracts(chain: MeshChain) -> dict[str, tuple[str, Contract]]:
    return {contract.address.lower(): (name, contract) for name, contract in (
        ("StakeManager", chain.stake_manager), ("JobEscrow", chain.job_escrow),
        ("Disputes", chain.disputes))}


def decode_log(chain: MeshChain, log: LogReceipt) -> ChainEvent | None:
    """The event of one log of a mesh contract; None for anyone else's log (the token's)."""
    found = _contracts(chain).get(str(log["address"]).lower())
    if found is None or not log["topics"]:
        return None
    name, contract = found
    topic = bytes(log["topics"][0])
    for entry in contract.abi:
        if entry.get("type") == "event" and event_abi_to_log_topic(cast(ABIEvent, entry)) == topic:
            decoded = contract.events[str(cast(ABIEvent, entry)["name"])]().process_log(log)
            return ChainEvent(contract=name, name=str(decoded["event"]),
                              args=_plain(dict(decoded["args"])),
                              block_number=int(log["blockNumber"]),
                              block_hash=bytes(log["blockHash"]), tx_hash=bytes(
                                  log["transactionHash"]), log_index=int(log["logIndex"]))
    return None


def receipt_events(chain: MeshChain, receipt: Receipt) -> list[ChainEvent]:
    """Every mesh-contract event the transaction emitted, in log order."""
    events = (decode_log(chain, log) for log in receipt.raw["logs"])
    return [event for event in events if event is not None]
