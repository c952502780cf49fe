"""The orchestrator service: `uvicorn orchestrator.main:app` (or `mesh orchestrator serve`)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.orm import Session

from orchestrator.api.deps import AppContext, EscrowReader, escrow_provider
from orchestrator.api.errors import install_error_handlers
from orchestrator.api.limits import BodyLimit
from orchestrator.api.routes import admin, blobs, health, jobs, nodes, pls, tasks, verification
from orchestrator.config import Settings, get_settings
from orchestrator.db import crud
from orchestrator.db.session import make_engine, make_session_factory, upgrade_to_head
from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.domain.pls_engine import PlsConfig
from orchestrator.domain.slashing import SlashingConfig
from orchestrator.domain.verification import SamplingPolicy
from orchestrator.scheduling.periodic import LeaderRunner, PeriodicJob
from orchestrator.services import settlement, work
from orchestrator.services.pls import PlsService
from orchestrator.services.pls_state import StakeReader
from orchestrator.services.verification import Verifier
from orchestrator.storage.blobs import BlobStore
from orchestrator.telemetry.heartbeats import HeartbeatBuffer
from orchestrator.telemetry.logs import configure_logging
from orchestrator.telemetry.metrics import MeshMetrics

log = logging.getLogger("orchestrator")
API_PREFIX = "/v1"


def _periodic_jobs(ctx: AppContext) -> list[PeriodicJob]:
    def sweep(session: Session, now: float) -> None:
        work.sweep(session, detector=ctx.detector, pls=ctx.pls, metrics=ctx.metrics, now=now)

    def forget_nonces(session: Session, now: float) -> None:
        crud.forget_expired_nonces(session, now=now)
        ctx.pls.prune_challenges(now)

    def escrow_sync(session: Session, now: float) -> None:
        reader = escrow_provider(ctx)  # connects on first use: only when a job is settling
        settlement.sync_escrow(session, read_escrow=lambda job_id: reader().escrowed_job(job_id),
                               metrics=ctx.metrics, now=now)

    def pls_decide(session: Session, now: float) -> None:
        ctx.pls.run_decide(session, now=now)

    def pls_epoch(session: Session, now: float) -> None:
        ctx.pls.close_last_epoch(session, now=now)

    def pls_follow(session: Session, now: float) -> None:
        ctx.pls.follow(session, now=now)

    def pls_prune(session: Session, now: float) -> None:
        ctx.pls.prune_log(session, now=now)

    jobs = [PeriodicJob("sweep", ctx.settings.sweep_interval_s, sweep),
            PeriodicJob("nonce-gc", 60.0, forget_nonces),
            PeriodicJob("escrow-sync", 5.0, escrow_sync),
            PeriodicJob("pls-decide", ctx.settings.pls_decide_interval_s, pls_decide),
            PeriodicJob("pls-epoch", min(ctx.settings.pls_epoch_s / 4, 60.0), pls_epoch),
            PeriodicJob("pls-follow", ctx.settings.pls_follow_interval_s, pls_follow,
                        leader_only=False),
            PeriodicJob("pls-log-prune", 30.0, pls_prune)]
    if ctx.settings.orchestrator_key is not None:  # no key: this process sends nothing
        from orchestrator.services.outbox import LEASE_NAME, build_sender

        jobs.append(PeriodicJob(LEASE_NAME, ctx.settings.outbox_interval_s,
                                build_sender(ctx.settings, ctx.metrics)))
    return jobs


def _chain_stake(settings: Settings) -> Callable[[], StakeReader]:
    """The SDK's stake reader for this deployment, connected on first use."""
    connected: list[StakeReader] = []

    def reader() -> StakeReader:
        if not connected:
            from orchestrator.chain.deployment import Deployment
            from orchestrator.chain.sdk import MeshChain

            connected.append(MeshChain.connect(settings.rpc_url,
                                               Deployment.load(settings.data_dir)))
        return connected[0]

    return reader


def create_app(settings: Settings | None = None, *, escrow_reader: EscrowReader | None = None,
               clock: Callable[[], float] = time.time, stake_reader: StakeReader | None = None,
               pls_config: PlsConfig | None = None) -> FastAPI:
    """Build one app instance; everything it owns hangs off `app.state.ctx`. `stake_reader`
    (default: the chain SDK) answers free-stake reads; `pls_config` overrides the PLS knobs
    taken from settings (tests shrink the PoPW kernel and the slashing windows)."""
    settings = settings or get_settings()
    engine = make_engine(settings.sqlalchemy_url)
    factory = make_session_factory(engine)
    secret = (settings.session_secret.get_secret_value().encode() if settings.session_secret
              else secrets.token_bytes(32))
    metrics = MeshMetrics()
    pls_service = PlsService(
        pls_config or PlsConfig(min_rs=settings.pls_min_rs, epoch_s=settings.pls_epoch_s,
                                stake_ttl_s=settings.pls_stake_ttl_s,
                                slashing=SlashingConfig(
                                    reconnect_grace_s=settings.pls_reconnect_grace_s,
                                    outage_window_s=settings.pls_outage_window_s,
                                    decision_delay_s=settings.pls_decision_delay_s)),
        stake_reader=(lambda: stake_reader) if stake_reader is not None
        else _chain_stake(settings), metrics=metrics)
    blob_store = BlobStore(settings.data_dir / "blobs")
    verification_secret = (settings.verification_secret.get_secret_value().encode()
                           if settings.verification_secret
                           else hmac.new(secret, b"verification", hashlib.sha256).digest())
    ctx = AppContext(
        settings=settings, factory=factory, blobs=blob_store,
        metrics=metrics,
        heartbeats=HeartbeatBuffer(factory, lease_ttl_s=settings.lease_ttl_s,
                                   flush_every_s=settings.heartbeat_flush_s,
                                   on_flush=pls_service.on_heartbeats),
        detector=PhiAccrualDetector(), session_secret=secret, escrow_reader=escrow_reader,
        clock=clock, pls=pls_service,
        verifier=Verifier(blobs=blob_store, pls=pls_service, secret=verification_secret,
                          policy=SamplingPolicy.parse(settings.verification_policy),
                          windows=settings.verification_windows,
                          epoch_s=settings.pls_epoch_s))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.json_logs:
            configure_logging()
        upgrade_to_head(engine)
        with factory() as session:
            ctx.pls.rebuild(session, now=ctx.now())
        ctx.heartbeats.start()
        scheduler = LeaderRunner(factory).start(_periodic_jobs(ctx)) \
            if settings.periodic_enabled else None
        log.info("orchestrator up (db=%s, chain=%d)", engine.url.render_as_string(),
                 settings.chain_id)  # render_as_string hides any password
        try:
            yield
        finally:
            if scheduler is not None:
                scheduler.shutdown(wait=False)
            await ctx.heartbeats.stop()
            engine.dispose()

    app = FastAPI(title="DePIN Mesh orchestrator", version="0.1.0", lifespan=lifespan)
    app.state.ctx = ctx
    install_error_handlers(app)
    for module in (nodes, pls, tasks, jobs, blobs, admin, verification):
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(health.router)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes,
                       stream_prefix=f"{API_PREFIX}/blobs/",
                       route_limits=[(f"{API_PREFIX}/nodes/[^/]+/popw/answer",
                                      settings.max_popw_answer_bytes)])
    return app


def __getattr__(name: str) -> FastAPI:
    """`orchestrator.main:app` is built on first access, so importing this module (tests,
    the CLI) does not open a database."""
    if name == "app":
        application = create_app()
        globals()["app"] = application
        return application
    raise AttributeError(name)
