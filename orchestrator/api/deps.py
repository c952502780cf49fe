"""Dependencies as `Annotated` aliases (FastAPI full-stack template style)."""

from __future__ import annotations

import functools
import hmac
import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request
from fastapi.dependencies.utils import get_typed_signature
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.api.auth import SessionClaims, SignedRequest, check_token, verify_request
from orchestrator.api.errors import ApiError
from orchestrator.api.limits import PerKeyRate
from orchestrator.config import Settings
from orchestrator.db import nonces as nonce_db
from orchestrator.domain.chain_views import EscrowedJob
from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.services.blobs import UploadLimits
from orchestrator.services.disputes import DisputeChain
from orchestrator.services.placement import PlacementPass
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
    placement: PlacementPass  # the one placement path: pulls and the periodic job run it
    verifier: Verifier  # commitments, re-checks and their verdicts
    registrations: PerKeyRate  # node registrations per wallet (settings.registrations_per_hour)
    uploads: UploadLimits  # what a wallet, a node and everyone may keep stored unclaimed

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
        return nonce_db.claim_nonce(session, address=signed.address, nonce=str(signed.nonce),
                                expires_at=float(signed.expiry))


def replayed() -> ApiError:
    return ApiError(401, "nonce_replayed", "this nonce was already used")


def accept_signed(request: Request, ctx: AppContext, verify: Callable[[], SignedRequest],
                  on_replay: Callable[[], Exception] = replayed) -> SignedRequest:
    """Run `verify` (a refusal is counted by its code) and burn the nonce, a replay raising
    `on_replay()`. On a `NonceAfterValidation` route the burn waits until FastAPI has
    validated the path, query and body, so an invalid request changes nothing; elsewhere it
    happens at once."""
    try:
        signed = verify()
    except ApiError as exc:
        ctx.metrics.auth_failures.labels(exc.code).inc()
        raise

    def burn() -> None:
        if not burn_nonce(ctx, signed):
            ctx.metrics.auth_failures.labels("nonce_replayed").inc()
            raise on_replay()

    once_valid(request, burn)
    return signed


def once_valid(request: Request, step: Callable[[], None]) -> None:
    """Run `step` once the request is known valid: on a `NonceAfterValidation` route, after
    FastAPI validated it and after the steps queued before it (the nonce burns of the
    signatures it depends on), in order, a refusal stopping the rest; elsewhere at once."""
    if isinstance(request.scope.get("route"), NonceAfterValidation):
        pending: list[Callable[[], None]] = getattr(request.state, _PENDING_STEPS, [])
        setattr(request.state, _PENDING_STEPS, [*pending, step])
    else:
        step()


_PENDING_STEPS = "mesh_pending_steps"


class NonceAfterValidation(APIRoute):
    """Every route's class: its endpoint first runs the steps its dependencies queued with
    `once_valid` (the nonce burns of the signatures they verified, then what may only count a
    valid request), then runs. FastAPI solves dependencies before it validates parameters and the
    body, so a dependency that burnt at once would let a request refused as invalid use up
    its nonce (a state change from a refused request)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, _pending_steps_first(endpoint), **kwargs)


def _pending_steps_first(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    typed = get_typed_signature(endpoint)
    own = next((p.name for p in typed.parameters.values() if p.annotation is Request), None)
    name = own or "mesh_request_"

    def run_pending(kwargs: dict[str, Any]) -> None:
        request: Request = kwargs[name] if own else kwargs.pop(name)
        for step in getattr(request.state, _PENDING_STEPS, ()):
            step()

    if inspect.iscoroutinefunction(endpoint):
        @functools.wraps(endpoint)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            run_pending(kwargs)
            return await endpoint(*args, **kwargs)
        wrapper: Callable[..., Any] = run_async
    else:
        @functools.wraps(endpoint)
        def run(*args: Any, **kwargs: Any) -> Any:
            run_pending(kwargs)
            return endpoint(*args, **kwargs)
        wrapper = run
    if own is None:
        signature = inspect.signature(endpoint)
        extra = inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Request)
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*signature.parameters.values(), extra])
    return wrapper


async def signed_request(request: Request, ctx: CtxDep) -> SignedRequest:
    """A verified wallet signature over this exact request; its nonce is burnt once the
    request is valid."""
    body = await request.body()
    return accept_signed(request, ctx, lambda: verify_signed_body(request, ctx, body))


SignedDep = Annotated[SignedRequest, Depends(signed_request)]


async def registration_rate(request: Request, signed: SignedDep, ctx: CtxDep) -> None:
    """Refuse (429) a wallet's registration over `registrations_per_hour`. Only a request
    that is valid and whose nonce was just burnt is counted: a replayed, forged or malformed
    one (refused 401/422 before) spends nothing of the wallet's allowance."""

    def charge() -> None:
        wait = ctx.registrations.admit(signed.address, ctx.now())
        if wait is not None:
            raise ApiError(429, "rate_limited", f"too many node registrations from "
                           f"{signed.address}; retry in {math.ceil(wait)} s",
                           headers={"Retry-After": str(math.ceil(wait))})

    once_valid(request, charge)


RegistrationRate = Depends(registration_rate)


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
    signed = accept_signed(request, ctx, lambda: verify_signed_body(request, ctx, b""))
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


async def admin_view(request: Request, ctx: CtxDep) -> bool:
    """Whether a read may include the admin-only parts: no key sent is a public read; a wrong
    one is refused like any admin request."""
    if "x-admin-key" not in request.headers:
        return False
    await admin(request, ctx)
    return True


AdminViewDep = Annotated[bool, Depends(admin_view)]


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


def dispute_chain_provider(escrow: EscrowDep) -> Callable[[], DisputeChain]:
    """The same lazily connected chain reader, for the dispute reads (roles, slashes)."""

    def reader() -> DisputeChain:
        found = escrow()
        if not isinstance(found, DisputeChain):
            raise ApiError(503, "chain_unavailable", "this service's chain reader cannot read "
                                                     "disputes")
        return found

    return reader


DisputeChainDep = Annotated[Callable[[], DisputeChain], Depends(dispute_chain_provider)]
