"""Re-checks: a node pulls a window of another provider's result to re-render and sends what
it rendered; operators read the verification counts and a task's evidence."""

from __future__ import annotations

from fastapi import APIRouter, Response

from orchestrator.api.deps import AdminDep, CtxDep, NodeDep, NonceAfterValidation, SessionDep
from orchestrator.api.errors import ApiError, errors
from orchestrator.api.routes.nodes import owned_node
from orchestrator.api.schemas import (
    CheckLeaseOut,
    CheckOut,
    CheckResultIn,
    CommitmentOut,
    NodeIdPath,
    RowId,
    VerificationOut,
)
from orchestrator.domain.errors import Forbidden, Invalid, Missing, Refused
from orchestrator.services.verification import CheckResult, ChunkRef, env_of

router = APIRouter(tags=["verification"], route_class=NonceAfterValidation)


@router.post("/nodes/{node_id}/checks/lease", response_model=CheckLeaseOut,
             responses={204: {"description": "No re-check for this node right now"},
                        **errors(Missing, Forbidden, Refused)},
             summary="Pull a re-check: a window of another provider's result to re-render")
def lease_check(node_id: NodeIdPath, claims: NodeDep, session: SessionDep, ctx: CtxDep
                ) -> CheckLeaseOut | Response:
    node = owned_node(session, node_id=node_id, address=claims.address)
    check = ctx.verifier.lease_check(session, node=node, now=ctx.now())
    if check is None:
        session.commit()
        return Response(status_code=204)
    out = CheckLeaseOut(check_id=check.id, role=check.role, window=check.window,
                        expires_at=check.expires_at or 0.0, payload=check.recipe["payload"])
    session.commit()
    return out


@router.post("/checks/{check_id}/result", response_model=CheckOut,
             responses=errors(Missing, Forbidden, Refused, Invalid),
             summary="Send a re-check's render (chunk and frame blobs uploaded first)")
def check_result(check_id: RowId, body: CheckResultIn, claims: NodeDep, session: SessionDep,
                 ctx: CtxDep) -> CheckOut:
    check = ctx.verifier.submit_check(session, check_id=check_id, node_id=claims.node_id,
                                      result=CheckResult(
                                          chunks=tuple(ChunkRef(c.offset, c.length, c.sha256)
                                                       for c in body.chunks),
                                          frame_sha256=body.frame_sha256,
                                          result_sha256=body.result_sha256,
                                          env=env_of(body.render), render_s=body.render_s),
                                      now=ctx.now())
    out = CheckOut(check_id=check.id, status=check.status, comparison=check.comparison)
    session.commit()
    return out


@router.get("/admin/verification", response_model=VerificationOut, dependencies=[AdminDep],
            summary="Verification counts: results by verdict, checks, overturned rejections")
def counts(session: SessionDep, ctx: CtxDep) -> VerificationOut:
    found = ctx.verifier.counts(session)
    return VerificationOut(commitments=found.commitments, checks=found.checks,
                           overturned=found.overturned, check_render_s=found.check_render_s,
                           by_node=found.by_node)


@router.get("/admin/tasks/{task_id}/verification", response_model=list[CommitmentOut],
            responses=errors(Missing),
            dependencies=[AdminDep],
            summary="A task's commitments, checks and evidence (what a dispute reproduces)")
def task_verification(task_id: RowId, session: SessionDep, ctx: CtxDep) -> list[CommitmentOut]:
    found = ctx.verifier.task_record(session, task_id=task_id)
    if found is None:
        raise ApiError(404, "task_not_found", f"no task {task_id}")
    return [CommitmentOut(
        commitment_id=row.id, task_id=row.task_id, node_id=row.node_id, status=row.status,
        detail=row.detail, root=row.root, rate=row.rate, windows=row.windows,
        checks=[CheckOut(check_id=c.id, status=c.status, comparison=c.comparison)
                for c in checks],
        evidence=[{"digest": e.digest, "evidence": e.evidence} for e in evidence])
        for row, checks, evidence in found]
