"""Node registration, login, heartbeats, drain, lease pulls, and the proof of progress a
node shows after a network cut."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from eth_utils import to_checksum_address
from fastapi import APIRouter, Query, Response

from orchestrator.api.auth import SessionClaims, issue_token
from orchestrator.api.deps import (
    CtxDep,
    NodeDep,
    NonceAfterValidation,
    RegistrationRate,
    SessionDep,
    SignedDep,
)
from orchestrator.api.errors import ApiError, errors
from orchestrator.api.schemas import (
    HeartbeatOut,
    LeaseOut,
    LoginOut,
    LoginRequest,
    NodeIdPath,
    NodeListingOut,
    NodeOut,
    NodeRegistration,
    ProgressShownIn,
    ProgressShownOut,
)
from orchestrator.db.models import Node
from orchestrator.domain.errors import Forbidden, Missing, Refused, Unavailable, Unfunded
from orchestrator.domain.ids import unhex
from orchestrator.domain.slashing import ProgressVerdict
from orchestrator.domain.types import NodeSpec, Tier
from orchestrator.services import nodes
from orchestrator.services.nodes import owned_node as owned_node  # routes/verification.py
from orchestrator.services.pls_continuity import ShownChunk

router = APIRouter(tags=["nodes"], route_class=NonceAfterValidation)


def node_out(node: Node) -> NodeOut:
    return NodeOut(node_id=node.id, provider=node.provider, slots=node.slots, health=node.health,
                   draining=node.draining)


@router.get("/nodes", response_model=list[NodeListingOut],
            summary="Every registered node with its state, tier and RS (public)")
def list_nodes(session: SessionDep, ctx: CtxDep,
               provider: Annotated[str | None, Query(pattern=r"^0x[0-9a-fA-F]{40}$")] = None
               ) -> list[NodeListingOut]:
    return [NodeListingOut(node_id=n.spec.node_id, provider=n.spec.provider,
                           gpu_model=n.spec.gpu_model, vram_gb=n.spec.vram_gb,
                           region=n.spec.region, price_per_gpu_hour=n.spec.price_per_gpu_hour,
                           slots=n.spec.slots, tier=Tier(n.tier).name.lower(), health=n.health,
                           draining=n.draining, last_heartbeat_at=n.last_heartbeat_at, rs=n.rs)
            for n in nodes.listing(session, pls=ctx.pls, now=ctx.now(), provider=None
                                   if provider is None else to_checksum_address(provider))]


@router.post("/nodes", response_model=NodeOut, dependencies=[RegistrationRate],
             responses=errors(Forbidden, Unfunded, Unavailable),
             summary="Register or update a node (signed)")
def register(body: NodeRegistration, signed: SignedDep, session: SessionDep,
             ctx: CtxDep) -> NodeOut:
    return node_out(nodes.register(session, spec=NodeSpec(
        node_id=body.node_id, provider=signed.address, gpu_model=body.gpu_model,
        vram_gb=body.vram_gb, compute_capability=body.compute_capability, region=body.region,
        price_per_gpu_hour=body.price_per_gpu_hour, slots=body.slots), pls=ctx.pls,
        detector=ctx.detector, stake_per_node=ctx.settings.stake_per_new_node,
        now=ctx.now()))


@router.post("/auth/login", response_model=LoginOut,
             responses=errors(Missing, Forbidden),
             summary="Trade a signature for a short-lived session token (for heartbeats); "
             "a new session key (a restarted agent) takes back the node's started tasks")
def login(body: LoginRequest, signed: SignedDep, session: SessionDep, ctx: CtxDep) -> LoginOut:
    now = ctx.now()
    nodes.login(session, node_id=body.node_id, address=signed.address,
                session_key=body.session_key, pls=ctx.pls,
                reservation_ttl_s=ctx.settings.reservation_ttl_s, metrics=ctx.metrics, now=now)
    expires_at = now + ctx.settings.session_ttl_s
    token = issue_token(ctx.session_secret, SessionClaims(signed.address, body.node_id,
                                                          expires_at))
    return LoginOut(token=token, expires_at=expires_at)


@router.post("/nodes/{node_id}/heartbeat", response_model=HeartbeatOut,
             summary="Liveness ping; renews the node's leases (session token)")
async def heartbeat(node_id: NodeIdPath, claims: NodeDep, ctx: CtxDep) -> HeartbeatOut:
    ctx.heartbeats.record(claims.node_id, ctx.now())
    ctx.metrics.heartbeats.inc()
    return HeartbeatOut(ok=True)


@router.post("/nodes/{node_id}/drain", response_model=NodeOut,
             responses=errors(Missing, Forbidden, Refused),
             summary="Graceful drain: no new leases; running tasks checkpoint and move")
def drain(node_id: NodeIdPath, claims: NodeDep, session: SessionDep, ctx: CtxDep) -> NodeOut:
    return node_out(nodes.drain(session, node_id=node_id, address=claims.address,
                                detector=ctx.detector, metrics=ctx.metrics, now=ctx.now()))


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
             responses=errors(Missing, Forbidden, Refused),
             summary="After a network cut: show the chunks this process rendered meanwhile "
             "(session token, signed with the login's session key)")
def show_progress(node_id: NodeIdPath, body: ProgressShownIn, claims: NodeDep, session: SessionDep,
                  ctx: CtxDep) -> ProgressShownOut:
    outcome = nodes.show_progress(
        session, node_id=node_id, address=claims.address, pls=ctx.pls, task_id=body.task_id,
        chunks=[ShownChunk(c.sha256, c.rendered_at, c.offset, c.length) for c in body.chunks],
        resumed_at=body.resumed_at, signature=unhex(body.signature), now=ctx.now())
    refused = PROGRESS_REFUSED.get(outcome.verdict)
    if refused is not None:
        raise ApiError(*refused)
    return ProgressShownOut(verdict=outcome.verdict.value, chunks_credited=outcome.credited)


@router.post("/nodes/{node_id}/lease", response_model=LeaseOut,
             responses={204: {"description": "No work for this node right now"},
                        **errors(Missing, Forbidden, Refused)},
             summary="Pull the next task lease for this node")
def pull_lease(node_id: NodeIdPath, claims: NodeDep, session: SessionDep, ctx: CtxDep
               ) -> LeaseOut | Response:
    pulled = nodes.pull_lease(session, node_id=node_id, address=claims.address, pls=ctx.pls,
                              placement=ctx.placement, clock=ctx.now)
    if pulled is None:
        return Response(status_code=204)
    return LeaseOut(**asdict(pulled))
