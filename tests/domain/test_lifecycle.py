from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from orchestrator.domain.errors import (
    DomainError,
    Forbidden,
    Invalid,
    InvalidTransition,
    Missing,
    NotFound,
    Refused,
    TooLarge,
    Unavailable,
    Unfunded,
    Unprocessable,
)
from orchestrator.domain.lifecycle import (
    DISPUTE_TRANSITIONS,
    JOB_TRANSITIONS,
    LEASE_TRANSITIONS,
    NODE_DRAIN_TRANSITIONS,
    NODE_HEALTH_TRANSITIONS,
    OUTBOX_TRANSITIONS,
    TASK_TRANSITIONS,
    ChainEventStatus,
    CheckStatus,
    DisputeState,
    JobStatus,
    LeaseState,
    NodeDrain,
    OutboxStatus,
    StatusChange,
    TaskStatus,
    VerificationStatus,
    chain_event_transition,
    check_transition,
    dispute_transition,
    job_transition,
    lease_transition,
    node_drain_transition,
    node_health_transition,
    outbox_transition,
    task_transition,
    verification_transition,
)
from orchestrator.domain.types import NodeHealth

JOB_HAPPY_PATH = ["submitted", "funded", "scheduled", "running", "verifying", "completed",
                  "settling", "settled"]
TASK_HAPPY_PATH = ["pending", "reserved", "running", "done", "verified"]

# Every allowed move, written out by hand rather than read from the tables: a pair listed here
# must be accepted and any other pair refused, so an edge added or dropped there fails a test.
ALLOWED_JOB_MOVES = {
    ("submitted", "funded"), ("submitted", "cancelled"), ("submitted", "expired"),
    ("funded", "scheduled"), ("funded", "cancelled"), ("funded", "expired"),
    ("scheduled", "running"), ("scheduled", "failed"), ("scheduled", "expired"),
    ("scheduled", "cancelled"), ("running", "cancelled"),
    ("running", "verifying"), ("running", "failed"), ("running", "expired"),
    ("verifying", "completed"), ("verifying", "failed"), ("verifying", "running"),
    ("completed", "settling"),
    ("settling", "settled"),
    ("settled", "disputed"), ("settled", "settling"),  # the latter: a reorg removed it
    ("disputed", "settled"),
}
ALLOWED_TASK_MOVES = {
    ("pending", "reserved"), ("pending", "failed"),
    ("reserved", "running"), ("reserved", "retry"), ("reserved", "failed"),
    ("running", "done"), ("running", "retry"), ("running", "failed"),
    ("done", "verified"), ("done", "retry"), ("done", "failed"),
    ("retry", "reserved"), ("retry", "failed"),
}

ALLOWED_LEASE_MOVES = {("reserved", "active"), ("reserved", "released"), ("active", "released"),
                       ("active", "reserved")}  # the latter: the node's agent restarted
ALLOWED_NODE_HEALTH_MOVES = {
    ("alive", "suspect"), ("alive", "dead"),
    ("suspect", "alive"), ("suspect", "dead"),
    ("dead", "alive"), ("dead", "suspect"),
}
ALLOWED_NODE_DRAIN_MOVES = {("accepting", "draining")}
ALLOWED_OUTBOX_MOVES = {
    ("pending", "sent"), ("pending", "confirmed"), ("pending", "failed"),
    ("sent", "confirmed"), ("sent", "failed"), ("sent", "pending"),
    ("confirmed", "sent"),  # its mined transaction was reorged out
}


def test_every_status_has_a_row_in_its_table() -> None:
    assert set(JOB_TRANSITIONS) == set(JobStatus)
    assert set(TASK_TRANSITIONS) == set(TaskStatus)
    assert set(LEASE_TRANSITIONS) == set(LeaseState)
    assert set(NODE_HEALTH_TRANSITIONS) == set(NodeHealth)
    assert set(NODE_DRAIN_TRANSITIONS) == set(NodeDrain)
    assert set(OUTBOX_TRANSITIONS) == set(OutboxStatus)


def test_job_happy_path_is_allowed_edge_by_edge() -> None:
    for current, target in itertools.pairwise(JOB_HAPPY_PATH):
        change = job_transition(JobStatus(current), JobStatus(target), at=1.0, reason="test")
        assert (change.from_status, change.to_status, change.at) == (current, target, 1.0)


