"""Indexed chain events in the pure domain: the status table of an indexed event, the JSON
form of decoded arguments (exact round trip, wei beyond 64 bits included), the subjects an
event is found by, and the escrow and dispute folds."""

from __future__ import annotations

import itertools

import pytest

from orchestrator.domain import chain_ledger
from orchestrator.domain.chain_events import (
    ChainEvent,
    args_from_json,
    args_to_json,
    subject_key,
    subjects,
)
from orchestrator.domain.chain_views import DisputeStatus, EscrowStatus
from orchestrator.domain.errors import InvalidTransition
from orchestrator.domain.lifecycle import (
    CHAIN_EVENT_TRANSITIONS,
    ChainEventStatus,
    chain_event_transition,
)

ALLOWED_MOVES = {("provisional", "final"), ("provisional", "dropped"), ("final", "dropped"),
                 ("dropped", "provisional"), ("dropped", "final")}
CUSTOMER = "0x" + "ab" * 20
JOB = b"\x01" * 32


def event(contract: str, name: str, block: int, **args: object) -> ChainEvent:
    return ChainEvent(contract=contract, name=name, args=args, block_number=block,
                      block_hash=bytes(32), tx_hash=block.to_bytes(32, "big"), log_index=0)


@pytest.mark.parametrize(("current", "target"),
                         list(itertools.product(ChainEventStatus, ChainEventStatus)))
def test_chain_event_transition_accepts_exactly_the_allowed_moves(
        current: ChainEventStatus, target: ChainEventStatus) -> None:
    assert set(CHAIN_EVENT_TRANSITIONS) == set(ChainEventStatus)
    if (current.value, target.value) in ALLOWED_MOVES:
        chain_event_transition(current, target)
    else:
        with pytest.raises(InvalidTransition):
            chain_event_transition(current, target)


def test_arguments_survive_json_exactly() -> None:
    args = {"amount": 2**200 + 1, "jobId": JOB, "provider": CUSTOMER, "granted": True,
            "jobIds": (JOB, b"\x02" * 32), "zero": 0}
    stored = args_to_json(args)
    assert all(isinstance(value, str | bool | list) for value in stored.values())
    assert args_from_json(stored) == args
    with pytest.raises(TypeError, match="cannot store"):
        args_to_json({"x": 1.5})
    with pytest.raises(ValueError, match="unknown stored"):
        args_from_json({"x": "q:1"})


def test_an_event_is_found_by_each_account_job_and_id_it_names() -> None:
    batch = event("JobEscrow", "JobsSettled", 1, jobIds=(JOB, b"\x02" * 32))
    assert subjects(batch) == {subject_key("job", JOB), subject_key("job", b"\x02" * 32)}
    slashed = event("StakeManager", "Slashed", 1, slashId=3, provider=CUSTOMER, jobId=bytes(32))
    assert subjects(slashed) == {subject_key("slash", 3), subject_key("account", CUSTOMER)}
    opened = event("Disputes", "DisputeOpened", 1, disputeId=4, kind=1,
                   subject=(3).to_bytes(32, "big"), opener=CUSTOMER, respondent=CUSTOMER)
    assert subject_key("slash", 3) in subjects(opened)
    assert subject_key("dispute", 4) in subjects(opened)


def test_the_escrow_fold_follows_creation_then_settlement_by_batch() -> None:
    events = [event("JobEscrow", "JobCreated", 1, jobId=JOB, customer=CUSTOMER, amount=5,
                    deadline=9, specHash=b"\x03" * 32),
              event("JobEscrow", "JobsSettled", 2, jobIds=(b"\x02" * 32, JOB))]
    assert chain_ledger.escrowed_job(JOB, []) is None
    funded = chain_ledger.escrowed_job(JOB, events[:1])
    assert funded is not None and funded.status is EscrowStatus.FUNDED and funded.amount == 5
    settled = chain_ledger.escrowed_job(JOB, events)
    assert settled is not None and settled.status is EscrowStatus.SETTLED


@pytest.mark.parametrize(("ruling", "status"), [
    (("DisputeRuled", {"granted": True}), DisputeStatus.GRANTED),
    (("DisputeRuled", {"granted": False}), DisputeStatus.DISMISSED),
    (("DisputeDefaulted", {}), DisputeStatus.DEFAULTED)])
def test_the_dispute_fold_follows_its_ruling(ruling: tuple[str, dict[str, object]],
                                             status: DisputeStatus) -> None:
    opened = event("Disputes", "DisputeOpened", 1, disputeId=4, kind=0, subject=JOB,
                   opener=CUSTOMER, respondent=CUSTOMER, bond=10, frozenAmount=3,
                   evidence=bytes(32), rulingDeadline=99)
    name, args = ruling
    ruled = chain_ledger.dispute(4, [opened, event("Disputes", name, 2, disputeId=4, **args)])
    assert ruled is not None and ruled.status is status and ruled.frozen_amount == 3
    still_open = chain_ledger.dispute(4, [opened])
    assert still_open is not None and still_open.status is DisputeStatus.OPEN


def test_a_zero_id_names_nothing_except_the_first_epoch() -> None:
    """Job, slash and dispute ids start at 1 (0 or a zero hash means "none"); epochs at 0."""
    assert subjects(event("StakeManager", "Slashed", 1, slashId=0, jobId=bytes(32),
                          disputeId=0)) == set()
    assert subjects(event("StakeManager", "Slashed", 1, slashId=1, disputeId=1)) == {
        "slash:1", "dispute:1"}
    assert subjects(event("StakeManager", "ScoreRootPosted", 1, epoch=0)) == {"epoch:0"}
    assert subjects(event("StakeManager", "ScoreRootPosted", 1, epoch=1)) == {"epoch:1"}


def test_a_dispute_of_a_settlement_names_its_job_and_one_of_a_slash_its_slash() -> None:
    common = {"disputeId": 4, "opener": CUSTOMER, "respondent": CUSTOMER}
    of_job = event("Disputes", "DisputeOpened", 1, kind=0, subject=JOB, **common)
    assert subjects(of_job) == {"dispute:4", f"account:{CUSTOMER}", "job:0x" + "01" * 32}
    of_slash = event("Disputes", "DisputeOpened", 1, kind=1, subject=(258).to_bytes(32, "big"),
                     **common)
    assert subjects(of_slash) == {"dispute:4", f"account:{CUSTOMER}", "slash:258"}
