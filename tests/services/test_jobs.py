"""A customer's money never waits on a job that stopped: a failed job, a cancelled one (started
or not) and an expired one settle at once through the outbox, paying the verified tasks and
refunding the rest; with nothing verified the whole escrow is claimable at once. Against anvil
and a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.chain.anvil import increase_time
from orchestrator.chain.errors import ContractError
from orchestrator.chain.sdk import MeshChain
from orchestrator.db import jobs as job_db
from orchestrator.db import leases as lease_db
from orchestrator.db import nodes as node_db
from orchestrator.db import statuses as status_db
from orchestrator.db import verification as verification_db
from orchestrator.db.placement import Reservation, commit_reservations
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.errors import Refused
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus, TaskStatus, VerificationStatus
from orchestrator.domain.types import NodeSpec, TaskNeeds
from orchestrator.services import jobs, work
from orchestrator.services.outbox.sender import OutboxSender
from orchestrator.telemetry.metrics import MeshMetrics
from tests.clients import VirtualClock
from tests.services.test_outbox import (
    CUSTOMER,
    ORCHESTRATOR,
    OTHER_PROVIDER,
    PROVIDER,
    TOKEN,
    drain,
    escrow,
    fresh_sender,
    rows,
    tx_count,
)

pytestmark = pytest.mark.anvil
AMOUNT = 30 * TOKEN + 2  # not divisible by 3: the rounding goes back to the customer
TTL_S = 60.0


@pytest.fixture
def sender(mesh: MeshChain, metrics: MeshMetrics) -> OutboxSender:
    return OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics)


def node_of(provider: str) -> str:
    return f"node-{provider}"


def job_on_chain(factory: sessionmaker[Session], mesh: MeshChain, *, frames: int,
                 status: JobStatus, now: float) -> str:
    """A job escrowed on chain and accepted by the orchestrator, its tasks pending."""
    job_id = escrow(mesh, AMOUNT)
    with factory.begin() as session:
        for provider in (PROVIDER, OTHER_PROVIDER):
            node_db.register_node(session, spec=NodeSpec(
                node_id=node_of(provider), provider=provider, gpu_model="RTX4090", vram_gb=24,
                compute_capability=8.9, region="eu", price_per_gpu_hour=1, slots=4), now=now)
        job_db.create_job(session, NewJob(
            job_id=job_id, customer=CUSTOMER.address, spec={}, spec_hash="0x" + "05" * 32,
            amount=AMOUNT, deadline=now + 1e6, needs=TaskNeeds(),
            payloads=tuple({"frame": i} for i in range(frames))), now=now, status=status)
    return job_id


def start(factory: sessionmaker[Session], job_id: str, providers: list[str], *,
          now: float) -> list[int]:
    """Each task leased to its provider's node, as the scheduler does, and started there."""
    with factory.begin() as session:
        tasks = job_db.job_tasks(session, job_id=job_id)
        commit_reservations(session, reservations=[
            Reservation(task_id=task.id, job_id=job_id, node_id=node_of(provider), slot=slot,
                        from_status=TaskStatus.PENDING.value)
            for slot, (task, provider) in enumerate(zip(tasks, providers, strict=True))],
            now=now, ttl_s=TTL_S)
        session.expire_all()  # the reservations were one bulk UPDATE
        for task, provider in zip(tasks, providers, strict=True):
            work.report_progress(session, task_id=task.id, node_id=node_of(provider),
                                 progress=0.1, now=now, lease_ttl_s=TTL_S)
        return [task.id for task in tasks]


def deliver(factory: sessionmaker[Session], task_id: int, provider: str, *,
            verdict: VerificationStatus | None, now: float) -> None:
    """The task's result delivered and committed; `verdict` its verification so far."""
    sha = f"{task_id:064x}"
    with factory.begin() as session:
        task, lease = work.held_lease(session, task_id=task_id, node_id=node_of(provider))
        status_db.set_task_status(session, task=task, target=TaskStatus.DONE, now=now,
                                  reason="test")
        task.result_sha256 = sha
        lease_db.release_lease(session, lease=lease, now=now, reason="completed")
        row = verification_db.add_commitment(
            session, task_id=task_id, job_id=task.job_id, node_id=node_of(provider),
            provider=provider, attempt=1, result_sha256=sha, root="0x" + "00" * 32, leaves=[],
            windows=1, env=None, chunks=[], policy="spot", rate=1.0, seed="0x" + "00" * 32,
            created_at=now)
        for step in {VerificationStatus.PASSED: (VerificationStatus.CHECKING,
                                                 VerificationStatus.PASSED),
                     None: ()}[verdict]:
            verification_db.set_status(session, commitment=row, target=step, now=now,
                                       reason="test")


def cancel(factory: sessionmaker[Session], job_id: str, *, now: float) -> jobs.JobView:
    with factory() as session:
        return jobs.cancel(session, job_id=job_id, customer=CUSTOMER.address, now=now)


def settle_all(factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
               clock: VirtualClock) -> None:
    """Two passes of the outbox sender: the settlement sent, then confirmed."""
    for _ in range(2):
        drain(factory, sender, clock)