def test_task_happy_path_is_allowed_edge_by_edge() -> None:
    for current, target in itertools.pairwise(TASK_HAPPY_PATH):
        task_transition(TaskStatus(current), TaskStatus(target), at=0.0, reason="test")


@pytest.mark.parametrize(("current", "target"), list(itertools.product(JobStatus, JobStatus)))
def test_job_transition_accepts_exactly_the_allowed_moves(current: JobStatus, target: JobStatus
                                                         ) -> None:
    if (current.value, target.value) in ALLOWED_JOB_MOVES:
        assert job_transition(current, target, at=0.0, reason="r").to_status == target.value
    else:
        with pytest.raises(InvalidTransition):
            job_transition(current, target, at=0.0, reason="r")


@pytest.mark.parametrize(("current", "target"), list(itertools.product(TaskStatus, TaskStatus)))
def test_task_transition_accepts_exactly_the_allowed_moves(current: TaskStatus,
                                                          target: TaskStatus) -> None:
    if (current.value, target.value) in ALLOWED_TASK_MOVES:
        assert task_transition(current, target, at=0.0, reason="r").to_status == target.value
    else:
        with pytest.raises(InvalidTransition):
            task_transition(current, target, at=0.0, reason="r")


def test_terminal_statuses_have_no_way_out() -> None:
    for status in (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.EXPIRED):
        assert not JOB_TRANSITIONS[status]
    assert not TASK_TRANSITIONS[TaskStatus.VERIFIED]
    assert not TASK_TRANSITIONS[TaskStatus.FAILED]


def test_settled_job_cannot_have_its_settlement_queued_again() -> None:
    with pytest.raises(InvalidTransition, match="settled"):
        job_transition(JobStatus.SETTLED, JobStatus.COMPLETED, at=0.0, reason="again")


def test_every_status_is_reachable_from_the_start() -> None:
    for table, start in ((JOB_TRANSITIONS, JobStatus.SUBMITTED),
                         (TASK_TRANSITIONS, TaskStatus.PENDING)):
        seen = {start}
        frontier = [start]
        while frontier:
            for nxt in table[frontier.pop()]:  # type: ignore[index]
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        assert seen == set(table)


def test_a_refused_move_says_what_and_from_where() -> None:
    with pytest.raises(InvalidTransition) as caught:
        task_transition(TaskStatus.VERIFIED, TaskStatus.RUNNING, at=0.0, reason="r")
    error = caught.value
    assert (error.kind, error.current, error.target, error.code) == (
        "task", "verified", "running", "invalid_transition")
    assert str(error).startswith("task cannot move from ")
    assert "'verified'" in str(error) and "'running'" in str(error)
    assert "<" not in str(error)  # the states' values, not their enum reprs


def test_an_accepted_move_is_described_for_the_history() -> None:
    assert task_transition(TaskStatus.RETRY, TaskStatus.RESERVED, at=12.5,
                           reason="placed on n1") == StatusChange(
        "task", "retry", "reserved", 12.5, "placed on n1")
    assert job_transition(JobStatus.SUBMITTED, JobStatus.FUNDED, at=3.0,
                          reason="escrow funded") == StatusChange(
        "job", "submitted", "funded", 3.0, "escrow funded")


def test_a_refused_job_move_names_the_job_and_both_statuses() -> None:
    with pytest.raises(InvalidTransition) as caught:
        job_transition(JobStatus.SETTLED, JobStatus.RUNNING, at=0.0, reason="r")
    error = caught.value
    assert (error.kind, error.current, error.target) == ("job", "settled", "running")
    assert str(error).startswith("job cannot move from ")
    assert str(error).index("'settled'") < str(error).index("'running'")
    assert "cannot move" in str(error)


@pytest.mark.parametrize(("current", "target"),
                         list(itertools.product(LeaseState, LeaseState)))
def test_lease_transition_accepts_exactly_the_allowed_moves(current: LeaseState,
                                                           target: LeaseState) -> None:
    if (current.value, target.value) in ALLOWED_LEASE_MOVES:
        lease_transition(current, target)
    else:
        with pytest.raises(InvalidTransition, match=r"^lease cannot move from "):
            lease_transition(current, target)


