from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import jobs as job_db
from orchestrator.db import leaders as leader_db
from orchestrator.db import leases as lease_db
from orchestrator.db import nodes as node_db
from orchestrator.db import statuses as status_db
from orchestrator.db.models import Lease, Task
from orchestrator.db.placement import (
    PlacementConflict,
    Reservation,
    changed_for,
    commit_reservations,
    load_slot_view,
    waiting_tasks,
)
from orchestrator.domain.lifecycle import TaskStatus
from orchestrator.domain.matching import ScoreFn
from orchestrator.domain.types import NodeHealth, TaskNeeds
from orchestrator.scheduling.placer import Placer
from orchestrator.services import work
from tests import builders

NodeMaker = Callable[..., list[str]]
JobMaker = Callable[..., str]


def live_slots(session: Session) -> list[tuple[str, int]]:
    return list(session.execute(select(Lease.node_id, Lease.slot)
                                .where(Lease.released_at.is_(None))))


def test_place_all_fills_every_slot_once_and_leaves_the_rest_waiting(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(3, slots=2)
    make_job(10)
    result = Placer(factory, clock=lambda: 100.0).place_all(batch_size=4)
    assert len(result.placed) == 6
    with factory() as session:
        slots = live_slots(session)
        assert len(slots) == len(set(slots)) == 6
        statuses = Counter(session.scalars(select(Task.status)))
        assert statuses == {"reserved": 6, "pending": 4}
        history = status_db.status_history(session, entity="task",
                                      entity_id=str(result.placed[0].task_id))
        assert [(h.from_status, h.to_status) for h in history] == [("pending", "reserved")]


def test_placement_respects_needs(factory: sessionmaker[Session], make_nodes: NodeMaker,
                                  make_job: JobMaker) -> None:
    make_nodes(2, prefix="small", vram_gb=8)
    big = make_nodes(1, prefix="big", vram_gb=48, slots=1)
    make_job(3, needs=TaskNeeds(min_vram_gb=40))
    placed = Placer(factory).place_all().placed
    assert [(p.node_id, p.slot) for p in placed] == [(big[0], 0)]


def test_placement_keeps_a_job_on_its_named_providers_and_region(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    trusted = "0x" + "b" * 40
    make_nodes(3, prefix="stranger", slots=2)  # PROVIDER's nodes: idle, cheaper, not named
    make_nodes(1, prefix="trusted-us", provider=trusted, region="us", price_per_gpu_hour=500)
    wanted = make_nodes(1, prefix="trusted-eu", provider=trusted, price_per_gpu_hour=500)
    job_id = make_job(4, needs=TaskNeeds(providers=frozenset({trusted}),
                                         regions=frozenset({"eu"})))
    placed = Placer(factory).place_all().placed
    assert sorted(p.node_id for p in placed) == [wanted[0], wanted[0]]
    with factory() as session:  # the constraint survives the task row's JSON
        (task, *_) = job_db.job_tasks(session, job_id=job_id)
        assert job_db.needs_from_json(task.needs).providers == {trusted}


def test_database_refuses_a_second_live_lease_on_one_slot(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    (node_id,) = make_nodes(1, slots=1)
    job_id = make_job(2)
    with factory() as session:
        first, second = job_db.job_tasks(session, job_id=job_id)
        session.add(Lease(task_id=first.id, node_id=node_id, slot=0, state="reserved",
                          created_at=0, expires_at=10))
        session.commit()
        session.add(Lease(task_id=second.id, node_id=node_id, slot=0, state="reserved",
                          created_at=0, expires_at=10))
        with pytest.raises(IntegrityError):
            session.commit()


def test_stale_view_conflicts_then_retries_without_double_booking(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(2, slots=1)
    make_job(4)
    stale = Placer(factory)
    stale.reload()  # sees both slots free
    fresh = Placer(factory)
    assert len(fresh.place_batch(batch_size=1).placed) == 1
    result = stale.place_batch(batch_size=4)
    assert result.conflicts >= 1
    assert len(result.placed) == 1
    with factory() as session:
        slots = live_slots(session)
        assert len(slots) == len(set(slots)) == 2


def test_a_finished_task_whose_lease_was_released_is_never_reserved_again(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    (node_id,) = make_nodes(1, slots=1)
    job_id = make_job(1)
    (placed,) = Placer(factory, clock=lambda: 0.0).place_all().placed
    with factory.begin() as session:
        (task,) = job_db.job_tasks(session, job_id=job_id)
        for status in (TaskStatus.RUNNING, TaskStatus.DONE):
            status_db.set_task_status(session, task=task, target=status, now=1.0, reason="test")
        lease = lease_db.live_lease_for_task(session, task_id=task.id)
        assert lease is not None
        lease_db.release_lease(session, lease=lease, now=1.0, reason="completed")
    # A placer that read the task while it was still pending commits its choice now: the slot
    # is free again and no live lease names the task, so only the status guard can refuse it.
    stale = Reservation(placed.task_id, job_id, node_id, 0, from_status="pending")
    with factory() as session, pytest.raises(PlacementConflict,
                                             match=r"^a task was taken by another placement$"):
        commit_reservations(session, reservations=[stale], now=2.0, ttl_s=60.0)
    with factory() as session:
        assert session.scalar(select(Task.status)) == "done"
        assert session.scalar(select(Task.attempts)) == 1
        assert live_slots(session) == []
        assert session.scalar(select(func.count()).select_from(Lease)) == 1


def test_slot_view_holds_alive_undrained_nodes_and_their_live_leases(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    alive, dead, draining = make_nodes(3, slots=2)
    make_job(1)
    Placer(factory, clock=lambda: 0.0).place_all()  # one task on one of the nodes
    with factory.begin() as session:
        node = node_db.get_node(session, node_id=dead)
        assert node is not None
        node_db.set_node_health(session, node=node, health=NodeHealth.DEAD, now=1.0, reason="t")
        drained = node_db.get_node(session, node_id=draining)
        assert drained is not None
        drained.draining = True
    with factory() as session:
        view = load_slot_view(session)
        (holder,) = {lease.node_id for lease in lease_db.live_leases(session)}
    assert [spec.node_id for spec in view.nodes] == [alive]
    assert view.held == {holder: {0}}


def test_waiting_tasks_are_the_oldest_schedulable_after_the_cursor(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, slots=1)
    job_id = make_job(5)
    Placer(factory, clock=lambda: 0.0).place_all()  # the first task is reserved now
    with factory() as session:
        ids = [t.id for t in job_db.job_tasks(session, job_id=job_id)]
        head = waiting_tasks(session, limit=10)
        assert [w.task_id for w in head] == ids[1:]
        waiting = waiting_tasks(session, limit=2, after=head[0].place, lock=False)
        assert [(w.task_id, w.job_id, w.status) for w in waiting] == [
            (ids[2], job_id, "pending"), (ids[3], job_id, "pending")]
        assert waiting_tasks(session, limit=10, after=head[-1].place) == []
        assert waiting[0].needs == job_db.job_tasks(session, job_id=job_id)[2].needs


def test_the_queue_serves_least_laxity_first_then_the_oldest(
        factory: sessionmaker[Session], make_job: JobMaker) -> None:
    # Latest starts: a 4-hour frame due in 10 h may start until 6 h; a 1-minute one due in
    # 2 h until 1 h 59; the second 1-minute job, due at the same time, is younger.
    feature = make_job(2, needs=TaskNeeds(expected_duration_s=4 * 3600), deadline=10 * 3600)
    preview = make_job(1, needs=TaskNeeds(expected_duration_s=60), deadline=2 * 3600)
    urgent = make_job(1, needs=TaskNeeds(expected_duration_s=3 * 3600), deadline=4 * 3600)
    twin = make_job(1, needs=TaskNeeds(expected_duration_s=60), deadline=2 * 3600)
    with factory() as session:
        order = [w.job_id for w in waiting_tasks(session, limit=10)]
        assert order == [urgent, preview, twin, feature, feature]
        assert [w.latest_start for w in waiting_tasks(session, limit=10)] == [
            3600, 7140, 7140, 6 * 3600, 6 * 3600]
        # Read page by page from the cursor, ties on the latest start included.
        pages, after = [], None
        while page := waiting_tasks(session, limit=2, after=after, lock=False):
            pages.append([w.job_id for w in page])
            after = page[-1].place
        assert pages == [[urgent, preview], [twin, feature], [feature]]


def test_the_batch_placer_gives_a_free_slot_to_the_task_with_the_least_laxity(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    (node_id,) = make_nodes(1, slots=1)
    make_job(3, needs=TaskNeeds(expected_duration_s=60), deadline=2 * 3600)  # older
    long_frame = make_job(1, needs=TaskNeeds(expected_duration_s=5 * 3600), deadline=6 * 3600)
    Placer(factory, clock=lambda: 0.0).place_all()
    with factory() as session:
        (lease,) = lease_db.live_leases(session)
        assert (lease.node_id, job_db.get_task(session, task_id=lease.task_id).job_id) == (
            node_id, long_frame)


def test_a_funded_job_is_scheduled_with_its_first_placement_only(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, slots=1)
    job_id = make_job(2)
    Placer(factory, clock=lambda: 7.0).place_all()
    with factory() as session:
        job = job_db.get_job(session, job_id=job_id)
        assert job is not None and job.status == "scheduled"
        history = status_db.status_history(session, entity="job", entity_id=job_id)
        assert [(h.from_status, h.to_status, h.at, h.reason) for h in history][-1] == (
            "funded", "scheduled", 7.0, "first task placed")


def test_expired_reservation_frees_the_slot_and_requeues_the_task_once_its_node_is_heard(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, slots=1)
    make_job(1)
    Placer(factory, lease_ttl_s=30, clock=lambda: 0.0).place_all()
    with factory.begin() as session:
        assert work.expire_leases(session, now=10.0).leases == 0
        assert work.expire_leases(session, now=31.0).leases == 1
    with factory() as session:
        assert live_slots(session) == []
        assert session.scalar(select(Task.status)) == "retry"
    # A failed start: the node is not placed on again until it is heard from.
    assert Placer(factory, clock=lambda: 40.0).place_all().placed == []
    with factory.begin() as session:
        (node_id,) = [n.id for n in node_db.all_nodes(session)]
        node_db.touch_heartbeats(session, beats={node_id: 45.0}, lease_ttl_s=60.0)
    again = Placer(factory, clock=lambda: 50.0).place_all().placed
    assert len(again) == 1


def test_leader_lease_has_one_holder_until_it_lapses(factory: sessionmaker[Session],
                                                     db_url: str) -> None:
    with factory.begin() as session:
        assert leader_db.try_lead(session, name="sweep", holder="a", now=0.0, ttl_s=10)
    with factory.begin() as session:
        assert not leader_db.try_lead(session, name="sweep", holder="b", now=5.0, ttl_s=10)
        assert leader_db.try_lead(session, name="sweep", holder="a", now=5.0, ttl_s=10)
    with factory.begin() as session:
        assert leader_db.try_lead(session, name="sweep", holder="b", now=16.0, ttl_s=10)


HAMMER = """
import sys
from orchestrator.db.session import make_engine, make_session_factory
from orchestrator.scheduling.placer import Placer
factory = make_session_factory(make_engine(sys.argv[1]))
placer = Placer(factory)
placed = 0
for _ in range(200):
    batch = placer.place_batch(batch_size=int(sys.argv[2]))
    placed += len(batch.placed)
    placer.reload()
    if not batch.placed and batch.unplaceable == 0:
        break
print(placed)
"""


@pytest.mark.postgres
def test_two_processes_never_double_lease_a_slot(postgres_url: str, factory: sessionmaker[Session],
                                                 db_url: str, make_nodes: NodeMaker,
                                                 make_job: JobMaker) -> None:
    if db_url != postgres_url:
        pytest.skip("the two-process race needs PostgreSQL")
    make_nodes(20, slots=4)  # 80 slots
    for _ in range(4):
        make_job(50)  # 200 tasks competing for 80 slots
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    workers = [subprocess.Popen([sys.executable, "-c", HAMMER, postgres_url, str(size)],
                                stdout=subprocess.PIPE, text=True, env=env) for size in (7, 11)]
    counts = [int(w.communicate(timeout=120)[0].strip()) for w in workers]
    assert all(w.returncode == 0 for w in workers)
    with factory() as session:
        slots = live_slots(session)
        assert len(slots) == len(set(slots)) == 80 == sum(counts)
        tasks_with_leases = session.scalar(
            select(func.count(func.distinct(Lease.task_id))).where(Lease.released_at.is_(None)))
        assert tasks_with_leases == 80


def test_tasks_no_node_can_take_do_not_block_the_queue_behind_them(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, slots=2)
    make_job(5, needs=TaskNeeds(min_vram_gb=1000))  # nobody has that much memory
    placeable = make_job(2)
    result = Placer(factory).place_all(batch_size=2)
    assert len(result.placed) == 2
    assert {r.job_id for r in result.placed} == {placeable}
    assert result.unplaceable == 5


def test_overdue_job_expires_and_frees_its_slots(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, slots=1)
    job_id = make_job(2, now=0.0, deadline=3600.0)
    Placer(factory, clock=lambda: 10.0).place_all()
    with factory.begin() as session:
        assert work.expire_overdue_jobs(session, now=100.0) == []
        assert work.expire_overdue_jobs(session, now=3601.0) == [job_id]
    with factory() as session:
        assert live_slots(session) == []
        assert Counter(session.scalars(select(Task.status))) == {"failed": 2}
        job = job_db.get_job(session, job_id=job_id)
        assert job is not None and job.status == "expired"


def test_placer_takes_a_fresh_score_at_each_reload(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, prefix="a", slots=1)
    make_nodes(1, prefix="b", slots=1)
    make_job(1)
    asked_at: list[float] = []

    def prefer_b(now: float) -> ScoreFn:
        asked_at.append(now)
        return lambda spec, needs: float(spec.node_id == "b-0")

    (placed,) = Placer(factory, clock=lambda: 5.0, score_at=prefer_b).place_all().placed
    assert placed.node_id == "b-0"  # the default score would pick a-0 (tie, then by id)
    assert asked_at and set(asked_at) == {5.0}


def test_a_committed_reservation_writes_the_lease_the_task_and_its_history(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    node_a, node_b = make_nodes(2, slots=2)
    job_id = make_job(2)
    with factory() as session:
        first, second = job_db.job_tasks(session, job_id=job_id)
        first_id, second_id = first.id, second.id
    with factory.begin() as session:  # the second task waits for a retry
        task = session.get(Task, second_id)
        assert task is not None
        for status in (TaskStatus.RESERVED, TaskStatus.RETRY):
            status_db.set_task_status(session, task=task, target=status, now=1.0, reason="test")
    reservations = [Reservation(second_id, job_id, node_b, 1, from_status="retry"),
                    Reservation(first_id, job_id, node_a, 0, from_status="pending")]
    with factory.begin() as session:
        commit_reservations(session, reservations=[], now=5.0, ttl_s=60.0)  # nothing to do
        assert session.scalar(select(func.count()).select_from(Lease)) == 0
        commit_reservations(session, reservations=reservations, now=5.0, ttl_s=60.0)
    with factory() as session:
        leases = {(lease.task_id, lease.node_id, lease.slot, lease.state, lease.created_at,
                   lease.expires_at, lease.released_at)
                  for lease in session.scalars(select(Lease))}
        assert leases == {(first_id, node_a, 0, "reserved", 5.0, 65.0, None),
                          (second_id, node_b, 1, "reserved", 5.0, 65.0, None)}
        tasks = {t.id: (t.status, t.node_id, t.attempts, t.updated_at)
                 for t in session.scalars(select(Task))}
        assert tasks == {first_id: ("reserved", node_a, 1, 5.0),
                         second_id: ("reserved", node_b, 1, 5.0)}
        history = status_db.status_history(session, entity="task", entity_id=str(second_id))
        assert [(h.from_status, h.to_status, h.at, h.reason) for h in history][-1] == (
            "retry", "reserved", 5.0, f"reserved on {node_b} slot 1")
        (only,) = status_db.status_history(session, entity="task", entity_id=str(first_id))
        assert (only.from_status, only.to_status, only.at, only.reason) == (
            "pending", "reserved", 5.0, f"reserved on {node_a} slot 0")


def test_without_a_cursor_every_waiting_task_is_listed_oldest_first(
        factory: sessionmaker[Session], make_job: JobMaker) -> None:
    first = make_job(2)  # the same deadline and duration: the same latest start
    second = make_job(1)
    with factory() as session:
        ids = [t.id for t in job_db.job_tasks(session, job_id=first)] + [
            t.id for t in job_db.job_tasks(session, job_id=second)]
        assert [w.task_id for w in waiting_tasks(session, limit=10)] == sorted(ids)
        assert [w.task_id for w in waiting_tasks(session, limit=10, lock=False)] == sorted(ids)


def test_only_the_jobs_placed_in_a_batch_become_scheduled(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, slots=1)
    placed_job = make_job(1)
    waiting_job = make_job(1)  # no slot left for it
    Placer(factory, clock=lambda: 3.0).place_all()
    with factory() as session:
        jobs = [job_db.get_job(session, job_id=job_id) for job_id in (placed_job, waiting_job)]
    assert [job.status if job else None for job in jobs] == ["scheduled", "funded"]


def test_a_slot_taken_twice_in_one_batch_is_a_conflict_naming_the_database_error(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    (node_id,) = make_nodes(1, slots=1)
    job_id = make_job(2)
    with factory() as session:
        first, second = (t.id for t in job_db.job_tasks(session, job_id=job_id))
    twice = [Reservation(first, job_id, node_id, 0, from_status="pending"),
             Reservation(second, job_id, node_id, 0, from_status="pending")]
    with factory() as session, pytest.raises(
            PlacementConflict, match=r"UNIQUE constraint failed|duplicate key value"):
        commit_reservations(session, reservations=twice, now=1.0, ttl_s=60.0)


def test_what_changes_an_idle_nodes_answer_is_its_own_lease_or_a_task_made_ready_since(
        factory: sessionmaker[Session]) -> None:
    idle, busy = builders.make_nodes(factory, 2, now=0.0)
    task_id = builders.lease_to(factory, busy, now=0.0)  # its job's one task, reserved for `busy`

    def changed(since: float) -> bool:
        with factory() as session:
            return changed_for(session, node_id=idle, since=since)

    assert changed(0.0) and not changed(10.0)  # registered at 0; nothing since
    with factory.begin() as session:  # another node's lease released at 20
        lease = session.scalars(select(Lease).where(Lease.task_id == task_id)).one()
        lease.released_at, lease.release_reason = 20.0, "node dead"
    assert not changed(15.0)
    with factory.begin() as session:  # its task ready again at 30
        task = session.get(Task, task_id)
        assert task is not None
        task.status, task.updated_at = TaskStatus.RETRY.value, 30.0
    assert changed(25.0) and not changed(35.0)
    own = builders.lease_to(factory, idle, now=40.0)
    with factory.begin() as session:  # a lease of its own released at 50: a slot came free
        lease = session.scalars(select(Lease).where(Lease.task_id == own)).one()
        lease.released_at, lease.release_reason = 50.0, "completed"
    assert changed(45.0) and not changed(55.0)
    with factory() as session:
        assert changed_for(session, node_id="never-registered", since=1e9)
