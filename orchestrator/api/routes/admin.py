"""Operator endpoints (admin key): run a sweep now, accept a job by override, read the outbox."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from orchestrator.api.deps import AdminDep, CtxDep, NonceAfterValidation, SessionDep
from orchestrator.api.errors import errors
from orchestrator.api.routes.jobs import job_out
from orchestrator.api.schemas import (
    JobIdPath,
    JobOut,
    OutboxOut,
    RowId,
    SweepOut,
    TaskOut,
    VerificationFailedIn,
)
from orchestrator.domain.errors import Invalid, Missing, Refused
from orchestrator.domain.lifecycle import OutboxStatus
from orchestrator.services import admin

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[AdminDep],
                   route_class=NonceAfterValidation)


@router.post("/sweep", response_model=SweepOut,
             summary="Run the failure/lease sweep now (it also runs periodically)")
def sweep(session: SessionDep, ctx: CtxDep) -> SweepOut:
    result = admin.sweep(session, detector=ctx.detector, pls=ctx.pls, metrics=ctx.metrics,
                         now=ctx.now())
    return SweepOut(expired_leases=result.expired_leases, dead_nodes=result.dead_nodes,
                    held_nodes=result.held)


@router.post("/jobs/{job_id}/accept", response_model=JobOut,
             responses=errors(Missing, Refused),
             summary="Operator override (logged): accept a job without waiting for its "
                     "verification and queue its settlement (verified jobs settle on their own)")
def accept(job_id: JobIdPath, session: SessionDep, ctx: CtxDep) -> JobOut:
    return job_out(admin.accept(session, job_id=job_id, verifier=ctx.verifier, now=ctx.now()))


@router.post("/tasks/{task_id}/verification-failed", response_model=TaskOut,
             responses=errors(Missing, Invalid, Refused),
             summary="A spot check found the task's result wrong: slash its collateral, demote")
def verification_failed(task_id: RowId, body: VerificationFailedIn, session: SessionDep,
                        ctx: CtxDep) -> TaskOut:
    task = admin.verification_failed(session, task_id=task_id, node_id=body.node_id,
                                     pls=ctx.pls, now=ctx.now())
    return TaskOut(task_id=task.id, status=task.status, progress=task.progress)


@router.get("/outbox", response_model=list[OutboxOut],
            summary="Chain actions, newest first; filter by status (e.g. failed ones and why)")
def outbox(session: SessionDep, status: OutboxStatus | None = None,
           limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[OutboxOut]:
    return [OutboxOut(id=a.id, kind=a.kind, idempotency_key=a.idempotency_key, status=a.status,
                      payload=a.payload, attempts=a.attempts, tx_hash=a.tx_hash, note=a.note)
            for a in admin.outbox(session, status=status, limit=limit)]