@pytest.mark.parametrize(("current", "target"),
                         list(itertools.product(NodeHealth, NodeHealth)))
def test_node_health_transition_accepts_exactly_the_allowed_moves(current: NodeHealth,
                                                                 target: NodeHealth) -> None:
    if (current.value, target.value) in ALLOWED_NODE_HEALTH_MOVES:
        change = node_health_transition(current, target, at=2.0, reason="detector")
        assert (change.kind, change.from_status, change.to_status, change.at) == (
            "node", current.value, target.value, 2.0)
    else:
        with pytest.raises(InvalidTransition, match=r"^node cannot move from "):
            node_health_transition(current, target, at=0.0, reason="r")


@pytest.mark.parametrize(("current", "target"),
                         list(itertools.product(NodeDrain, NodeDrain)))
def test_node_drain_transition_accepts_exactly_the_allowed_moves(current: NodeDrain,
                                                                target: NodeDrain) -> None:
    if (current.value, target.value) in ALLOWED_NODE_DRAIN_MOVES:
        change = node_drain_transition(current, target, at=1.0, reason="drain")
        assert (change.from_status, change.to_status) == (current.value, target.value)
    else:
        with pytest.raises(InvalidTransition):
            node_drain_transition(current, target, at=0.0, reason="r")


@pytest.mark.parametrize(("current", "target"),
                         list(itertools.product(OutboxStatus, OutboxStatus)))
def test_outbox_transition_accepts_exactly_the_allowed_moves(current: OutboxStatus,
                                                            target: OutboxStatus) -> None:
    if (current.value, target.value) in ALLOWED_OUTBOX_MOVES:
        outbox_transition(current, target)
    else:
        with pytest.raises(InvalidTransition, match=r"^outbox row cannot move"):
            outbox_transition(current, target)


def test_released_leases_and_failed_outbox_rows_are_terminal() -> None:
    assert not LEASE_TRANSITIONS[LeaseState.RELEASED]
    assert OUTBOX_TRANSITIONS[OutboxStatus.CONFIRMED] == {OutboxStatus.SENT}  # reorged out
    assert not OUTBOX_TRANSITIONS[OutboxStatus.FAILED]
    assert not NODE_DRAIN_TRANSITIONS[NodeDrain.DRAINING]


ALLOWED_DISPUTE_MOVES = {("open", "granted"), ("open", "dismissed"), ("open", "defaulted")}


@pytest.mark.parametrize(("current", "target"),
                         list(itertools.product(DisputeState, DisputeState)))
def test_dispute_transition_accepts_exactly_the_allowed_moves(current: DisputeState,
                                                             target: DisputeState) -> None:
    assert set(DISPUTE_TRANSITIONS) == set(DisputeState)
    if (current.value, target.value) in ALLOWED_DISPUTE_MOVES:
        dispute_transition(current, target)
    else:
        with pytest.raises(InvalidTransition, match=r"^dispute cannot move from "):
            dispute_transition(current, target)


# A refused move's message is part of the API's answer and of the operators' logs, so each
# kind's wording is pinned here by hand, one refused move per machine.
REFUSED_MOVE_MESSAGES = [
    (lambda: check_transition(CheckStatus.MATCHED, CheckStatus.OPEN, at=0.0, reason="r"),
     "check", "matched", "open", "check cannot move from 'matched' to 'open'"),
    (lambda: check_transition(CheckStatus.OPEN, CheckStatus.MATCHED, at=0.0, reason="r"),
     "check", "open", "matched", "check cannot move from 'open' to 'matched'"),
    (lambda: verification_transition(VerificationStatus.PASSED, VerificationStatus.CHECKING,
                                     at=0.0, reason="r"),
     "verification", "passed", "checking",
     "verification cannot move from 'passed' to 'checking'"),
    (lambda: verification_transition(VerificationStatus.COMMITTED, VerificationStatus.FAILED,
                                     at=0.0, reason="r"),
     "verification", "committed", "failed",
     "verification cannot move from 'committed' to 'failed'"),
    (lambda: chain_event_transition(ChainEventStatus.FINAL, ChainEventStatus.PROVISIONAL),
     "chain event", "final", "provisional",
     "chain event cannot move from 'final' to 'provisional'"),
    (lambda: chain_event_transition(ChainEventStatus.DROPPED, ChainEventStatus.DROPPED),
     "chain event", "dropped", "dropped", "chain event cannot move from 'dropped' to 'dropped'"),
    (lambda: node_drain_transition(NodeDrain.DRAINING, NodeDrain.ACCEPTING, at=0.0, reason="r"),
     "node", "draining", "accepting", "node cannot move from 'draining' to 'accepting'"),
    (lambda: node_drain_transition(NodeDrain.ACCEPTING, NodeDrain.ACCEPTING, at=0.0, reason="r"),
     "node", "accepting", "accepting", "node cannot move from 'accepting' to 'accepting'"),
]


