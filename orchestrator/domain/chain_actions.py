"""The chain actions the orchestrator queues in its outbox, typed, and their one codec.

An outbox row stores an action's `kind` and a JSON payload: bytes32 as 0x-hex, addresses
EIP-55 checksummed, token amounts as decimal strings. `encode` writes the payload; `decode`
reads a row back and validates every field, so a malformed row is refused with the field it
got wrong (`PayloadError`) before any transaction is built from it. An action that exists is
valid: each one checks its fields when it is made.

Kind `lock` (a per-job `JobEscrow.lockCollateral`) is no longer queued: placements are
`assign` leaves backed by a provider's standing `reserve`, so a leftover `lock` row fails
as an unknown kind.

Versions: a payload without "v" is version 1, the format of every row written so far;
`decode` refuses any other version. Keys a version does not define are ignored.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from eth_utils import is_address, to_checksum_address

from orchestrator.domain.ids import hex0x, unhex
from orchestrator.domain.merkle import MerkleTree, assignment_leaf, check_placement

PAYLOAD_VERSION = 1
UINT256_LIMIT = 2**256


class PayloadError(ValueError):
    """A queued payload no transaction can be built from (a bug upstream, not the chain)."""


@dataclass(frozen=True, slots=True)
class ReserveCollateral:
    """StakeManager.reserveCollateral: a provider's standing reservation, raised or extended
    (rare: it backs every assignment of the provider until `until`)."""

    kind: ClassVar[str] = "reserve"
    provider: str
    amount: int
    until: int  # unix seconds the reservation lapses

    def __post_init__(self) -> None:
        _set(self, "provider", _address(self.provider, "provider"))
        _set(self, "amount", _uint(self.amount, "amount"))
        _set(self, "until", _uint(self.until, "until"))


@dataclass(frozen=True, slots=True)
class AssignCollateral:
    """One leaf of JobEscrow.commitAssignments: the provider's reservation backs its placement
    `placement` (`merkle.placement_id` of the task attempt) with `collateral`; consecutive
    assigns go out as one committed root."""

    kind: ClassVar[str] = "assign"
    job_id: bytes
    provider: str
    placement: int
    collateral: int

    def __post_init__(self) -> None:
        _set(self, "job_id", _bytes32(self.job_id, "job_id"))
        _set(self, "provider", _address(self.provider, "provider"))
        _set(self, "placement", _placement(self.placement))
        _set(self, "collateral", _uint(self.collateral, "collateral"))


@dataclass(frozen=True, slots=True)
class ProveAssignment:
    """JobEscrow.proveAssignment: puts one committed placement on chain before a slash names
    it (the sender builds the proof from the assign rows of the same root)."""

    kind: ClassVar[str] = "prove"
    job_id: bytes
    provider: str
    placement: int

    def __post_init__(self) -> None:
        _set(self, "job_id", _bytes32(self.job_id, "job_id"))
        _set(self, "provider", _address(self.provider, "provider"))
        _set(self, "placement", _placement(self.placement))


@dataclass(frozen=True, slots=True)
class SettleJob:
    """JobEscrow.settleBatch(Solo): a verified job's payouts and result root; consecutive
    settles go out as one batch."""

    kind: ClassVar[str] = "settle"
    job_id: bytes
    providers: tuple[str, ...]
    payouts: tuple[int, ...]
    merkle_root: bytes | None = None  # None: the job committed no artifacts

    def __post_init__(self) -> None:
        _set(self, "job_id", _bytes32(self.job_id, "job_id"))
        _set(self, "providers", tuple(_address(p, "providers") for p in self.providers))
        _set(self, "payouts", tuple(_uint(p, "payouts") for p in self.payouts))
        _same_length(self.providers, "providers", self.payouts, "payouts")
        if self.merkle_root is not None:
            _set(self, "merkle_root", _bytes32(self.merkle_root, "merkle_root"))


@dataclass(frozen=True, slots=True)
class CommitEpoch:
    """StakeManager.commitEpoch: the Merkle root of an epoch's provider scores."""

    kind: ClassVar[str] = "commit"
    epoch: int
    root: bytes

    def __post_init__(self) -> None:
        _set(self, "epoch", _uint(self.epoch, "epoch"))
        _set(self, "root", _bytes32(self.root, "root"))


