"""What the PLS engine learns, as data: every input a replica receives (a registration, a
session start or end, heartbeats, a probe, GPU samples, an upload, a checkpoint cost, a task
outcome, a reservation never started, a handshake verdict, a tier the leader decided) is one
frozen `Observation`.

The service writes each one to the shared observation log in the transaction that records
it, and every replica applies the log in its order (`services.pls_log`), so two
orchestrators on one database feed their engines the same inputs in the same order. One
codec (`encode` / `decode`) turns an observation into a JSON-able (kind, body) pair and back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.popw import PopwReason, PopwVerdict
from orchestrator.domain.reliability import GpuSample
from orchestrator.domain.types import Tier


@dataclass(frozen=True, slots=True)
class NodeKnown:
    """A node registered or re-registered, or bound a new session key at login."""

    node_id: str
    provider: str
    region: str
    registered_at: float
    tier: int
    session_key: str | None
    # The group a shared silence is read in (`LeaseHold`); None: the region. The service
    # knows no finer one; the simulator models each host's ISP network.
    network: str | None = None


@dataclass(frozen=True, slots=True)
class SessionStarted:
    node_id: str
    at: float


@dataclass(frozen=True, slots=True)
class SessionEnded:
    node_id: str
    at: float
    abrupt: bool  # the node's own departure; a drain or a shared silence is censored


@dataclass(frozen=True, slots=True)
class Departed:
    """The failure detector called these nodes DEAD in one sweep (not the draining ones)."""

    node_ids: tuple[str, ...]
    at: float


@dataclass(frozen=True, slots=True)
class Abandoned:
    """A running task's lease was revoked because its node died (`at`: the DEAD verdict).
    `value` and `rework_share` price the slash at the damage done (`PlsEngine.abandoned`);
    `announced`: the node drained, never slashed."""

    node_id: str
    task_id: int
    collateral: int
    raw_rs: float | None
    at: float
    value: int | None = None
    rework_share: float | None = None
    announced: bool = False


@dataclass(frozen=True, slots=True)
class LoneHeld:
    """A lone silent node's running task, its lease kept for the lone grace: the abandonment
    it becomes if the node is not back in time (`PlsEngine.hold_lone`)."""

    node_id: str
    task_id: int
    collateral: int
    raw_rs: float | None
    at: float
    value: int | None
    rework_share: float | None


@dataclass(frozen=True, slots=True)
class Heartbeats:
    beats: tuple[tuple[str, float], ...]  # (node id, time), by node id


@dataclass(frozen=True, slots=True)
class Probe:
    node_id: str
    sent: float
    rtt_ms: float | None  # None: not echoed within the probe timeout


@dataclass(frozen=True, slots=True)
class GpuReport:
    node_id: str
    samples: tuple[GpuSample, ...]  # in time order


@dataclass(frozen=True, slots=True)
class Upload:
    node_id: str
    at: float
    mbps: float


@dataclass(frozen=True, slots=True)
class CheckpointCost:
    node_id: str
    seconds: float


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """A task outcome on a node; `raw_rs` and `collateral` are those of the collateral lock
    of the attempt it ended (None / 0 when none was locked or it had already ended)."""

    node_id: str
    task_id: int
    outcome: str  # a `TaskOutcome` value
    raw_rs: float | None
    collateral: int
    at: float
    evidence: str | None = None  # hex digest of a failed verification's stored evidence


@dataclass(frozen=True, slots=True)
class StartFailed:
    """A reservation its node never started within the reservation's time to live (released
    `start lapsed`): the placed attempt failed before it began. `raw_rs` and `collateral` are
    those of its collateral lock (None / 0 when none was locked). The engine counts it as an
    abandonment on the node's task record (it was idle, eligible and placed on, and dropped
    the work while registered) and teaches the recalibrator a failure at the raw RS it was
    placed at; nothing is slashed (no work was lost, only time)."""

    node_id: str
    task_id: int
    raw_rs: float | None
    collateral: int
    at: float


@dataclass(frozen=True, slots=True)
class Handshake:
    verdict: PopwVerdict


@dataclass(frozen=True, slots=True)
class TierDecided:
    """The leader's staking policy, or the chain, moved the node to `tier` (every replica
    adopts it)."""

    node_id: str
    tier: int
    at: float


Observation = (NodeKnown | SessionStarted | SessionEnded | Departed | Abandoned | LoneHeld
               | Heartbeats
               | Probe | GpuReport | Upload | CheckpointCost | AttemptEnded | StartFailed
               | Handshake | TierDecided)

KINDS: dict[str, type[Any]] = {
    "node": NodeKnown, "session_started": SessionStarted, "session_ended": SessionEnded,
    "departed": Departed, "abandoned": Abandoned, "lone_held": LoneHeld,
    "heartbeats": Heartbeats, "probe": Probe,
    "gpu": GpuReport, "upload": Upload, "checkpoint_cost": CheckpointCost,
    "attempt_ended": AttemptEnded, "start_failed": StartFailed, "handshake": Handshake,
    "tier": TierDecided}
KIND_OF = {cls: kind for kind, cls in KINDS.items()}


def encode(observation: Observation) -> tuple[str, dict[str, Any]]:
    """(kind, JSON-able body)."""
    return KIND_OF[type(observation)], dataclasses.asdict(observation)


def decode(kind: str, body: dict[str, Any]) -> Observation:
    """The observation `encode` gave (kind, body) for; ValueError for an unknown kind."""
    cls = KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown PLS observation kind {kind!r}")
    if cls is Departed:
        return Departed(tuple(body["node_ids"]), body["at"])
    if cls is Heartbeats:
        return Heartbeats(tuple((node_id, at) for node_id, at in body["beats"]))
    if cls is GpuReport:
        return GpuReport(body["node_id"], tuple(GpuSample(**s) for s in body["samples"]))
    if cls is Handshake:
        verdict = body["verdict"]
        return Handshake(PopwVerdict(verdict["node_id"], verdict["passed"], Tier(verdict["tier"]),
                                     verdict["decided_at"], verdict["expires_at"],
                                     tuple(PopwReason(r) for r in verdict["reasons"]),
                                     verdict.get("gpu_class")))
    observation: Observation = cls(**body)
    return observation
