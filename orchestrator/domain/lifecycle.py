"""Every state machine of the orchestrator: one transition table each, every edge explained.

Jobs, tasks, leases, node health, a node's drain, outbox rows, verification, disputes and
indexed chain events.

Modelled on Ray autoscaler v2 (`instance_manager/common.py`): a status may only
move along an edge listed here; anything else is a bug or a hostile request and
is refused with `InvalidTransition`. Every accepted move yields a `StatusChange`
(time + reason) that the DB keeps as status history. Pure: time is a parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from orchestrator.domain.errors import InvalidTransition
from orchestrator.domain.types import NodeHealth


class JobStatus(StrEnum):
    SUBMITTED = "submitted"
    FUNDED = "funded"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    VERIFYING = "verifying"
    COMPLETED = "completed"
    SETTLING = "settling"
    SETTLED = "settled"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DISPUTED = "disputed"
    EXPIRED = "expired"


class TaskStatus(StrEnum):
    PENDING = "pending"
    RESERVED = "reserved"
    RUNNING = "running"
    DONE = "done"
    VERIFIED = "verified"
    FAILED = "failed"
    RETRY = "retry"


class LeaseState(StrEnum):
    RESERVED = "reserved"  # a slot is held for the task; the node's process has not started it
    ACTIVE = "active"  # the node reported it started; its heartbeats renew the lease
    RELEASED = "released"  # the slot is free again (`release_reason` says why)


class NodeDrain(StrEnum):
    """Whether a node takes new work (stored as `nodes.draining`)."""

    ACCEPTING = "accepting"
    DRAINING = "draining"


class OutboxStatus(StrEnum):
    PENDING = "pending"  # queued, not signed yet (or to be signed again)
    SENT = "sent"  # signed bytes persisted; broadcast may or may not have happened
    CONFIRMED = "confirmed"  # took effect on chain (maybe by someone else: see `note`)
    FAILED = "failed"  # reverted for a reason that retrying cannot fix; `note` says why


J, T = JobStatus, TaskStatus

JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    J.SUBMITTED: frozenset({
        # The escrow was found on chain with matching customer, amount and spec hash.
        J.FUNDED,
        # The customer withdrew the spec before any escrow was seen.
        J.CANCELLED,
        # No escrow appeared before the job's deadline.
        J.EXPIRED,
    }),
    J.FUNDED: frozenset({
        # The job was split into tasks and at least one task has been placed.
        J.SCHEDULED,
        # The customer cancelled before any work was placed (escrow is refunded).
        J.CANCELLED,
        # The deadline passed with no node able to take the work.
        J.EXPIRED,
    }),
    J.SCHEDULED: frozenset({
        # A node reported the first progress on one of the job's tasks.
        J.RUNNING,
        # Every task exhausted its retries before starting.
        J.FAILED,
        # The deadline passed while tasks were still waiting for nodes.
        J.EXPIRED,
        # The customer cancelled: leases are released, the escrow refunded.
        J.CANCELLED,
    }),
    J.RUNNING: frozenset({
        # All tasks are done; verification (spot checks / redundancy) starts.
        J.VERIFYING,
        # A task failed beyond its retry budget.
        J.FAILED,
        # The deadline passed with unfinished tasks.
        J.EXPIRED,
        # The customer cancelled: leases are released, verified tasks paid, the rest refunded.
        J.CANCELLED,
    }),
    J.VERIFYING: frozenset({
        # Every verification check passed: the result is accepted.
        J.COMPLETED,
        # A verification check failed and the job cannot be redone in time.
        J.FAILED,
        # Verification failed but the deadline leaves room: tasks are re-queued.
        J.RUNNING,
    }),
    J.COMPLETED: frozenset({
        # The settle action was written to the chain outbox.
        J.SETTLING,
    }),
    J.SETTLING: frozenset({
        # The settlement transaction was confirmed on chain.
        J.SETTLED,
    }),
    J.SETTLED: frozenset({
        # Customer or provider posted a dispute bond within the window.
        J.DISPUTED,
        # A reorg took the settlement's transaction off the chain: it is sent again, and
        # only the re-sent settlement's final event settles the job again.
        J.SETTLING,
    }),
    J.DISPUTED: frozenset({
        # Every open dispute of the job was ruled (or defaulted) on chain; the settlement
        # stands as the rulings changed it.
        J.SETTLED,
    }),
    # Terminal: nothing runs any more; verified work is paid and the rest of the escrow
    # refunded by one settlement (`services.settlement.queue_refund`).
    J.FAILED: frozenset(),
    J.CANCELLED: frozenset(),
    J.EXPIRED: frozenset(),
}

TASK_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    T.PENDING: frozenset({
        # The scheduler reserved a GPU slot on an eligible node (a lease).
        T.RESERVED,
        # The job was cancelled or expired before this task was placed.
        T.FAILED,
    }),
    T.RESERVED: frozenset({
        # The node took the lease and reported it started.
        T.RUNNING,
        # The node failed to start, or the reservation expired: the slot is released.
        T.RETRY,
        # The job was cancelled or expired while the reservation was held.
        T.FAILED,
    }),
    T.RUNNING: frozenset({
        # The node uploaded the result and reported completion.
        T.DONE,
        # The node died, drained, or its lease lapsed: resume from the last checkpoint.
        T.RETRY,
        # The workload itself failed (bad input) or the retry budget is spent.
        T.FAILED,
    }),
    T.DONE: frozenset({
        # The result passed verification.
        T.VERIFIED,
        # Verification failed: redo the task elsewhere.
        T.RETRY,
        # Verification failed and the retry budget is spent.
        T.FAILED,
    }),
    T.RETRY: frozenset({
        # Placed again on another (or the same, recovered) node.
        T.RESERVED,
        # The job was cancelled or expired while the task waited.
        T.FAILED,
    }),
    # Terminal states.
    T.VERIFIED: frozenset(),
    T.FAILED: frozenset(),
}

L, H, D, Q = LeaseState, NodeHealth, NodeDrain, OutboxStatus

LEASE_TRANSITIONS: dict[LeaseState, frozenset[LeaseState]] = {
    L.RESERVED: frozenset({
        # The node reported the task's first progress: it runs under this lease.
        L.ACTIVE,
        # Never started: the reservation lapsed, the start failed, the node drained or died,
        # or the job expired; the slot and the task go back.
        L.RELEASED,
    }),
    L.ACTIVE: frozenset({
        # The task completed or failed for good, the node died or drained, its renewals
        # stopped (lapsed), or the job expired.
        L.RELEASED,
        # The node's agent restarted (a login naming a new session key) while the lease was
        # live, held through a lone silence or not: no process runs the task any more, so it
        # is offered to the new process, which resumes it from its last checkpoint.
        L.RESERVED,
    }),
    # Terminal: a released lease is history; a new placement writes a new lease.
    L.RELEASED: frozenset(),
}

NODE_HEALTH_TRANSITIONS: dict[NodeHealth, frozenset[NodeHealth]] = {
    # The failure detector's verdict at each sweep; any verdict may follow any other, since a
    # sweep can miss the states in between. Each edge says what the verdict means.
    H.ALIVE: frozenset({
        # A heartbeat gap the detector does not yet call a departure: leases are kept.
        H.SUSPECT,
        # The gap outgrew the dead threshold between two sweeps: a departure.
        H.DEAD,
    }),
    H.SUSPECT: frozenset({
        # Heartbeats resumed within the detector's patience.
        H.ALIVE,
        # The gap became a departure: leases are revoked (or held for a shared silence).
        H.DEAD,
    }),
    H.DEAD: frozenset({
        # Heard from again: a fresh session with a fresh grace period.
        H.ALIVE,
        # Heard from once after coming back, then a new gap before the next sweep.
        H.SUSPECT,
    }),
}

NODE_DRAIN_TRANSITIONS: dict[NodeDrain, frozenset[NodeDrain]] = {
    D.ACCEPTING: frozenset({
        # The provider asked for a graceful drain: no new leases, running tasks checkpoint
        # and move.
        D.DRAINING,
    }),
    # Terminal: re-registering the node id keeps it draining.
    D.DRAINING: frozenset(),
}

OUTBOX_TRANSITIONS: dict[OutboxStatus, frozenset[OutboxStatus]] = {
    Q.PENDING: frozenset({
        # Signed, and the signed bytes persisted before any broadcast.
        Q.SENT,
        # Before signing, the chain shows the action already took effect (escrow settled,
        # the same epoch root committed).
        Q.CONFIRMED,
        # A malformed payload, or a revert at gas estimation that no retry can fix.
        Q.FAILED,
    }),
    Q.SENT: frozenset({
        # The transaction's receipt succeeded (with the configured confirmations), or its
        # revert proves the action already took effect.
        Q.CONFIRMED,
        # Mined and reverted for a reason retrying cannot fix.
        Q.FAILED,
        # The bytes can never land (their nonce was spent by another transaction), or a batch
        # reverted on another job's row: sign the row again.
        Q.PENDING,
    }),
    Q.CONFIRMED: frozenset({
        # The indexer saw its mined transaction reorged out: the same bytes go out again.
        Q.SENT,
    }),
    # Terminal: an operator reads `note`; nothing is resent.
    Q.FAILED: frozenset(),
}

del J, T, L, H, D, Q


class ChainEventStatus(StrEnum):
    """Where one indexed contract event stands against the canonical chain."""

    PROVISIONAL = "provisional"  # in a block newer than the finality point: may still vanish
    FINAL = "final"  # at or below the finality point; handlers apply it once
    DROPPED = "dropped"  # its block left the canonical chain; kept so a re-inclusion of the
    # same transaction is recognised (and never applied twice)


E = ChainEventStatus

CHAIN_EVENT_TRANSITIONS: dict[ChainEventStatus, frozenset[ChainEventStatus]] = {
    E.PROVISIONAL: frozenset({
        # Its block fell behind the finality point (the reorg margin, or the chain's tag).
        E.FINAL,
        # A reorg replaced its block before it was final: it is not applied, nothing to undo.
        E.DROPPED,
    }),
    E.FINAL: frozenset({
        # A reorg deeper than the margin replaced its block; it stays applied, and is
        # reported until the same transaction lands again.
        E.DROPPED,
    }),
    E.DROPPED: frozenset({
        # The same transaction (same hash, same log position) is back on the canonical chain
        # in a block newer than the finality point.
        E.PROVISIONAL,
        # ... or in a block already past it.
        E.FINAL,
    }),
}

del E


class VerificationStatus(StrEnum):
    """Where one committed result (a task attempt's output) stands in verification."""

    COMMITTED = "committed"
    CHECKING = "checking"
    DISPUTED = "disputed"
    PASSED = "passed"
    TRUSTED = "trusted"
    FAILED = "failed"
    OVERRIDDEN = "overridden"


V = VerificationStatus

VERIFICATION_TRANSITIONS: dict[VerificationStatus, frozenset[VerificationStatus]] = {
    V.COMMITTED: frozenset({
        # The challenge drew at least one window: re-check work is leased to another node.
        V.CHECKING,
        # The challenge drew no window: the provider's record vouches for it this time.
        V.TRUSTED,
        # An operator accepted the job by hand (logged override).
        V.OVERRIDDEN,
    }),
    V.CHECKING: frozenset({
        # Every re-rendered window matched the committed pixels.
        V.PASSED,
        # A window did not match: a third node breaks the tie before anyone is blamed.
        V.DISPUTED,
        # An operator accepted the job by hand (logged override).
        V.OVERRIDDEN,
    }),
    V.DISPUTED: frozenset({
        # The tie-breaker agreed with the node: the first checker was wrong, the result stands.
        V.PASSED,
        # The tie-breaker agreed with the checker: the result is wrong; slash and redo.
        V.FAILED,
        # An operator accepted the job by hand (logged override).
        V.OVERRIDDEN,
    }),
    # Terminal: the verdict on this attempt is final (a redo is a new commitment).
    V.PASSED: frozenset(),
    V.TRUSTED: frozenset(),
    V.FAILED: frozenset(),
    V.OVERRIDDEN: frozenset(),
}

SETTLEABLE_VERIFICATION = frozenset({V.PASSED, V.TRUSTED, V.OVERRIDDEN})
"""A task whose latest commitment is in one of these may be paid for."""


class CheckStatus(StrEnum):
    """One re-check: a window (or a whole command result) re-run on another node."""

    OPEN = "open"
    LEASED = "leased"
    MATCHED = "matched"
    MISMATCHED = "mismatched"
    VOID = "void"


C = CheckStatus

CHECK_TRANSITIONS: dict[CheckStatus, frozenset[CheckStatus]] = {
    C.OPEN: frozenset({
        # A node other than the committer (and other than earlier checkers) pulled it.
        C.LEASED,
        # The commitment was decided without it (operator override, or a redo superseded it).
        C.VOID,
    }),
    C.LEASED: frozenset({
        # The checker's decoded pixels equal the committed ones (within the tolerance).
        C.MATCHED,
        # They differ.
        C.MISMATCHED,
        # The checker's lease lapsed or it gave the check back: offer it to another node.
        C.OPEN,
        # The commitment was decided without it.
        C.VOID,
    }),
    # Terminal.
    C.MATCHED: frozenset(),
    C.MISMATCHED: frozenset(),
    C.VOID: frozenset(),
}



class DisputeState(StrEnum):
    """A dispute as the chain has ruled it so far (`IDisputes.DisputeStatus`, followed from its
    events by `services.disputes`)."""

    OPEN = "open"
    GRANTED = "granted"
    DISMISSED = "dismissed"
    DEFAULTED = "defaulted"


DS = DisputeState

DISPUTE_TRANSITIONS: dict[DisputeState, frozenset[DisputeState]] = {
    DS.OPEN: frozenset({
        # The arbiter ruled for the opener before the deadline (DisputeRuled, granted).
        DS.GRANTED,
        # The arbiter ruled for the respondent before the deadline (DisputeRuled, not granted).
        DS.DISMISSED,
        # Nobody ruled by the deadline and someone applied the default (DisputeDefaulted).
        DS.DEFAULTED,
    }),
    # Terminal: the chain moved the frozen money and the bond; nothing reopens a dispute.
    DS.GRANTED: frozenset(),
    DS.DISMISSED: frozenset(),
    DS.DEFAULTED: frozenset(),
}

del V, C, DS


@dataclass(frozen=True, slots=True)
class StatusChange:
    """One accepted move, as the status history stores it."""

    kind: str  # "job", "task", "node", "verify" (a committed result) or "check"
    from_status: str
    to_status: str
    at: float  # seconds on the caller's clock
    reason: str


S = TypeVar("S", bound=StrEnum)


def check_move(kind: str, table: dict[S, frozenset[S]], current: S, target: S) -> None:
    """Refuse a move its table does not list (`InvalidTransition`)."""
    if target not in table[current]:
        raise InvalidTransition(kind, current, target)


def job_transition(
    current: JobStatus, target: JobStatus, *, at: float, reason: str
) -> StatusChange:
    """Check one job move against `JOB_TRANSITIONS` and describe it for the history."""
    check_move("job", JOB_TRANSITIONS, current, target)
    return StatusChange("job", current.value, target.value, at, reason)


def task_transition(
    current: TaskStatus, target: TaskStatus, *, at: float, reason: str
) -> StatusChange:
    """Check one task move against `TASK_TRANSITIONS` and describe it for the history."""
    check_move("task", TASK_TRANSITIONS, current, target)
    return StatusChange("task", current.value, target.value, at, reason)


def node_health_transition(
    current: NodeHealth, target: NodeHealth, *, at: float, reason: str
) -> StatusChange:
    """Check one health move against `NODE_HEALTH_TRANSITIONS`, for the node's history."""
    check_move("node", NODE_HEALTH_TRANSITIONS, current, target)
    return StatusChange("node", current.value, target.value, at, reason)


def node_drain_transition(
    current: NodeDrain, target: NodeDrain, *, at: float, reason: str
) -> StatusChange:
    """Check one drain move against `NODE_DRAIN_TRANSITIONS`, for the node's history."""
    check_move("node", NODE_DRAIN_TRANSITIONS, current, target)
    return StatusChange("node", current.value, target.value, at, reason)


def lease_transition(current: LeaseState, target: LeaseState) -> None:
    """Check one lease move against `LEASE_TRANSITIONS` (the lease row keeps its own times)."""
    check_move("lease", LEASE_TRANSITIONS, current, target)


def outbox_transition(current: OutboxStatus, target: OutboxStatus) -> None:
    """Check one outbox move against `OUTBOX_TRANSITIONS` (the row keeps its own times)."""
    check_move("outbox row", OUTBOX_TRANSITIONS, current, target)


def chain_event_transition(current: ChainEventStatus, target: ChainEventStatus) -> None:
    """Check one indexed event's move against `CHAIN_EVENT_TRANSITIONS`."""
    check_move("chain event", CHAIN_EVENT_TRANSITIONS, current, target)


def verification_transition(current: VerificationStatus, target: VerificationStatus, *,
                            at: float, reason: str) -> StatusChange:
    """Check one verification move against `VERIFICATION_TRANSITIONS`."""
    check_move("verification", VERIFICATION_TRANSITIONS, current, target)
    return StatusChange("verify", current.value, target.value, at, reason)


def check_transition(current: CheckStatus, target: CheckStatus, *, at: float,
                     reason: str) -> StatusChange:
    """Check one re-check move against `CHECK_TRANSITIONS`."""
    check_move("check", CHECK_TRANSITIONS, current, target)
    return StatusChange("check", current.value, target.value, at, reason)


def dispute_transition(current: DisputeState, target: DisputeState) -> None:
    """Check one dispute move against `DISPUTE_TRANSITIONS` (the row keeps its own times)."""
    check_move("dispute", DISPUTE_TRANSITIONS, current, target)


SCHEDULABLE_TASK_STATUSES = frozenset({TaskStatus.PENDING, TaskStatus.RETRY})
"""Statuses the scheduler may place."""