@dataclass(frozen=True, slots=True)
class SetTier:
    """StakeManager.setTier: a provider's tier after the staking policy changed it."""

    kind: ClassVar[str] = "tier"
    provider: str
    tier: int
    node_id: str | None = None  # the node whose record moved the tier: for operators
    detail: str | None = None  # the policy's reason: for operators

    def __post_init__(self) -> None:
        _set(self, "provider", _address(self.provider, "provider"))
        _set(self, "tier", _uint(self.tier, "tier"))


@dataclass(frozen=True, slots=True)
class SlashCollateral:
    """StakeManager.slashCollateral, signed by the slasher: collateral of one placement (a task
    attempt) taken, up to that placement's own amount."""

    kind: ClassVar[str] = "slash"
    job_id: bytes
    provider: str
    placement: int
    amount: int
    reason: int  # domain.types.SlashReason
    evidence: bytes

    def __post_init__(self) -> None:
        _set(self, "job_id", _bytes32(self.job_id, "job_id"))
        _set(self, "provider", _address(self.provider, "provider"))
        _set(self, "placement", _placement(self.placement))
        _set(self, "amount", _uint(self.amount, "amount"))
        _set(self, "reason", _uint(self.reason, "reason"))
        _set(self, "evidence", _bytes32(self.evidence, "evidence"))


def assignment_tree(assigns: Sequence[AssignCollateral]) -> MerkleTree:
    """The tree `JobEscrow.commitAssignments` commits the root of, over one batch of assigns."""
    return MerkleTree.build([assignment_leaf(a.job_id, a.provider, a.placement, a.collateral)
                             for a in assigns])


ChainAction = (ReserveCollateral | AssignCollateral | ProveAssignment | SettleJob | CommitEpoch
               | SetTier | SlashCollateral)


def encode(action: ChainAction) -> dict[str, Any]:
    """The payload stored for `action` (its row's kind is `action.kind`)."""
    if isinstance(action, ReserveCollateral):
        return {"provider": action.provider, "amount": str(action.amount), "until": action.until}
    if isinstance(action, AssignCollateral):
        return {"job_id": hex0x(action.job_id), "provider": action.provider,
                "placement": str(action.placement), "collateral": str(action.collateral)}
    if isinstance(action, ProveAssignment):
        return {"job_id": hex0x(action.job_id), "provider": action.provider,
                "placement": str(action.placement)}
    if isinstance(action, SettleJob):
        return {"job_id": hex0x(action.job_id), "providers": list(action.providers),
                "payouts": [str(p) for p in action.payouts],
                "merkle_root": None if action.merkle_root is None else hex0x(action.merkle_root)}
    if isinstance(action, CommitEpoch):
        return {"epoch": action.epoch, "root": hex0x(action.root)}
    if isinstance(action, SetTier):
        return _with_context({"provider": action.provider, "tier": action.tier},
                             node_id=action.node_id, detail=action.detail)
    return {"job_id": hex0x(action.job_id), "provider": action.provider,
            "placement": str(action.placement), "amount": str(action.amount),
            "reason": action.reason,
            "evidence": hex0x(action.evidence)}


def decode(kind: str, payload: Mapping[str, Any]) -> ChainAction:
    """The action a stored row holds; `PayloadError` names the first field that is wrong."""
    version = payload.get("v", PAYLOAD_VERSION)
    if version != PAYLOAD_VERSION:
        raise PayloadError(f"payload version {version!r} is not {PAYLOAD_VERSION}")
    reader = _READERS.get(kind)
    if reader is None:
        raise PayloadError(f"unknown outbox kind {kind!r}")
    return reader(payload)


def _read_reserve(payload: Mapping[str, Any]) -> ReserveCollateral:
    return ReserveCollateral(provider=payload.get("provider"),  # type: ignore[arg-type]
                             amount=payload.get("amount"),  # type: ignore[arg-type]
                             until=payload.get("until"))  # type: ignore[arg-type]


def _read_assign(payload: Mapping[str, Any]) -> AssignCollateral:
    return AssignCollateral(job_id=_hex_field(payload, "job_id"),
                            provider=payload.get("provider"),  # type: ignore[arg-type]
                            placement=payload.get("placement"),  # type: ignore[arg-type]
                            collateral=payload.get("collateral"))  # type: ignore[arg-type]


