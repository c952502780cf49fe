"""A contract event as the orchestrator keeps it: decoded, free of web3 types, and placed on
the chain by block and log index so it can be ordered, deduplicated and rolled back on a reorg.

The indexer (`chain/`) produces these; services subscribe to the ones they reflect (free stake,
escrows, settlements, slashes, disputes and their rulings)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ChainEvent:
    contract: str  # deployment name: "StakeManager", "JobEscrow" or "Disputes"
    name: str  # event name as in the contract's ABI, e.g. "DisputeRuled"
    args: Mapping[str, Any]  # decoded arguments: ints, checksummed addresses, bytes
    block_number: int
    block_hash: bytes  # 32 bytes; a reorg shows as a new hash at the same height
    tx_hash: bytes  # 32 bytes
    log_index: int  # position in the block: (block_number, log_index) orders all events

    @property
    def key(self) -> tuple[int, int]:
        """Where the event sits on its chain: unique per canonical chain, total order."""
        return (self.block_number, self.log_index)


@dataclass(frozen=True, slots=True)
class Heights:
    """Where an indexer pass stands: the head, and the highest block treated as final."""

    head: int
    final: int  # -1: none yet


@dataclass(frozen=True, slots=True)
class LogChunk:
    """One eth_getLogs range read: its events in chain order, the last block it covered, and
    the range size to ask for next (grown after a success, shrunk after a refusal)."""

    events: list[ChainEvent]
    last_block: int
    chunk: int


# Arguments as JSON: ints become decimal text (wei overflow JSON numbers in some backends) and
# bytes hex, each tagged so that `args_from_json` gives back exactly what the ABI decoded.
def args_to_json(args: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _to_json(value) for name, value in args.items()}


def args_from_json(data: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _from_json(value) for name, value in data.items()}


def _to_json(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return f"i:{value}"
    if isinstance(value, bytes | bytearray):
        return "b:" + bytes(value).hex()
    if isinstance(value, str):
        return f"s:{value}"
    if isinstance(value, list | tuple):
        return [_to_json(item) for item in value]
    raise TypeError(f"cannot store event argument {value!r}")


def _from_json(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, list):
        return tuple(_from_json(item) for item in value)
    tag, text = value[:2], value[2:]
    if tag == "i:":
        return int(text)
    if tag == "b:":
        return bytes.fromhex(text)
    if tag == "s:":
        return text
    raise ValueError(f"unknown stored event argument {value!r}")


# Argument names that say whom or what an event concerns, so a read model finds every event of
# one provider, job or dispute without scanning them all.
_ACCOUNT_ARGS = ("provider", "account", "customer", "opener", "respondent")
_ID_ARGS = {"jobId": "job", "disputeId": "dispute", "slashId": "slash", "epoch": "epoch"}


def subject_key(kind: str, value: Any) -> str:
    """The lookup key of one subject: `provider:0xAbC…`, `job:0x…`, `dispute:7`."""
    if isinstance(value, bytes):
        return f"{kind}:0x{value.hex()}"
    return f"{kind}:{value}"


def subjects(event: ChainEvent) -> set[str]:
    """Every subject `event` concerns (a batch settlement concerns each of its jobs)."""
    found = {subject_key("account", event.args[name])
             for name in _ACCOUNT_ARGS if name in event.args}
    for name, kind in _ID_ARGS.items():
        value = event.args.get(name)
        if (value is not None and value not in (bytes(32), 0)) or (name == "epoch" and value == 0):
            found.add(subject_key(kind, value))  # a zero job or slash id means "none"
    for job_id in event.args.get("jobIds", ()):
        found.add(subject_key("job", job_id))
    if event.name == "DisputeOpened":  # kind 0: a settlement's job id; 1: a slash id as bytes32
        subject = event.args["subject"]
        found.add(subject_key("job", subject) if event.args["kind"] == 0
                  else subject_key("slash", int.from_bytes(subject, "big")))
    return found
