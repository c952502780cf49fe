"""Node registration, login, heartbeats, drain, lease pulls, and the proof of progress a
node shows after a network cut."""

from __future__ import annotations

from fastapi import APIRouter, Response

from orchestrator.api.auth import SessionClaims, issue_token
from orchestrator.api.deps import CtxDep, NodeDep, SessionDep, SignedDep
from orchestrator.api.errors import ApiError
from orchestrator.api.schemas import (
    HeartbeatOut,
    LeaseOut,
    LoginOut,
    LoginRequest,
    NodeOut,
    NodeRegistration,
    ProgressShownIn,
    ProgressShownOut,
)
from orchestrator.db import crud
from orchestrator.db.models import Node
from orchestrator.domain.slashing import ProgressVerdict
from orchestrator.domain.types import NodeSpec
from orchestrator.services import work
from orchestrator.services.pls_continuity import ShownChunk

router = APIRouter(tags=["nodes"])


def node_out(node: Node) -> NodeOut:
    return NodeOut(node_id=node.id, provider=node.provider, slots=node.slots, health=node.health,
                   draining=node.draining)


def owned_node(session: SessionDep, *, node_id: str, address: str) -> Node:
    node = crud.get_node(session, node_id=node_id)
    if node is None:
        raise ApiError(404, "node_not_found", f"no node {node_id}")
    if node.provider != address:
        raise ApiError(403, "node_not_owned", "this node belongs to another provider")
    return node


@router.post("/nodes", response_model=NodeOut, summary="Register or update a node (signed)")
def register(body: NodeRegistration, signed: SignedDep, session: SessionDep,
             ctx: CtxDep) -> NodeOut:
    existing = crud.get_node(session, node_id=body.node_id)
    if existing is not None and existing.provider != signed.address:
        raise ApiError(403, "node_not_owned", "this node id belongs to another provider")
    node = crud.register_node(session, spec=NodeSpec(
        node_id=body.node_id, provider=signed.address, gpu_model=body.gpu_model,
        vram_gb=body.vram_gb, compute_capability=body.compute_capability, region=body.region,
        price_per_gpu_hour=body.price_per_gpu_hour, slots=body.slots), now=ctx.now())
    ctx.pls.node_registered(session, node=node, now=ctx.now())
    crud.commit_or_conflict(session)
    ctx.detector.heartbeat(node.id, ctx.now())
    return node_out(node)


@router.post("/auth/login", response_model=LoginOut,
             summary="Trade a signature for a short-lived session token (for heartbeats)")
def login(body: LoginRequest, signed: SignedDep, session: SessionDep, ctx: CtxDep) -> LoginOut:
    node = owned_node(session, node_id=body.node_id, address=signed.address)
    if body.session_key is not None:
        ctx.pls.session_bound(session, node=node, session_key=body.session_key)
        session.commit()
    expires_at = ctx.now() + ctx.settings.session_ttl_s
    token = issue_token(ctx.session_secret, SessionClaims(signed.address, body.node_id,
                                                          expires_at))
    return LoginOut(token=token, expires_at=expires_at)


@router.post("/nodes/{node_id}/heartbeat", response_model=HeartbeatOut,
             summary="Liveness ping; renews the node's leases (session token)")
async def heartbeat(node_id: str, claims: NodeDep, ctx: CtxDep) -> HeartbeatOut:
    ctx.heartbeats.record(claims.node_id, ctx.now())
    ctx.metrics.heartbeats.inc()
    return HeartbeatOut(ok=True)


@router.post("/nodes/{node_id}/drain", response_model=NodeOut,
             summary="Graceful drain: no new leases; running tasks checkpoint and move")
def drain(node_id: str, claims: NodeDep, session: SessionDep, ctx: CtxDep) -> NodeOut:
    node = owned_node(session, node_id=node_id, address=claims.address)
    released = work.drain_node(session, node=node, now=ctx.now())
    session.commit()
    ctx.detector.drain(node_id)
    ctx.metrics.retries.labels("drain").inc(released)
    return node_out(node)


PROGRESS_REFUSED = {
    ProgressVerdict.FORGED: (403, "progress_forged", "the proof's signature is malformed"),
    ProgressVerdict.WRONG_SESSION: (
        403, "progress_wrong_session", "not signed by the session key of the login that held "
        "the task: only the process that rendered through the cut can show it"),
    ProgressVerdict.NO_PROGRESS: (
        409, "progress_none", "no uploaded chunk of the task rendered after the DEAD verdict: "
        "upload the chunks first; an idle silence is a departure"),
}


@router.post("/nodes/{node_id}/progress", response_model=ProgressShownOut,
             summary="After a network cut: show the chunks this process rendered meanwhile "
             "(session token, signed with the login's session key)")
def show_progress(node_id: str, body: ProgressShownIn, claims: NodeDep, session: SessionDep,
                  ctx: CtxDep) -> ProgressShownOut:
    node = owned_node(session, node_id=node_id, address=claims.address)
    outcome = ctx.pls.show_progress(
        session, node=node, task_id=body.task_id,
        chunks=[ShownChunk(c.sha256, c.rendered_at, c.offset, c.length) for c in body.chunks],
        resumed_at=body.resumed_at, signature=bytes.fromhex(body.signature[2:]), now=ctx.now())
    session.commit()
    refused = PROGRESS_REFUSED.get(outcome.verdict)
    if refused is not None:
        raise ApiError(*refused)
    return ProgressShownOut(verdict=outcome.verdict.value, chunks_credited=outcome.credited)


@router.post("/nodes/{node_id}/lease", response_model=LeaseOut,
             responses={204: {"description": "No work for this node right now"}},
             summary="Pull the next task lease for this node")
def pull_lease(node_id: str, claims: NodeDep, session: SessionDep, ctx: CtxDep
               ) -> LeaseOut | Response:
    node = owned_node(session, node_id=node_id, address=claims.address)
    now = ctx.now()
    grant = work.pull_lease(session, node=node, pls=ctx.pls,
                            pls_placement=ctx.settings.pls_placement,
                            reservation_ttl_s=ctx.settings.reservation_ttl_s, now=now)
    if grant is None:
        session.commit()
        return Response(status_code=204)
    lease, task = grant.lease, grant.task
    out = LeaseOut(lease_id=lease.id, task_id=task.id, job_id=task.job_id, slot=lease.slot,
                   expires_at=lease.expires_at, payload=task.payload,
                   resume_from_sha256=task.checkpoint_sha256,
                   resume_progress=task.checkpoint_progress,
                   checkpoint_interval_s=grant.checkpoint_interval_s)
    created_at = task.created_at
    session.commit()
    if grant.fresh:
        ctx.metrics.placements.inc()
        ctx.metrics.time_to_assignment.observe(max(now - created_at, 0.0))
    return out