def _read_prove(payload: Mapping[str, Any]) -> ProveAssignment:
    return ProveAssignment(job_id=_hex_field(payload, "job_id"),
                           provider=payload.get("provider"),  # type: ignore[arg-type]
                           placement=payload.get("placement"))  # type: ignore[arg-type]


def _read_settle(payload: Mapping[str, Any]) -> SettleJob:
    root = payload.get("merkle_root")
    return SettleJob(job_id=_hex_field(payload, "job_id"),
                     providers=tuple(_list(payload, "providers")),
                     payouts=tuple(_list(payload, "payouts")),
                     merkle_root=None if root is None else _hex_field(payload, "merkle_root"))


def _read_commit(payload: Mapping[str, Any]) -> CommitEpoch:
    return CommitEpoch(epoch=payload.get("epoch"),  # type: ignore[arg-type]
                       root=_hex_field(payload, "root"))


def _read_tier(payload: Mapping[str, Any]) -> SetTier:
    return SetTier(provider=payload.get("provider"),  # type: ignore[arg-type]
                   tier=payload.get("tier"),  # type: ignore[arg-type]
                   node_id=_optional_str(payload.get("node_id"), "node_id"),
                   detail=_optional_str(payload.get("detail"), "detail"))


def _read_slash(payload: Mapping[str, Any]) -> SlashCollateral:
    return SlashCollateral(job_id=_hex_field(payload, "job_id"),
                           provider=payload.get("provider"),  # type: ignore[arg-type]
                           placement=payload.get("placement"),  # type: ignore[arg-type]
                           amount=payload.get("amount"),  # type: ignore[arg-type]
                           reason=payload.get("reason"),  # type: ignore[arg-type]
                           evidence=_hex_field(payload, "evidence"))


_READERS: dict[str, Callable[[Mapping[str, Any]], ChainAction]] = {
    ReserveCollateral.kind: _read_reserve, AssignCollateral.kind: _read_assign,
    ProveAssignment.kind: _read_prove, SettleJob.kind: _read_settle,
    CommitEpoch.kind: _read_commit, SetTier.kind: _read_tier, SlashCollateral.kind: _read_slash,
}


# ---------------------------------------------------------------------- field checks


def _set(action: object, name: str, value: object) -> None:
    object.__setattr__(action, name, value)  # normalising a frozen action as it is made


def _with_context(payload: dict[str, Any], **context: object) -> dict[str, Any]:
    payload.update({key: value for key, value in context.items() if value is not None})
    return payload


def _list(payload: Mapping[str, Any], key: str) -> list[Any]:
    value = payload.get(key)
    if not isinstance(value, list):
        raise PayloadError(f"{key} must be a list")
    return value


def _hex_field(payload: Mapping[str, Any], key: str) -> bytes:
    """A bytes32 field stored as hex (with or without 0x)."""
    value = payload.get(key)
    try:
        raw = unhex(value) if isinstance(value, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise PayloadError(f"{key} must be 32 bytes as 0x-hex, got {value!r}")
    return raw


def _bytes32(value: object, key: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != 32:
        raise PayloadError(f"{key} must be 32 bytes, got {value!r}")
    return value


def _address(value: object, key: str) -> str:
    checksummed = _checksummed(value) if isinstance(value, str) else None
    if checksummed is None:
        raise PayloadError(f"{key} holds {value!r}, not an address")
    return checksummed


@functools.lru_cache(maxsize=65_536)
def _checksummed(value: str) -> str | None:
    """The address in checksum form (a keccak each: a batch names few providers many times);
    None: not an address."""
    return str(to_checksum_address(value)) if is_address(value) else None


def _uint(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PayloadError(f"{key} holds {value!r}, not an unsigned integer")
    try:
        number = int(value)
    except ValueError:
        raise PayloadError(f"{key} holds {value!r}, not an unsigned integer") from None
    if not 0 <= number < UINT256_LIMIT:
        raise PayloadError(f"{key} holds {value!r}, out of uint256 range")
    return number


def _same_length(first: Sequence[object], first_key: str, second: Sequence[object],
                 second_key: str) -> None:
    if len(first) != len(second):
        raise PayloadError(f"{len(first)} {first_key} but {len(second)} {second_key}")


def _placement(value: object) -> int:
    try:
        return check_placement(_uint(value, "placement"))
    except ValueError as exc:
        raise PayloadError(str(exc)) from None


def _optional_str(value: object, key: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise PayloadError(f"{key} holds {value!r}, not text")
    return value
