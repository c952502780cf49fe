"""Job and task state machines: one transition table each, every edge explained.

Modelled on Ray autoscaler v2 (`instance_manager/common.py`): a status may only
move along an edge listed here; anything else is a bug or a hostile request and
is refused with `InvalidTransition`. Every accepted move yields a `StatusChange`
(time + reason) that the DB keeps as status history. Pure: time is a parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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
    }),
    J.RUNNING: frozenset({
        # All tasks are done; verification (spot checks / redundancy) starts.
        J.VERIFYING,
        # A task failed beyond its retry budget.
        J.FAILED,
        # The deadline passed with unfinished tasks.
        J.EXPIRED,
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
    }),
    J.DISPUTED: frozenset({
        # The arbiter resolved the dispute on chain; the settlement stands as resolved.
        J.SETTLED,
    }),
    # Terminal: the escrow is refunded (or reclaimed) and nothing runs any more.
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

del J, T


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

del V, C


class DomainError(Exception):
    """A request the domain rules refuse; `code` is the stable machine-readable name."""

    code = "domain_error"


class InvalidTransition(DomainError):
    code = "invalid_transition"

    def __init__(self, kind: str, current: str, target: str) -> None:
        super().__init__(f"{kind} cannot move from {current!r} to {target!r}")
        self.kind = kind
        self.current = current
        self.target = target


@dataclass(frozen=True, slots=True)
class StatusChange:
    """One accepted move, as the status history stores it."""

    kind: str  # "job", "task", "verify" (a committed result) or "check" (8 chars at most)
    from_status: str
    to_status: str
    at: float  # seconds on the caller's clock
    reason: str


def job_transition(
    current: JobStatus, target: JobStatus, *, at: float, reason: str
) -> StatusChange:
    """Check one job move against `JOB_TRANSITIONS` and describe it for the history."""
    if target not in JOB_TRANSITIONS[current]:
        raise InvalidTransition("job", current, target)
    return StatusChange("job", current.value, target.value, at, reason)


def task_transition(
    current: TaskStatus, target: TaskStatus, *, at: float, reason: str
) -> StatusChange:
    """Check one task move against `TASK_TRANSITIONS` and describe it for the history."""
    if target not in TASK_TRANSITIONS[current]:
        raise InvalidTransition("task", current, target)
    return StatusChange("task", current.value, target.value, at, reason)


def verification_transition(current: VerificationStatus, target: VerificationStatus, *,
                            at: float, reason: str) -> StatusChange:
    """Check one verification move against `VERIFICATION_TRANSITIONS`."""
    if target not in VERIFICATION_TRANSITIONS[current]:
        raise InvalidTransition("verification", current, target)
    return StatusChange("verify", current.value, target.value, at, reason)


def check_transition(current: CheckStatus, target: CheckStatus, *, at: float,
                     reason: str) -> StatusChange:
    """Check one re-check move against `CHECK_TRANSITIONS`."""
    if target not in CHECK_TRANSITIONS[current]:
        raise InvalidTransition("check", current, target)
    return StatusChange("check", current.value, target.value, at, reason)


SCHEDULABLE_TASK_STATUSES = frozenset({TaskStatus.PENDING, TaskStatus.RETRY})
"""Statuses the scheduler may place."""
