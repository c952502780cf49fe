"""Status changes and their history: every move goes through the domain transition table
and lands in `status_history` in the same transaction."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    Job,
    StatusHistory,
    Task,
)
from orchestrator.domain.lifecycle import (
    JobStatus,
    StatusChange,
    TaskStatus,
    job_transition,
    task_transition,
)


def record_change(session: Session, *, entity_id: str, change: StatusChange) -> None:
    session.add(StatusHistory(entity=change.kind, entity_id=entity_id,
                              from_status=change.from_status, to_status=change.to_status,
                              at=change.at, reason=change.reason))


def set_job_status(session: Session, *, job: Job, target: JobStatus, now: float,
                   reason: str) -> None:
    change = job_transition(JobStatus(job.status), target, at=now, reason=reason)
    job.status = target.value
    job.updated_at = now
    record_change(session, entity_id=job.id, change=change)


def set_task_status(session: Session, *, task: Task, target: TaskStatus, now: float,
                    reason: str) -> None:
    change = task_transition(TaskStatus(task.status), target, at=now, reason=reason)
    task.status = target.value
    task.updated_at = now
    record_change(session, entity_id=str(task.id), change=change)


def status_history(session: Session, *, entity: str, entity_id: str) -> list[StatusHistory]:
    return list(session.scalars(
        select(StatusHistory).where(StatusHistory.entity == entity,
                                    StatusHistory.entity_id == entity_id)
        .order_by(StatusHistory.id)))


def ready_since(session: Session, *, task: Task) -> float:
    """When the task last became ready to place: its latest move back into the queue
    (`retry`), else its creation (a new task is queued as it is created)."""
    requeued = session.scalar(
        select(StatusHistory.at).where(StatusHistory.entity == "task",
                                       StatusHistory.entity_id == str(task.id),
                                       StatusHistory.to_status == TaskStatus.RETRY.value)
        .order_by(StatusHistory.id.desc()).limit(1))
    return task.created_at if requeued is None else float(requeued)
