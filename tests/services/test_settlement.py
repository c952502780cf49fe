"""settling -> settled has one owner, `settlement.mark_settled`: it moves a job only when the
escrow on chain shows it Settled, once, with the lag since the settlement was queued."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import blobs as blob_db
from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db import statuses as status_db
from orchestrator.db import verification as verification_db
from orchestrator.db.models import OutboxAction
from orchestrator.domain.chain_actions import SettleJob, decode
from orchestrator.domain.chain_events import ChainEvent
from orchestrator.domain.chain_views import EscrowedJob, EscrowStatus
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus, TaskStatus, VerificationStatus
from orchestrator.domain.merkle import MerkleTree
from orchestrator.domain.types import TaskNeeds
from orchestrator.services import settlement
from orchestrator.telemetry.metrics import MeshMetrics
from tests.builders import node_spec

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
        assert settlement.unsettle_reorged(session, job_ids=["0x" + "00" * 32, JOB],
                                           now=130.0) == [JOB]  # past a job not ours
    assert status(factory) == "settling"
    with factory.begin() as session:
        assert settlement.mark_settled(session, job_id=JOB, escrow=EscrowStatus.SETTLED,
                                       now=140.0, reason="receipt again", final=False) is None
    assert status(factory) == "settling"
    with factory.begin() as session:
        assert settlement.mark_settled(session, job_id=JOB, escrow=EscrowStatus.SETTLED,
                                       now=150.0, reason="final event") == 20.0
    assert status(factory) == "settled"


# ----- what a settlement pays, and to whom --------------------------------------------------

PROVIDER_LOW, PROVIDER_HIGH = "0x" + "1" * 40, "0x" + "2" * 40  # sorted: LOW first
ROOT = "0x" + "ab" * 32


def delivered_job(factory: sessionmaker[Session], *, amount: int,
                  deliveries: list[tuple[str | None, str, str | None]],
                  status: JobStatus = JobStatus.VERIFYING, job_id: str = JOB) -> list[int]:
    """A job of one task per delivery (node, task status, result) whose escrow holds `amount`;
    nodes `low-*` are PROVIDER_LOW's, `high-*` PROVIDER_HIGH's, others unregistered. Its task
    ids."""
    with factory.begin() as session:
        for node_id in sorted({node for node, _, _ in deliveries if node}):
            provider = {"low": PROVIDER_LOW, "high": PROVIDER_HIGH}.get(node_id.split("-")[0])
            if provider is not None:
                node_db.register_node(session, spec=node_spec(node_id, provider=provider),
                                      now=0.0)
        job_db.create_job(session, NewJob(
            job_id=job_id, customer="0x" + "c" * 40, spec={}, spec_hash="0x" + "0" * 64,
            amount=amount, deadline=1e12, needs=TaskNeeds(),
            payloads=tuple({"frame": i} for i in range(len(deliveries)))), now=0.0,
            status=status)
        job = job_db.get_job(session, job_id=job_id)
        assert job is not None
        job.merkle_root = ROOT
        tasks = job_db.job_tasks(session, job_id=job_id)
        for task, (node_id, task_status, result) in zip(tasks, deliveries, strict=True):
            task.node_id, task.status, task.result_sha256 = node_id, task_status, result
        return [task.id for task in tasks]


def settle_action(factory: sessionmaker[Session], job_id: str = JOB) -> SettleJob:
    with factory() as session:
        (row,) = session.scalars(select(OutboxAction)
                                 .where(OutboxAction.idempotency_key == f"settle:{job_id}"))
        action = decode(row.kind, row.payload)
    assert isinstance(action, SettleJob)
    return action


def commit(factory: sessionmaker[Session], task_id: int, result: str,
           verdict: VerificationStatus) -> None:
    with factory.begin() as session:
        row = verification_db.add_commitment(
            session, task_id=task_id, job_id=JOB, node_id="n", provider=PROVIDER_LOW,
            attempt=1, result_sha256=result, root="0x" + "0" * 64, leaves=[], windows=1,
            chunks=[], policy="p", rate=0.0, seed="0x" + "0" * 64, created_at=0.0)
        row.status = verdict.value


def test_a_verified_job_pays_each_provider_its_tasks_share(
        factory: sessionmaker[Session]) -> None:
    done = TaskStatus.DONE.value
    delivered_job(factory, amount=10, deliveries=[
        ("high-0", done, "e" * 64), ("high-1", done, "f" * 64), ("low-0", done, "d" * 64),
        ("ghost-0", done, "c" * 64)])  # a node no longer registered: nobody to pay

    with factory.begin() as session:
        job = job_db.get_job(session, job_id=JOB)
        assert job is not None
        assert settlement.queue_settlement(session, job=job, now=50.0) is True

    action = settle_action(factory)
    assert action.providers == (PROVIDER_LOW, PROVIDER_HIGH)
    assert action.payouts == (10 * 1 // 4, 10 * 2 // 4)  # the rest is the customer's
    assert action.merkle_root == bytes.fromhex(ROOT[2:])
    assert status(factory) == "settling"
    with factory() as session:
        assert {t.status for t in job_db.job_tasks(session, job_id=JOB)} == {"verified"}
        history = status_db.status_history(session, entity="job", entity_id=JOB)
        assert [(h.to_status, h.at, h.reason) for h in history][-2:] == [
            ("completed", 50.0, "verification passed"), ("settling", 50.0, "settlement queued")]
        task_history = status_db.status_history(session, entity="task",
                                                entity_id=str(job_db.job_tasks(
                                                    session, job_id=JOB)[0].id))
        assert (task_history[-1].to_status, task_history[-1].reason) == ("verified",
                                                                        "job accepted")


def test_a_stopped_job_pays_only_tasks_whose_latest_result_passed_and_keeps_its_status(
        factory: sessionmaker[Session]) -> None:
    done, verified = TaskStatus.DONE.value, TaskStatus.VERIFIED.value
    passed, trusted = VerificationStatus.PASSED, VerificationStatus.TRUSTED
    paid_low, paid_high, unjudged, stale, overturned, unfinished = delivered_job(
        factory, amount=12, status=JobStatus.FAILED, deliveries=[
            ("low-0", done, "a" * 64), ("high-0", verified, "b" * 64),
            ("high-1", done, "c" * 64), ("high-2", done, "d" * 64),
            ("low-1", done, "e" * 64), ("low-2", TaskStatus.FAILED.value, "f" * 64)])
    commit(factory, paid_low, "a" * 64, passed)
    commit(factory, paid_high, "b" * 64, trusted)
    commit(factory, unjudged, "c" * 64, VerificationStatus.COMMITTED)
    commit(factory, stale, "0" * 64, passed)  # a passed commitment of an older result
    commit(factory, overturned, "e" * 64, passed)
    commit(factory, overturned, "e" * 64, VerificationStatus.FAILED)  # the latest counts
    commit(factory, unfinished, "f" * 64, passed)  # the task itself failed
    hashes = ["1" * 64, "2" * 64]
    with factory.begin() as session:
        for sha, task_id in zip(hashes, (paid_low, paid_high), strict=True):
            blob_db.add_blob(session, sha256=sha, size=1, now=0.0)
            task = job_db.get_task(session, task_id=task_id)
            assert task is not None
            blob_db.add_checkpoint(session, task=task, node_id="n", sha256=sha, progress=0.5,
                                   is_result=False, now=0.0)

    with factory.begin() as session:
        job = job_db.get_job(session, job_id=JOB)
        assert job is not None
        assert [t.id for t in settlement.verified_tasks(session, job_id=JOB)] == [
            paid_low, paid_high]
        assert settlement.queue_refund(session, job=job, now=70.0) is True
        assert settlement.queue_refund(session, job=job, now=80.0) is False

    action = settle_action(factory)
    assert (action.providers, action.payouts) == ((PROVIDER_LOW, PROVIDER_HIGH), (2, 2))
    assert action.merkle_root == MerkleTree.build([bytes.fromhex(h) for h in hashes]).root
    assert status(factory) == "failed"


def test_a_stopped_job_with_nothing_verified_refunds_everything_with_no_root(
        factory: sessionmaker[Session]) -> None:
    (task_id,) = delivered_job(factory, amount=5, status=JobStatus.CANCELLED,
                               deliveries=[("low-0", TaskStatus.DONE.value, "a" * 64)])
    with factory.begin() as session:
        blob_db.add_blob(session, sha256="1" * 64, size=1, now=0.0)
        task = job_db.get_task(session, task_id=task_id)
        assert task is not None
        blob_db.add_checkpoint(session, task=task, node_id="low-0", sha256="1" * 64,
                               progress=0.5, is_result=False, now=0.0)
        job = job_db.get_job(session, job_id=JOB)
        assert job is not None
        assert settlement.queue_refund(session, job=job, now=70.0) is True

    action = settle_action(factory)
    assert (action.providers, action.payouts, action.merkle_root) == ((), (), None)


@pytest.mark.parametrize("stopped", [JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.EXPIRED])
def test_only_a_stopped_job_is_refunded(factory: sessionmaker[Session],
                                        stopped: JobStatus) -> None:
    delivered_job(factory, amount=5, status=JobStatus.RUNNING,
                  deliveries=[("low-0", TaskStatus.RUNNING.value, None)])
    with factory.begin() as session:
        job = job_db.get_job(session, job_id=JOB)
        assert job is not None
        with pytest.raises(ValueError, match=f"job {JOB} is running: only a stopped job"):
            settlement.queue_refund(session, job=job, now=70.0)
        job.status = stopped.value
        assert settlement.queue_refund(session, job=job, now=70.0) is True


def test_a_job_with_no_artifacts_has_no_root(factory: sessionmaker[Session]) -> None:
    delivered_job(factory, amount=5, deliveries=[("low-0", TaskStatus.DONE.value, "a" * 64)])
    with factory() as session:
        assert settlement.job_merkle_root(session, job_id=JOB) is None


# ----- learning from the chain that a settlement landed ----------------------------------

def settled_event(name: str, args: dict[str, Any]) -> ChainEvent:
    return ChainEvent("JobEscrow", name, args, 42, b"\x01" * 32, b"\x02" * 32, 0)


def test_final_settlement_events_settle_their_jobs_and_leave_others_alone(
        factory: sessionmaker[Session]) -> None:
    other = "0x" + "5f" * 32
    settling_job(factory, at=100.0)
    delivered_job(factory, amount=5, status=JobStatus.SETTLING, job_id=other,
                  deliveries=[("low-0", TaskStatus.VERIFIED.value, "a" * 64)])
    with factory.begin() as session:
        settlement.on_settled(session, settled_event("JobSettled", {
            "jobId": bytes.fromhex(JOB[2:])}), now=130.0)
    assert status(factory) == "settled"
    with factory() as session:
        history = status_db.status_history(session, entity="job", entity_id=JOB)
        assert history[-1].reason == "settlement final on chain (block 42)"
        job = job_db.get_job(session, job_id=other)
        assert job is not None and job.status == "settling"
    with factory.begin() as session:
        settlement.on_settled(session, settled_event("JobsSettled", {"jobIds": [
            bytes.fromhex(other[2:]), bytes.fromhex(JOB[2:]), b"\x09" * 32]}), now=140.0)
        job = job_db.get_job(session, job_id=other)
        assert job is not None and job.status == "settled"


def test_the_sync_confirms_what_the_chain_settled_and_flags_what_it_closed_otherwise(
        factory: sessionmaker[Session]) -> None:
    jobs = {name: "0x" + f"{i:064x}" for i, name in enumerate(
        ["settled", "funded", "unseen", "reclaimed"], start=1)}
    for job_id in jobs.values():
        delivered_job(factory, amount=5, status=JobStatus.SETTLING, job_id=job_id,
                      deliveries=[("low-0", TaskStatus.VERIFIED.value, "a" * 64)])
    chain = {"settled": EscrowStatus.SETTLED, "funded": EscrowStatus.FUNDED,
             "reclaimed": EscrowStatus.RECLAIMED}
    by_raw = {bytes.fromhex(job_id[2:]): name for name, job_id in jobs.items()}

    def read_escrow(raw: bytes) -> EscrowedJob | None:
        name = by_raw[raw]
        return None if name not in chain else EscrowedJob(raw, "0x" + "c" * 40, 5, 10**12,
                                                          b"\x00" * 32, chain[name])

    metrics = MeshMetrics()
    with factory.begin() as session:
        result = settlement.sync_escrow(session, read_escrow=read_escrow, metrics=metrics,
                                        now=25.0)

    assert result == settlement.SettlementSync(settled=[(jobs["settled"], 25.0)],
                                               diverged=[jobs["reclaimed"]])
    summary = metrics.figures()
    assert (summary.divergence, summary.settlement_lag_mean_s) == (1, 25.0)
    with factory() as session:
        statuses = {name: job_db.get_job(session, job_id=job_id) for name, job_id in jobs.items()}
        assert {name: job.status for name, job in statuses.items() if job} == {
            "settled": "settled", "funded": "settling", "unseen": "settling",
            "reclaimed": "settling"}
        history = status_db.status_history(session, entity="job", entity_id=jobs["settled"])
        assert history[-1].reason == "settlement confirmed on chain"
