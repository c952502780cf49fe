"""What an operator asks for (admin key): a sweep now, a job accepted by override, a spot
check's failure acted on, the chain outbox read. Each call is one transaction; it commits."""

from __future__ import annotations

from sqlalchemy.orm import Session

from orchestrator.db import jobs as job_db
from orchestrator.db import outbox as outbox_store
from orchestrator.db.models import OutboxAction, Task
from orchestrator.domain.errors import Missing
from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.domain.lifecycle import OutboxStatus
from orchestrator.domain.reliability import TaskOutcome
from orchestrator.services import work
from orchestrator.services.jobs import JobView, job_named, view
from orchestrator.services.pls import PlsService
from orchestrator.services.verification import Verifier
from orchestrator.telemetry.metrics import MeshMetrics


def sweep(session: Session, *, detector: PhiAccrualDetector, pls: PlsService,
          metrics: MeshMetrics, now: float) -> work.SweepResult:
    """The periodic failure/lease sweep, run now."""
    result = work.sweep(session, detector=detector, pls=pls, metrics=metrics, now=now)
    session.commit()
    return result


def accept(session: Session, *, job_id: str, verifier: Verifier, now: float) -> JobView:
    """The operator override (logged): accept the job without waiting for its verification;
    its settlement is queued (exactly once)."""
    job = job_named(session, job_id=job_id)
    verifier.accept_by_operator(session, job=job, operator="admin", now=now)
    session.commit()
    return view(session, job)


def verification_failed(session: Session, *, task_id: int, node_id: str, pls: PlsService,
                        now: float) -> Task:
    """A spot check found the task's result wrong: PLS slashes the node and demotes it."""
    task = job_db.get_task(session, task_id=task_id)
    if task is None:
        raise Missing("task_not_found", f"no task {task_id}")
    pls.ingest.task_outcome(session, node_id=node_id, task_id=task_id,
                            outcome=TaskOutcome.FAILED_VERIFICATION, now=now)
    session.commit()
    return task


def outbox(session: Session, *, status: OutboxStatus | None, limit: int) -> list[OutboxAction]:
    """Chain actions, newest first (a read: locks nothing)."""
    return outbox_store.recent_actions(session, status=status, limit=limit)