def test_a_failed_job_settles_paying_nobody_and_its_escrow_comes_back_at_once(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        clock: VirtualClock) -> None:
    job_id = job_on_chain(factory, mesh, frames=1, status=JobStatus.SCHEDULED, now=clock.now)
    (task_id,) = start(factory, job_id, [PROVIDER], now=clock.now)
    with factory.begin() as session:
        task = job_db.get_task(session, task_id=task_id)
        assert task is not None
        task.attempts = work.MAX_ATTEMPTS
        work.fail_task(session, task_id=task_id, node_id=node_of(PROVIDER), reason="error",
                       now=clock.now, message="Missing DNA block")
    before = mesh.token_balance(CUSTOMER.address)

    settle_all(factory, mesh, sender, clock)

    escrowed = mesh.escrowed_job(bytes.fromhex(job_id[2:]))
    assert escrowed is not None and escrowed.status is EscrowStatus.SETTLED
    refund, _ = mesh.account(CUSTOMER).claim_refund(bytes.fromhex(job_id[2:]))
    assert refund == AMOUNT
    assert mesh.token_balance(CUSTOMER.address) == before + AMOUNT
    with factory() as session:
        assert jobs.status(session, job_id=job_id).status == "failed"
        # Cancelling the failed job answers its status; nothing is queued a second time.
        assert jobs.cancel(session, job_id=job_id, customer=CUSTOMER.address,
                           now=clock.now).reason == "frame task 0 failed 5 times; node " \
            f"{node_of(PROVIDER)} reported: Missing DNA block"
    assert len(rows(factory)) == 1


def test_an_expired_job_that_no_node_took_is_refunded_at_once(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        clock: VirtualClock) -> None:
    job_id = job_on_chain(factory, mesh, frames=1, status=JobStatus.FUNDED, now=clock.now)
    with factory.begin() as session:
        assert work.expire_overdue_jobs(session, now=clock.now + 2e6) == [job_id]

    settle_all(factory, mesh, sender, clock)

    refund, _ = mesh.account(CUSTOMER).claim_refund(bytes.fromhex(job_id[2:]))
    assert refund == AMOUNT


def test_a_cancelled_job_that_never_started_is_refunded_at_once(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        clock: VirtualClock) -> None:
    job_id = job_on_chain(factory, mesh, frames=2, status=JobStatus.FUNDED, now=clock.now)
    assert cancel(factory, job_id, now=clock.now).status == "cancelled"
    before = mesh.token_balance(CUSTOMER.address)

    settle_all(factory, mesh, sender, clock)

    refund, _ = mesh.account(CUSTOMER).claim_refund(bytes.fromhex(job_id[2:]))
    assert (refund, mesh.token_balance(CUSTOMER.address)) == (AMOUNT, before + AMOUNT)


def test_cancelling_a_running_job_stops_its_tasks_pays_the_verified_one_and_refunds_the_rest_once(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        clock: VirtualClock) -> None:
    job_id = job_on_chain(factory, mesh, frames=3, status=JobStatus.SCHEDULED, now=clock.now)
    verified, undecided, running = start(factory, job_id, [PROVIDER, OTHER_PROVIDER, PROVIDER],
                                         now=clock.now)
    deliver(factory, verified, PROVIDER, verdict=VerificationStatus.PASSED, now=clock.now)
    deliver(factory, undecided, OTHER_PROVIDER, verdict=None, now=clock.now)
    sent_before = tx_count(mesh)

    assert cancel(factory, job_id, now=clock.now).status == "cancelled"

    with factory() as session:
        assert lease_db.live_lease_for_task(session, task_id=running) is None
        statuses = [task.status for task in job_db.job_tasks(session, job_id=job_id)]
        assert statuses == ["done", "done", "failed"]
        # The agent learns on its next call: its lease is gone.
        with pytest.raises(work.WorkError, match="no live lease"):
            work.report_progress(session, task_id=running, node_id=node_of(PROVIDER),
                                 progress=0.5, now=clock.now, lease_ttl_s=TTL_S)
    settle_all(factory, mesh, sender, clock)
    # Asked again, by a second cancel and by a restarted sender: still one settlement.
    assert cancel(factory, job_id, now=clock.now).status == "cancelled"
    restarted = fresh_sender(mesh)
    settle_all(factory, mesh, restarted, clock)
    assert [row.status for row in rows(factory)] == ["confirmed"]
    assert tx_count(mesh) == sent_before + 1

    job_key = bytes.fromhex(job_id[2:])
    paid = AMOUNT // 3
    assert mesh.refund_owed(job_key) == AMOUNT - paid
    with pytest.raises(ContractError, match="RefundNotClaimableYet"):  # someone was paid
        mesh.account(CUSTOMER).claim_refund(job_key)
    increase_time(mesh.w3, mesh.settlement_dispute_window() + mesh.payout_period())
    assert mesh.escrow_balance(PROVIDER).claimable == paid
    assert mesh.escrow_balance(OTHER_PROVIDER).claimable == 0
    refund, _ = mesh.account(CUSTOMER).claim_refund(job_key)
    assert refund == AMOUNT - paid


def test_a_job_whose_every_task_is_done_cannot_be_cancelled(
        factory: sessionmaker[Session], mesh: MeshChain, clock: VirtualClock) -> None:
    job_id = job_on_chain(factory, mesh, frames=1, status=JobStatus.SCHEDULED, now=clock.now)
    (task_id,) = start(factory, job_id, [PROVIDER], now=clock.now)
    deliver(factory, task_id, PROVIDER, verdict=None, now=clock.now)
    with factory.begin() as session:
        job = job_db.lock_job(session, job_id=job_id)
        assert job is not None
        status_db.set_job_status(session, job=job, target=JobStatus.VERIFYING, now=clock.now,
                                 reason="all tasks done")
    with pytest.raises(Refused, match="every task is done"):
        cancel(factory, job_id, now=clock.now)
    assert rows(factory) == []