@pytest.mark.parametrize(("move", "kind", "current", "target", "message"), REFUSED_MOVE_MESSAGES,
                         ids=[row[4] for row in REFUSED_MOVE_MESSAGES])
def test_a_refused_move_names_its_machine_exactly(move: Callable[[], object], kind: str,
                                                  current: str, target: str,
                                                  message: str) -> None:
    with pytest.raises(InvalidTransition) as caught:
        move()
    error = caught.value
    assert str(error) == message
    assert (error.kind, error.current, error.target, error.code) == (
        kind, current, target, "invalid_transition")


def test_an_accepted_check_move_is_described_for_the_history() -> None:
    change = check_transition(CheckStatus.OPEN, CheckStatus.LEASED, at=4.5, reason="pulled by n2")
    assert change == StatusChange("check", "open", "leased", 4.5, "pulled by n2")
    assert (change.kind, change.from_status, change.to_status, change.at, change.reason) == (
        "check", "open", "leased", 4.5, "pulled by n2")
    assert check_transition(CheckStatus.LEASED, CheckStatus.MISMATCHED, at=9.0,
                            reason="pixels differ") == StatusChange(
        "check", "leased", "mismatched", 9.0, "pixels differ")


def test_an_accepted_verification_move_is_described_for_the_history() -> None:
    change = verification_transition(VerificationStatus.COMMITTED, VerificationStatus.CHECKING,
                                     at=7.25, reason="window drawn")
    assert change == StatusChange("verify", "committed", "checking", 7.25, "window drawn")
    assert (change.kind, change.from_status, change.to_status, change.at, change.reason) == (
        "verify", "committed", "checking", 7.25, "window drawn")
    assert verification_transition(VerificationStatus.DISPUTED, VerificationStatus.FAILED,
                                   at=11.0, reason="tie-breaker sided with checker"
                                   ) == StatusChange(
        "verify", "disputed", "failed", 11.0, "tie-breaker sided with checker")


def test_an_accepted_drain_move_is_described_for_the_history() -> None:
    assert node_drain_transition(NodeDrain.ACCEPTING, NodeDrain.DRAINING, at=5.5,
                                 reason="provider asked") == StatusChange(
        "node", "accepting", "draining", 5.5, "provider asked")


@pytest.mark.parametrize("kind", [Refused, Missing, Forbidden, Invalid, TooLarge, Unfunded,
                                  Unavailable])
def test_a_refusal_carries_its_code_and_its_message(kind: type[Refused]) -> None:
    error = kind("job_not_funded", "the escrow of job 7 is empty")
    assert error.code == "job_not_funded"
    assert str(error) == "the escrow of job 7 is empty"
    assert error.args == ("the escrow of job 7 is empty",)
    assert isinstance(error, DomainError)


def test_a_refusals_kind_decides_its_family() -> None:
    assert isinstance(Missing("no_node", "m"), NotFound)
    assert isinstance(Invalid("bad_sample", "m"), Unprocessable)
    assert isinstance(TooLarge("too_large", "m"), Invalid)
    assert not isinstance(Forbidden("not_yours", "m"), NotFound | Unprocessable)
    with pytest.raises(Refused, match=r"^node n1 is unknown$") as caught:
        raise Missing("node_missing", "node n1 is unknown")
    assert caught.value.code == "node_missing"
