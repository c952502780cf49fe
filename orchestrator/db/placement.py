"""The database side of placement: the DB is the arbiter of who holds which GPU slot.

The scheduler decides in memory and commits a whole batch here. The partial unique
indexes on live leases ((node, slot) and task) refuse any double booking, and the
task update is conditional on the status the scheduler saw, so a stale view or a
second orchestrator process can only cause a rollback and a retry, never a double lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select, tuple_, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from orchestrator.db.leases import START_LAPSED
from orchestrator.db.models import Job, Lease, Node, StatusHistory, Task
from orchestrator.db.nodes import node_spec
from orchestrator.db.statuses import set_job_status
from orchestrator.domain.lifecycle import (
    SCHEDULABLE_TASK_STATUSES,
    JobStatus,
    LeaseState,
    TaskStatus,
    task_transition,
)
from orchestrator.domain.types import NodeHealth, NodeSpec, TaskNeeds

SCHEDULABLE = sorted(s.value for s in SCHEDULABLE_TASK_STATUSES)


class PlacementConflict(Exception):
    """Another placement won a slot or a task first; reload and retry."""


@dataclass(frozen=True, slots=True)
class SlotView:
    """Nodes that accept work and the slots their live leases already hold."""

    nodes: list[NodeSpec]
    held: dict[str, set[int]]


QueuePlace = tuple[float, int]  # (latest start, task id): the queue's order


@dataclass(frozen=True, slots=True)
class WaitingTask:
    task_id: int
    job_id: str
    status: str
    needs: dict[str, Any]
    latest_start: float
    queued_at: float  # when it last became schedulable

    @property
    def place(self) -> QueuePlace:
        """Where it stands in the queue: a cursor to read on from."""
        return self.latest_start, self.task_id

    def deadline(self, needs: TaskNeeds) -> float:
        """Its job's deadline (`latest_start` is that less the task's expected duration)."""
        return self.latest_start + needs.expected_duration_s



@dataclass(frozen=True, slots=True)
class Reservation:
    task_id: int
    job_id: str
    node_id: str
    slot: int
    from_status: str


def load_slot_view(session: Session) -> SlotView:
    """Nodes that may be placed on: alive, not draining, and not silent since a reservation
    of theirs lapsed unstarted (a failed start: placed again once heard from)."""
    failed_start = select(Lease.id).where(
        Lease.node_id == Node.id, Lease.release_reason == START_LAPSED,
        Lease.released_at > func.coalesce(Node.last_heartbeat_at, -1.0)).exists()
    nodes = [
        node_spec(n)
        for n in session.scalars(
            select(Node).where(Node.health == NodeHealth.ALIVE.value, Node.draining.is_(False),
                               ~failed_start)
        )
    ]
    held: dict[str, set[int]] = {}
    for node_id, slot in session.execute(
        select(Lease.node_id, Lease.slot).where(Lease.released_at.is_(None))
    ):
        held.setdefault(node_id, set()).add(slot)
    return SlotView(nodes=nodes, held=held)


def waiting_tasks(session: Session, *, limit: int, after: QueuePlace | None = None,
                  lock: bool = True) -> list[WaitingTask]:
    """Schedulable tasks in the queue's order (least laxity first, `matching.latest_start`,
    then the oldest), from past `after` (a cursor, so tasks no node can take now do not block
    the queue behind them); on PostgreSQL rows another process is placing are skipped."""
    query = (
        select(Task.id, Task.job_id, Task.status, Task.needs, Task.latest_start,
               Task.updated_at)
        .where(Task.status.in_(SCHEDULABLE))
        .order_by(Task.latest_start, Task.id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(tuple_(Task.latest_start, Task.id) > tuple_(*after))
    if lock:
        query = query.with_for_update(skip_locked=True)
    return [WaitingTask(task_id, job_id, status, needs, queued, updated)
            for task_id, job_id, status, needs, queued, updated in session.execute(query)]


def changed_for(session: Session, *, node_id: str, since: float) -> bool:
    """Whether the placement's answer for this node may have changed at or after `since`: it
    registered (or re-registered), a lease of its was released (a slot came free), it was
    heard from after a failed start (`load_slot_view` takes it back), or a task became
    schedulable (new or requeued)."""
    node = session.get(Node, node_id)
    if node is None or node.registered_at >= since:
        return True
    last = session.execute(select(Lease.release_reason, Lease.released_at).where(
        Lease.node_id == node_id, Lease.released_at.is_not(None))
        .order_by(Lease.released_at.desc()).limit(1)).first()
    if last is not None and last.released_at is not None:
        reason, released_at = last.release_reason, last.released_at
        heard = node.last_heartbeat_at
        if released_at >= since or (reason == START_LAPSED and heard is not None
                                    and heard >= since and heard >= released_at):
            return True
    return session.scalars(select(Task.id).where(
        Task.status.in_(SCHEDULABLE), Task.updated_at >= since).limit(1)).first() is not None


def commit_reservations(
    session: Session, *, reservations: Sequence[Reservation], now: float, ttl_s: float
) -> None:
    """Write one batch of reservations or raise `PlacementConflict` (the caller rolls back)."""
    if not reservations:
        return
    ordered = sorted(reservations, key=lambda r: (r.node_id, r.slot))  # one lock order: no cycles
    ids = [r.task_id for r in ordered]
    try:
        result = session.execute(
            update(Task)
            .where(Task.id.in_(ids), Task.status.in_(SCHEDULABLE))
            .values(status=TaskStatus.RESERVED.value, attempts=Task.attempts + 1, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if getattr(result, "rowcount", -1) != len(ids):
            raise PlacementConflict("a task was taken by another placement")
        session.execute(
            update(Task).execution_options(synchronize_session=False),
            [{"id": r.task_id, "node_id": r.node_id} for r in ordered],
        )
        session.execute(
            insert(Lease),
            [
                {
                    "task_id": r.task_id,
                    "node_id": r.node_id,
                    "slot": r.slot,
                    "state": LeaseState.RESERVED.value,
                    "created_at": now,
                    "expires_at": now + ttl_s,
                }
                for r in ordered
            ],
        )
        history = []
        for r in ordered:
            change = task_transition(
                TaskStatus(r.from_status),
                TaskStatus.RESERVED,
                at=now,
                reason=f"reserved on {r.node_id} slot {r.slot}",
            )
            history.append(
                {
                    "entity": "task",
                    "entity_id": str(r.task_id),
                    "from_status": change.from_status,
                    "to_status": change.to_status,
                    "at": now,
                    "reason": change.reason,
                }
            )
        session.execute(insert(StatusHistory), history)
        _mark_jobs_scheduled(session, job_ids={r.job_id for r in ordered}, now=now)
        session.flush()
    except DBAPIError as exc:  # unique violation, deadlock, serialisation, busy
        raise PlacementConflict(str(exc.orig)) from exc


def _mark_jobs_scheduled(session: Session, *, job_ids: set[str], now: float) -> None:
    """A funded job becomes scheduled with its first placed task."""
    for job in session.scalars(select(Job).where(Job.id.in_(sorted(job_ids)),
                                                 Job.status == JobStatus.FUNDED.value)):
        set_job_status(session, job=job, target=JobStatus.SCHEDULED, now=now,
                       reason="first task placed")
