"""What an operator asks for (admin key): a sweep now, a job accepted by override, a spot
check's failure acted on, the chain outbox read. Each call is one transaction; it commits."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from orchestrator.db import blobs as blob_db
from orchestrator.db import jobs as job_db
from orchestrator.db import leases as lease_db
from orchestrator.db import outbox as outbox_store
from orchestrator.db.models import OutboxAction, Task
from orchestrator.domain.errors import DomainError, Invalid, Missing
from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.domain.lifecycle import OutboxStatus
from orchestrator.domain.reliability import TaskOutcome
from orchestrator.services import work
from orchestrator.services.jobs import JobView, job_named, view
from orchestrator.services.pls import PlsService
from orchestrator.services.verification import Verifier
from orchestrator.telemetry.metrics import MeshMetrics

audit = logging.getLogger("orchestrator.audit")


def sweep(session: Session, *, detector: PhiAccrualDetector, pls: PlsService,
          metrics: MeshMetrics, now: float) -> work.SweepResult:
    """The periodic failure/lease sweep, run now."""
    result = work.sweep(session, detector=detector, pls=pls, metrics=metrics, now=now)
    session.commit()
    return result


def accept(session: Session, *, job_id: str, verifier: Verifier, now: float) -> JobView:
    """The operator override: accept the job without waiting for its verification; its
    settlement is queued (exactly once). The audit log says what happened, after it happened:
    the override once committed, or its refusal (which changed nothing)."""
    job = job_named(session, job_id=job_id)
    try:
        overridden = verifier.accept_by_operator(session, job=job, operator="admin", now=now)
        session.commit()
    except DomainError as refusal:
        session.rollback()
        audit.warning("operator override refused: job %s not accepted (%s: %s)", job_id,
                      refusal.code, refusal)
        raise
    audit.warning("operator override: job %s accepted by admin (%d undecided results "
                  "overridden)", job_id, overridden)
    return view(session, job)


def verification_failed(session: Session, *, task_id: int, node_id: str, pls: PlsService,
                        now: float) -> Task:
    """A spot check found the task's result wrong: PLS slashes the node and demotes it. The
    node must be one that ran the task: it delivered a result of it, or it holds the task's
    live lease (`Invalid` otherwise: nothing is recorded against a node that never ran it)."""
    task = job_db.get_task(session, task_id=task_id)
    if task is None:
        raise Missing("task_not_found", f"no task {task_id}")
    lease = lease_db.live_lease_for_task(session, task_id=task_id)
    running = lease is not None and lease.node_id == node_id
    if not running and not blob_db.delivered_result(session, task_id=task_id, node_id=node_id):
        raise Invalid("node_not_on_task",
                      f"node {node_id} did not run task {task_id}: name the node that "
                      f"delivered its result or holds its lease")
    pls.ingest.task_outcome(session, node_id=node_id, task_id=task_id,
                            outcome=TaskOutcome.FAILED_VERIFICATION, now=now)
    session.commit()
    return task


def outbox(session: Session, *, status: OutboxStatus | None, limit: int) -> list[OutboxAction]:
    """Chain actions, newest first (a read: locks nothing)."""
    return outbox_store.recent_actions(session, status=status, limit=limit)
