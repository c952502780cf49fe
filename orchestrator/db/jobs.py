"""Jobs and their tasks as the service keeps them, and the idempotency keys of submissions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    IdempotencyKey,
    Job,
    StatusHistory,
    Task,
)
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import (
    JobStatus,
    TaskStatus,
)
from orchestrator.domain.types import Priority, TaskNeeds


def needs_to_json(needs: TaskNeeds) -> dict[str, Any]:
    data = asdict(needs)
    for key in ("gpu_models", "regions", "providers", "excluded_providers"):
        if data[key] is not None:
            data[key] = sorted(data[key])
    data["priority"] = needs.priority.value
    return data


def needs_from_json(data: dict[str, Any]) -> TaskNeeds:
    return TaskNeeds(
        min_vram_gb=int(data.get("min_vram_gb", 0)),
        gpu_models=None if data.get("gpu_models") is None else frozenset(data["gpu_models"]),
        regions=None if data.get("regions") is None else frozenset(data["regions"]),
        providers=None if data.get("providers") is None else frozenset(data["providers"]),
        excluded_providers=frozenset(data.get("excluded_providers", ())),
        max_price_per_gpu_hour=data.get("max_price_per_gpu_hour"),
        priority=Priority(data.get("priority", Priority.NORMAL.value)),
        expected_duration_s=float(data.get("expected_duration_s", 60.0)),
        value=int(data.get("value", 0)),
        critical_path_s=float(data.get("critical_path_s", 0.0)),
    )


def create_job(session: Session, job: NewJob, *, now: float,
               status: JobStatus = JobStatus.SUBMITTED) -> Job:
    """Insert `job` and one pending task per payload; the history starts at `status`."""
    row = Job(id=job.job_id, customer=job.customer, status=status.value, spec=dict(job.spec),
              spec_hash=job.spec_hash, amount=job.amount, deadline=job.deadline,
              priority=job.needs.priority.value, created_at=now, updated_at=now)
    session.add(row)
    session.flush()
    session.add(StatusHistory(entity="job", entity_id=job.job_id, from_status=None,
                              to_status=status.value, at=now, reason="submitted"))
    needs_json = needs_to_json(job.needs)
    session.execute(insert(Task), [
        {"job_id": job.job_id, "index": index, "payload": dict(payload), "needs": needs_json,
         "latest_start": job.latest_start, "status": TaskStatus.PENDING.value, "attempts": 0,
         "progress": 0.0, "checkpoint_progress": 0.0, "created_at": now, "updated_at": now}
        for index, payload in enumerate(job.payloads)])
    return row


def get_job(session: Session, *, job_id: str) -> Job | None:
    return session.get(Job, job_id)


def lock_job(session: Session, *, job_id: str) -> Job | None:
    """The job, row-locked and re-read (another process may have just moved it)."""
    return session.get(Job, job_id, with_for_update=True, populate_existing=True)


def jobs_in_status(session: Session, *, statuses: Sequence[JobStatus],
                   deadline_before: float | None = None) -> list[Job]:
    """Jobs in any of `statuses` (past their deadline, when `deadline_before` is given)."""
    query = select(Job).where(Job.status.in_([s.value for s in statuses]))
    if deadline_before is not None:
        query = query.where(Job.deadline < deadline_before)
    return list(session.scalars(query))


def customer_jobs(session: Session, *, customer: str, limit: int) -> list[Job]:
    """The customer's newest `limit` jobs, newest first."""
    return list(session.scalars(select(Job).where(Job.customer == customer)
                                .order_by(Job.created_at.desc(), Job.id).limit(limit)))


def get_task(session: Session, *, task_id: int) -> Task | None:
    return session.get(Task, task_id)


def job_tasks(session: Session, *, job_id: str) -> list[Task]:
    return list(session.scalars(select(Task).where(Task.job_id == job_id).order_by(Task.index)))


def task_counts(session: Session, *, job_id: str) -> dict[str, int]:
    rows = session.execute(select(Task.status, func.count()).where(Task.job_id == job_id)
                           .group_by(Task.status))
    return {status: count for status, count in rows}


def find_idempotent_job(session: Session, *, principal: str, key: str) -> IdempotencyKey | None:
    return session.get(IdempotencyKey, (principal, key))


def save_idempotency_key(session: Session, *, principal: str, key: str, request_hash: str,
                         job_id: str, now: float) -> None:
    session.add(IdempotencyKey(principal=principal, key=key, request_hash=request_hash,
                               job_id=job_id, created_at=now))
