"""Two replicas writing the same rows at once, on PostgreSQL (READ COMMITTED, as deployed) and
on SQLite: each test holds one transaction open at the racing step while a second one, on
another connection, does the other replica's part, then lets the first commit. Found by
`mesh bench scaleout`: the last two tasks of a job completed at once left the job running
for good, and a provider's first verification record written twice at once was a 500; by
`mesh bench chaos`: a lease pull that read its clock before the sweep freed a task stamped its
new lease before the old one's release (the history checker's "leased twice at once")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mesh.bench.replicas import scratch_database
from orchestrator.db import blobs as blob_db
from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db import verification as verification_store
from orchestrator.db.models import Lease, VerificationRecord
from orchestrator.db.placement import Reservation, commit_reservations
from orchestrator.db.session import make_engine, make_session_factory, upgrade_to_head
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.types import NodeSpec, TaskNeeds
from orchestrator.domain.verification import ProviderRecord
from orchestrator.services import work
from orchestrator.services.placement import PlacementPass
from orchestrator.telemetry.metrics import MeshMetrics
from tests.races import race

PROVIDER = "0x" + "ab" * 20
RESULT = "cd" * 32


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    with ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path / 'races.db'}"
        else:
            url = stack.enter_context(scratch_database(request.getfixturevalue("postgres_url")))
        engine = make_engine(url)
        upgrade_to_head(engine)
        yield make_session_factory(engine)
        engine.dispose()


def running_job(factory: sessionmaker[Session]) -> list[int]:
    """A two-task job, each task started on a node of its own; the task ids."""
    now = time.time()
    with factory.begin() as session:
        for node in ("n0", "n1", "spare"):
            node_db.register_node(session, spec=NodeSpec(
                node_id=node, provider=PROVIDER, gpu_model="RTX4090", vram_gb=24,
                compute_capability=8.9, region="eu", price_per_gpu_hour=1, slots=1), now=now)
        job_db.create_job(session, NewJob(
            job_id="0x" + "01" * 32, customer=PROVIDER,
            spec={"workload": {"kind": "command", "command": ["true"], "count": 2}},
            spec_hash="0x" + "02" * 32, amount=2, deadline=now + 3600, needs=TaskNeeds(),
            payloads=({"shard": 0}, {"shard": 1},)), now=now, status=JobStatus.RUNNING)
        blob_db.add_blob(session, sha256=RESULT, size=10, now=now)
        for node in ("n0", "n1"):  # each node uploaded the result it delivers
            blob_db.reserve_upload(session, sha256=RESULT, uploader=blob_db.node_uploader(node),
                                   size=10, now=now, expires_at=now + 3600)
        session.flush()
        tasks = [task.id for task in job_db.job_tasks(session, job_id="0x" + "01" * 32)]
        commit_reservations(session, reservations=[
            Reservation(task, "0x" + "01" * 32, f"n{i}", 0, "pending")
            for i, task in enumerate(tasks)], now=now, ttl_s=60)
    for i, task in enumerate(tasks):
        with factory.begin() as session:
            work.report_progress(session, task_id=task, node_id=f"n{i}", progress=0.0,
                                 now=now, lease_ttl_s=60)
    return tasks


def test_the_last_two_tasks_completed_at_once_move_the_job_to_verifying(
        factory: sessionmaker[Session]) -> None:
    tasks = running_job(factory)

    def complete(index: int) -> Callable[[Session], None]:
        def finish(session: Session) -> None:
            work.complete_task(session, task_id=tasks[index], node_id=f"n{index}",
                               result_sha256=RESULT, now=time.time())
        return finish

    race(factory, complete(0), complete(1))
    with factory() as session:
        job = job_db.get_job(session, job_id="0x" + "01" * 32)
        assert job is not None and job.status == JobStatus.VERIFYING.value


def test_a_providers_record_written_at_once_by_two_replicas_keeps_both_changes(
        factory: sessionmaker[Session]) -> None:
    def add(streak: int) -> Callable[[Session], None]:
        def write(session: Session) -> None:
            verification_store.update_record(
                session, provider=PROVIDER, now=time.time(),
                change=lambda held: ProviderRecord(held.consecutive_valid + streak, 0))
            session.flush()
        return write

    race(factory, add(1), add(2))  # the provider's first record: both insert it
    race(factory, add(4), add(8))  # then both update it
    with factory() as session:
        row = session.get(VerificationRecord, PROVIDER)
        assert row is not None and row.consecutive_valid == 15  # no streak lost


def test_a_pass_that_read_its_clock_before_the_sweep_freed_a_task_leases_it_after_the_release(
        factory: sessionmaker[Session]) -> None:
    tasks = running_job(factory)
    began = time.time()
    released_at = began + 5.0  # the sweep's clock: read after the pull's first read
    reads: list[float] = []

    def clock() -> float:
        if not reads:  # the pass's first read; then, before it reads the queue, the sweep
            with factory.begin() as other:  # calls n0 dead and commits, on another connection
                work.revoke_node_leases(other, node_id="n0", now=released_at, cause="dead")
            reads.append(began)
        else:
            reads.append(released_at + 0.5)  # time went on
        return reads[-1]

    placement = PlacementPass(factory, gate=None, reservation_ttl_s=60, lead_ttl_s=3.0,
                              idle_gap_s=1.0, metrics=MeshMetrics(), clock=clock)
    result = placement.run()
    assert result is not None and [r.task_id for r in result.placed] == [tasks[0]]
    with factory() as session:
        spans = sorted((lease.created_at, lease.released_at)
                       for lease in session.scalars(select(Lease).where(
                           Lease.task_id == tasks[0])))
    assert [released for _, released in spans] == [released_at, None]
    assert spans[1][0] >= released_at  # the new lease began after the old one ended
