"""Two replicas writing the same rows at once, on PostgreSQL (READ COMMITTED, as deployed):
each test holds one transaction open at the racing step while a second one, on another
connection, does the other replica's part, then lets the first commit. Found by
`mesh bench scaleout`: the last two tasks of a job completed at once left the job running
for good, and a provider's first verification record written twice at once was a 500."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.bench.replicas import scratch_database
from orchestrator.db import crud
from orchestrator.db import verification as verification_store
from orchestrator.db.models import VerificationRecord
from orchestrator.db.placement import Reservation, commit_reservations
from orchestrator.db.session import make_engine, make_session_factory
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.types import NodeSpec, TaskNeeds
from orchestrator.domain.verification import ProviderRecord
from orchestrator.services import work

pytestmark = pytest.mark.postgres

PROVIDER = "0x" + "ab" * 20
RESULT = "cd" * 32


@pytest.fixture
def factory(postgres_url: str) -> Iterator[sessionmaker[Session]]:
    with scratch_database(postgres_url) as url:
        engine = make_engine(url)
        yield make_session_factory(engine)
        engine.dispose()


def race(factory: sessionmaker[Session], first: Callable[[Session], None],
         second: Callable[[Session], None]) -> None:
    """`first` runs and stays uncommitted while `second` runs (and commits) on another
    connection; `first` commits half a second later, whether `second` is blocked or done."""
    failures: list[BaseException] = []

    def other() -> None:
        try:
            with factory.begin() as session:
                second(session)
        except BaseException as exc:
            failures.append(exc)

    with factory.begin() as session:
        first(session)
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.5)
    thread.join(timeout=30)
    assert not failures, failures


def running_job(factory: sessionmaker[Session]) -> list[int]:
    """A two-task job, each task started on a node of its own; the task ids."""
    now = time.time()
    with factory.begin() as session:
        for node in ("n0", "n1"):
            crud.register_node(session, spec=NodeSpec(
                node_id=node, provider=PROVIDER, gpu_model="RTX4090", vram_gb=24,
                compute_capability=8.9, region="eu", price_per_gpu_hour=1, slots=1), now=now)
        crud.create_job(session, job_id="0x" + "01" * 32, customer=PROVIDER,
                        spec={"workload": {"kind": "command", "command": ["true"], "count": 2}},
                        spec_hash="0x" + "02" * 32, amount=2, deadline=now + 3600,
                        needs=TaskNeeds(), task_payloads=[{"shard": 0}, {"shard": 1}], now=now,
                        status=JobStatus.RUNNING)
        crud.add_blob(session, sha256=RESULT, size=10, now=now)
        session.flush()
        tasks = [task.id for task in crud.job_tasks(session, job_id="0x" + "01" * 32)]
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
        job = crud.get_job(session, job_id="0x" + "01" * 32)
        assert job is not None and job.status == JobStatus.VERIFYING.value


def test_a_providers_first_record_written_at_once_by_two_replicas_is_no_error(
        factory: sessionmaker[Session]) -> None:
    def save(streak: int) -> Callable[[Session], None]:
        def write(session: Session) -> None:
            verification_store.save_record(session, provider=PROVIDER,
                                           record=ProviderRecord(streak, 0), now=time.time())
            session.flush()
        return write

    race(factory, save(1), save(2))
    with factory() as session:
        row = session.get(VerificationRecord, PROVIDER)
        assert row is not None and row.consecutive_valid == 2  # the later write stands
