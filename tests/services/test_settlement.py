"""settling -> settled has one owner, `settlement.mark_settled`: it moves a job only when the
escrow on chain shows it Settled, once, with the lag since the settlement was queued."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import jobs as job_db
from orchestrator.db import statuses as status_db
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.types import TaskNeeds
from orchestrator.services import settlement

JOB = "0x" + "5e" * 32


def settling_job(factory: sessionmaker[Session], *, at: float) -> None:
    with factory.begin() as session:
        job_db.create_job(session, NewJob(
            job_id=JOB, customer="0x" + "c" * 40, spec={}, spec_hash="0x" + "0" * 64, amount=10,
            deadline=1e12, needs=TaskNeeds(), payloads=({"frame": 1},)), now=at,
            status=JobStatus.SETTLING)


def status(factory: sessionmaker[Session]) -> str:
    with factory() as session:
        job = job_db.get_job(session, job_id=JOB)
        assert job is not None
        return job.status


@pytest.mark.parametrize("escrow", [s for s in EscrowStatus if s is not EscrowStatus.SETTLED])
def test_a_job_stays_settling_until_the_escrow_shows_it_settled(
        factory: sessionmaker[Session], escrow: EscrowStatus) -> None:
    settling_job(factory, at=100.0)
    with factory.begin() as session:
        assert settlement.mark_settled(session, job_id=JOB, escrow=escrow, now=120.0,
                                       reason="confirmed") is None
    assert status(factory) == "settling"


def test_the_settled_escrow_moves_the_job_once_with_its_lag(
        factory: sessionmaker[Session]) -> None:
    settling_job(factory, at=100.0)
    for now, lag in ((130.0, 30.0), (140.0, None)):
        with factory.begin() as session:
            assert settlement.mark_settled(session, job_id=JOB, escrow=EscrowStatus.SETTLED,
                                           now=now, reason="confirmed") == lag
    assert status(factory) == "settled"
    with factory() as session:
        history = status_db.status_history(session, entity="job", entity_id=JOB)
        assert [(h.to_status, h.at, h.reason) for h in history][-1] == (
            "settled", 130.0, "confirmed")
    with factory.begin() as session:
        assert settlement.mark_settled(session, job_id="0x" + "00" * 32,
                                       escrow=EscrowStatus.SETTLED, now=150.0,
                                       reason="not ours") is None


def test_a_reorged_settlement_unsettles_the_job_and_only_a_final_event_settles_it_again(
        factory: sessionmaker[Session]) -> None:
    settling_job(factory, at=100.0)
    with factory.begin() as session:
        assert settlement.unsettle_reorged(session, job_ids=[JOB], now=110.0) == []  # settling
        assert settlement.mark_settled(session, job_id=JOB, escrow=EscrowStatus.SETTLED,
                                       now=120.0, reason="receipt", final=False) == 20.0
        assert settlement.unsettle_reorged(session, job_ids=[JOB, "0x" + "00" * 32],
                                           now=130.0) == [JOB]
    assert status(factory) == "settling"
    with factory.begin() as session:
        assert settlement.mark_settled(session, job_id=JOB, escrow=EscrowStatus.SETTLED,
                                       now=140.0, reason="receipt again", final=False) is None
    assert status(factory) == "settling"
    with factory.begin() as session:
        assert settlement.mark_settled(session, job_id=JOB, escrow=EscrowStatus.SETTLED,
                                       now=150.0, reason="final event") == 20.0
    assert status(factory) == "settled"
