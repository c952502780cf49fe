"""Operator endpoints (admin key): run a sweep now, accept a verified job, read the outbox."""

from __future__ import annotations

from fastapi import APIRouter

from orchestrator.api.deps import AdminDep, CtxDep, SessionDep
from orchestrator.api.errors import ApiError
from orchestrator.api.routes.jobs import job_out
from orchestrator.api.schemas import JobOut, OutboxOut, SweepOut
from orchestrator.db import crud, work

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[AdminDep])


@router.post("/sweep", response_model=SweepOut,
             summary="Run the failure/lease sweep now (it also runs periodically)")
def sweep(session: SessionDep, ctx: CtxDep) -> SweepOut:
    result = work.sweep(session, detector=ctx.detector, now=ctx.now())
    session.commit()
    ctx.metrics.node_failures.inc(len(result.dead_nodes))
    ctx.metrics.retries.labels("lapsed").inc(result.expired_leases)
    ctx.metrics.retries.labels("dead").inc(result.revoked)
    return SweepOut(expired_leases=result.expired_leases, dead_nodes=result.dead_nodes,
                    placed=0)


@router.post("/jobs/{job_id}/accept", response_model=JobOut,
             summary="Accept a verified job: queue its settlement in the chain outbox")
def accept(job_id: str, session: SessionDep, ctx: CtxDep) -> JobOut:
    job = crud.get_job(session, job_id=job_id.lower())
    if job is None:
        raise ApiError(404, "job_not_found", f"no job {job_id}")
    work.accept_job(session, job=job, now=ctx.now())
    session.commit()
    return job_out(session, job)


@router.get("/outbox", response_model=list[OutboxOut], summary="Chain actions not yet sent")
def outbox(session: SessionDep) -> list[OutboxOut]:
    return [OutboxOut(id=a.id, kind=a.kind, idempotency_key=a.idempotency_key, status=a.status,
                      payload=a.payload) for a in crud.pending_chain_actions(session)]
