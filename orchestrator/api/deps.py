"""Dependencies as `Annotated` aliases (FastAPI full-stack template style)."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Protocol

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.api.auth import SessionClaims, SignedRequest, check_token, verify_request
from orchestrator.api.errors import ApiError
from orchestrator.config import Settings
from orchestrator.db import crud
from orchestrator.domain.chain_views import EscrowedJob
from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.services.pls import PlsService
from orchestrator.services.verification import Verifier
from orchestrator.storage.blobs import BlobStore
from orchestrator.telemetry.heartbeats import HeartbeatBuffer
from orchestrator.telemetry.metrics import MeshMetrics


class EscrowReader(Protocol):
    def escrowed_job(self, job_id: bytes) -> EscrowedJob | None: ...


@dataclass
class AppContext:
    """Everything one app instance owns; lives on `app.state.ctx`."""

    settings: Settings
    factory: sessionmaker[Session]
    blobs: BlobStore
    metrics: MeshMetrics
    heartbeats: HeartbeatBuffer
    detector: PhiAccrualDetector
    session_secret: bytes
    escrow_reader: EscrowReader | None
    clock: Callable[[], float]  # wall time in service; tests may pass a virtual clock
    pls: PlsService  # the one reliability book, staking policy and PoPW state
    verifier: Verifier  # commitments, re-checks and their verdicts

    def now(self) -> float:
        return self.clock()


async def get_ctx(request: Request) -> AppContext:
    # async: FastAPI would run a plain def in the thread pool, a cost on every heartbeat
    ctx: AppContext = request.app.state.ctx
    return ctx


CtxDep = Annotated[AppContext, Depends(get_ctx)]


def get_db(ctx: CtxDep) -> Iterator[Session]:
    with ctx.factory() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_db)]


async def verify_signature(request: Request, ctx: AppContext) -> SignedRequest:
    """The wallet signature over this exact request (raises ApiError 401); nonce not burnt."""
    return verify_signed_body(request, ctx, await request.body())


def verify_signed_body(request: Request, ctx: AppContext, body: bytes) -> SignedRequest:
    """The wallet signature over this request's method, path and `body`; nonce not burnt."""
    return verify_request(
        request.headers, method=request.method, path=request.url.path, body=body,
        now=ctx.now(), chain_id=ctx.settings.chain_id,
        orchestrator_id=ctx.settings.orchestrator_id,
        max_age_s=ctx.settings.signature_max_age_s)


def burn_nonce(ctx: AppContext, signed: SignedRequest) -> bool:
    """Record the request's nonce; False when it was already used (a replay)."""
    with ctx.factory.begin() as session:
        return crud.claim_nonce(session, address=signed.address, nonce=str(signed.nonce),
                                expires_at=float(signed.expiry))


def accept_signed(ctx: AppContext, verify: Callable[[], SignedRequest]) -> SignedRequest:
    """Run `verify`, count a refusal by its code, and burn the nonce (a replay is refused)."""
    try:
        signed = verify()
    except ApiError as exc:
        ctx.metrics.auth_failures.labels(exc.code).inc()
        raise
    if not burn_nonce(ctx, signed):
        ctx.metrics.auth_failures.labels("nonce_replayed").inc()
        raise ApiError(401, "nonce_replayed", "this nonce was already used")
    return signed


async def signed_request(request: Request, ctx: CtxDep) -> SignedRequest:
    """A verified wallet signature over this exact request; its nonce is burnt at once."""
    body = await request.body()
    return accept_signed(ctx, lambda: verify_signed_body(request, ctx, body))


SignedDep = Annotated[SignedRequest, Depends(signed_request)]


async def node_token(request: Request, ctx: CtxDep) -> SessionClaims:
    """Session claims from `Authorization: Bearer <token>`; a path node id must match."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "token_missing", "send Authorization: Bearer <session token>")
    try:
        claims = check_token(ctx.session_secret, token, now=ctx.now())
    except ApiError as exc:
        ctx.metrics.auth_failures.labels(exc.code).inc()
        raise
    except Exception:
        raise ApiError(401, "token_malformed", "not a session token") from None
    path_node = request.path_params.get("node_id")
    if path_node is not None and path_node != claims.node_id:
        raise ApiError(403, "token_wrong_node", "the token is for another node")
    return claims


NodeDep = Annotated[SessionClaims, Depends(node_token)]


@dataclass(frozen=True, slots=True)
class Uploader:
    address: str
    node_id: str | None  # set for a node's session: its uploads time its uplink for PLS


async def blob_uploader(request: Request, ctx: CtxDep) -> Uploader:
    """Who may upload a blob: a node (session token) or a wallet (a customer's .blend). A
    wallet signs the method and path with an empty body: the path names the content's sha256,
    which the store checks, so the streamed bytes need not be read twice to be bound."""
    if request.headers.get("authorization"):
        claims = await node_token(request, ctx)
        return Uploader(claims.address, claims.node_id)
    signed = accept_signed(ctx, lambda: verify_signed_body(request, ctx, b""))
    return Uploader(signed.address, None)


UploaderDep = Annotated[Uploader, Depends(blob_uploader)]


async def admin(request: Request, ctx: CtxDep) -> None:
    expected = ctx.settings.admin_key
    if expected is None:
        raise ApiError(403, "admin_disabled", "no admin key is configured")
    given = request.headers.get("x-admin-key", "")
    if not hmac.compare_digest(given.encode(), expected.get_secret_value().encode()):
        raise ApiError(403, "admin_key_invalid", "wrong admin key")


AdminDep = Depends(admin)


def escrow_provider(ctx: CtxDep) -> Callable[[], EscrowReader]:
    """The chain SDK reader for this deployment, connected on first use (after the request
    is validated, so junk never reaches the chain); tests pass a reader bound to anvil."""

    def reader() -> EscrowReader:
        if ctx.escrow_reader is None:
            try:
                from orchestrator.chain.deployment import Deployment
                from orchestrator.chain.sdk import MeshChain

                ctx.escrow_reader = MeshChain.connect(ctx.settings.rpc_url,
                                                      Deployment.load(ctx.settings.data_dir))
            except Exception as exc:
                raise ApiError(503, "chain_unavailable",
                               f"cannot reach the escrow: {exc}") from None
        return ctx.escrow_reader

    return reader


EscrowDep = Annotated[Callable[[], EscrowReader], Depends(escrow_provider)]
