"""Operator endpoints (admin key): run a sweep now, accept a job by override, read the outbox."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from orchestrator.api.deps import AdminDep, CtxDep, SessionDep
from orchestrator.api.errors import ApiError
from orchestrator.api.routes.jobs import job_out
from orchestrator.api.schemas import JobOut, OutboxOut, SweepOut, TaskOut, VerificationFailedIn
from orchestrator.db import crud
from orchestrator.db import outbox as outbox_store
from orchestrator.db.outbox import OutboxStatus
from orchestrator.domain.reliability import TaskOutcome
from orchestrator.services import work

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[AdminDep])


@router.post("/sweep", response_model=SweepOut,
             summary="Run the failure/lease sweep now (it also runs periodically)")
def sweep(session: SessionDep, ctx: CtxDep) -> SweepOut:
    result = work.sweep(session, detector=ctx.detector, pls=ctx.pls, metrics=ctx.metrics,
                        now=ctx.now())
    session.commit()
    return SweepOut(expired_leases=result.expired_leases, dead_nodes=result.dead_nodes,
                    held_nodes=result.held)


@router.post("/jobs/{job_id}/accept", response_model=JobOut,
             summary="Operator override (logged): accept a job without waiting for its "
                     "verification and queue its settlement (verified jobs settle on their own)")
def accept(job_id: str, session: SessionDep, ctx: CtxDep) -> JobOut:
    job = crud.get_job(session, job_id=job_id.lower())
    if job is None:
        raise ApiError(404, "job_not_found", f"no job {job_id}")
    ctx.verifier.accept_by_operator(session, job=job, operator="admin", now=ctx.now())
    session.commit()
    return job_out(session, job)


@router.post("/tasks/{task_id}/verification-failed", response_model=TaskOut,
             summary="A spot check found the task's result wrong: slash its collateral, demote")
def verification_failed(task_id: int, body: VerificationFailedIn, session: SessionDep,
                        ctx: CtxDep) -> TaskOut:
    task = crud.get_task(session, task_id=task_id)
    if task is None:
        raise ApiError(404, "task_not_found", f"no task {task_id}")
    ctx.pls.task_outcome(session, node_id=body.node_id, task_id=task_id,
                         outcome=TaskOutcome.FAILED_VERIFICATION, now=ctx.now())
    session.commit()
    return TaskOut(task_id=task.id, status=task.status, progress=task.progress)


@router.get("/outbox", response_model=list[OutboxOut],
            summary="Chain actions, newest first; filter by status (e.g. failed ones and why)")
def outbox(session: SessionDep, status: OutboxStatus | None = None,
           limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[OutboxOut]:
    return [OutboxOut(id=a.id, kind=a.kind, idempotency_key=a.idempotency_key, status=a.status,
                      payload=a.payload, attempts=a.attempts, tx_hash=a.tx_hash, note=a.note)
            for a in outbox_store.recent_actions(session, status=status, limit=limit)]
