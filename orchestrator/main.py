"""The orchestrator service: `uvicorn orchestrator.main:app` (or `mesh orchestrator serve`)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING

from fastapi import FastAPI
from sqlalchemy.orm import Session

from orchestrator.api.arrival import ArrivalTime
from orchestrator.api.deps import AppContext, EscrowReader
from orchestrator.api.errors import install_error_handlers
from orchestrator.api.limits import BodyLimit, PerKeyRate
from orchestrator.api.openapi import install_openapi
from orchestrator.api.routes import (
    admin,
    blobs,
    dashboard,
    disputes,
    docs,
    health,
    jobs,
    nodes,
    pls,
    tasks,
    verification,
)
from orchestrator.api.schemas import MAX_JOB_BYTES, MAX_RENDER_BYTES, MAX_SHOWN_PROGRESS_BYTES
from orchestrator.config import Settings, get_settings
from orchestrator.db import backup as restored
from orchestrator.db import nonces as nonce_db
from orchestrator.db import pls as pls_store
from orchestrator.db.session import make_engine, make_session_factory, upgrade_to_head
from orchestrator.domain.chain_events import ChainEvent
from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.domain.pls import LeaseHold
from orchestrator.domain.pls_engine import PlsConfig
from orchestrator.domain.slashing import SlashingConfig
from orchestrator.domain.verification import SamplingPolicy
from orchestrator.scheduling.periodic import LeaderRunner, PeriodicJob
from orchestrator.services import pls_chain, settlement, work
from orchestrator.services.blobs import UploadLimits, collect_expired
from orchestrator.services.chain_events import (
    LEASE_NAME as CHAIN_INDEX_LEASE,
)
from orchestrator.services.chain_events import (
    ChainIndexer,
    ChainUnavailable,
    EventDispatch,
    IndexedChainView,
    IndexedStake,
    IndexReader,
)
from orchestrator.services.disputes import DisputeChain, apply_event
from orchestrator.services.placement import PlacementPass
from orchestrator.services.pls import PlsService
from orchestrator.services.pls_state import StakeReader
from orchestrator.services.verification import Verifier
from orchestrator.storage.blobs import BlobStore
from orchestrator.telemetry.heartbeats import HeartbeatBuffer
from orchestrator.telemetry.logs import configure_logging
from orchestrator.telemetry.metrics import MeshMetrics

if TYPE_CHECKING:
    from orchestrator.chain.sdk import MeshChain

log = logging.getLogger("orchestrator")
API_PREFIX = "/v1"


def _periodic_jobs(ctx: AppContext) -> list[PeriodicJob]:
    def sweep(session: Session, now: float) -> None:
        work.sweep(session, detector=ctx.detector, pls=ctx.pls, metrics=ctx.metrics, now=now)

    def forget_nonces(session: Session, now: float) -> None:
        nonce_db.forget_expired_nonces(session, now=now)
        ctx.pls.handshake.prune_challenges(now)

    indexed = IndexedChainView()

    def escrow_sync(session: Session, now: float) -> None:
        # The escrows as the indexer's final events show them: no chain call per job.
        settlement.sync_escrow(session,
                               read_escrow=lambda job_id: indexed.escrowed_job(session, job_id),
                               metrics=ctx.metrics, now=now)

    indexer = _chain_indexer(ctx.settings, ctx.pls)
    from orchestrator.services.outbox.reorgs import UnindexedCheck, resend_after_reorg

    unindexed = UnindexedCheck()

    unavailable: list[str] = []  # the last reason the chain could not be indexed

    def chain_index(session: Session, now: float) -> None:
        try:
            report = indexer.run(session, now)
        except ChainUnavailable as exc:
            if unavailable != [str(exc)]:  # one line per new reason, not one per tick
                log.warning("chain events not indexed: %s", exc)
                unavailable[:] = [str(exc)]
            return
        unavailable.clear()
        if report.next_block > report.head and not report.failed \
                and restored.clear_restored(session):
            log.info("restored database reconciled with the chain up to block %d: "
                     "transactions may be sent again", report.head)
        ctx.metrics.chain_reorgs.inc(1 if report.reorg_depth else 0)
        ctx.metrics.chain_events_dropped.labels("provisional").inc(
            report.dropped - report.dropped_final)
        ctx.metrics.chain_events_dropped.labels("final").inc(report.dropped_final)
        ctx.metrics.chain_events_applied.inc(report.applied)
        if report.reorg_depth:
            resend_after_reorg(session, now=now)
        unindexed.run(session, now=now, final_block=report.final,
                      mined_at=indexer.reader().mined_at)
        pls_chain.sync_commitments(session, now=now)

    def upload_gc(session: Session, now: float) -> None:
        collect_expired(session, store=ctx.blobs, now=now)

    def pls_decide(session: Session, now: float) -> None:
        ctx.pls.staking.run_decide(session, now=now)

    def pls_epoch(session: Session, now: float) -> None:
        ctx.pls.staking.close_last_epoch(session, now=now)

    def pls_follow(session: Session, now: float) -> None:
        ctx.pls.replay.follow(session, now=now)

    def pls_prune(session: Session, now: float) -> None:
        ctx.pls.log.prune(session, now=now)

    def place(session: Session, now: float) -> None:
        ctx.placement.run()  # takes the `placement` lease itself: pulls run it too

    jobs = [PeriodicJob("sweep", ctx.settings.sweep_interval_s, sweep),
            PeriodicJob("placement", ctx.settings.placement_interval_s, place,
                        leader_only=False),
            PeriodicJob("nonce-gc", ctx.settings.nonce_gc_interval_s, forget_nonces),
            PeriodicJob("escrow-sync", 5.0, escrow_sync),
            PeriodicJob("upload-gc", ctx.settings.upload_gc_interval_s, upload_gc),
            PeriodicJob("pls-decide", ctx.settings.pls_decide_interval_s, pls_decide),
            PeriodicJob("pls-epoch", min(ctx.settings.pls_epoch_s / 4, 60.0), pls_epoch),
            PeriodicJob("pls-follow", ctx.settings.pls_follow_interval_s, pls_follow,
                        leader_only=False),
            PeriodicJob("pls-log-prune", ctx.settings.pls_log_prune_interval_s, pls_prune),
            PeriodicJob(CHAIN_INDEX_LEASE, ctx.settings.chain_index_interval_s, chain_index)]
    if ctx.settings.orchestrator_key is not None:  # no key: this process sends nothing
        from orchestrator.services.outbox.sender import LEASE_NAME, build_sender

        jobs.append(PeriodicJob(LEASE_NAME, ctx.settings.outbox_interval_s,
                                _after_reconcile(build_sender(ctx.settings, ctx.metrics))))
    return jobs


def _after_reconcile(send: Callable[[Session, float], object]
                     ) -> Callable[[Session, float], object]:
    """The outbox pass, skipped while a restore's marker stands: a restored database is older
    than the chain, so nothing is sent until the indexer has re-read every event since the
    backup (settlements that landed since move their jobs to settled first)."""
    def work(session: Session, now: float) -> object:
        if restored.reconcile_pending(session):
            return None
        return send(session, now)

    return work


def event_dispatch(*, chain: Callable[[], DisputeChain] | None = None,
                   pls: PlsService | None = None) -> EventDispatch:
    """Who reacts to which final chain event: one line per (contract, event, handler). The
    dispute handlers need the chain (slash records, arbiters) and PLS (a reversed slash
    restores the tier); a tier the chain moved is adopted by PLS."""
    dispatch = EventDispatch()
    dispatch.register("JobEscrow", "JobSettled", settlement.on_settled)
    dispatch.register("JobEscrow", "JobsSettled", settlement.on_settled)
    dispatch.register("StakeManager", "Slashed", pls_chain.on_slashed)
    dispatch.register("StakeManager", "SlashReleased", pls_chain.on_slash_released)
    dispatch.register("StakeManager", "EpochCommitted", pls_chain.on_epoch_committed)
    if pls is not None:
        dispatch.register("StakeManager", "TierChanged", partial(pls_chain.on_tier_changed,
                                                                 staking=pls.staking))
    if chain is not None and pls is not None:
        def ruling(session: Session, event: ChainEvent, now: float) -> None:
            apply_event(session, event, chain=chain(), pls=pls, now=now)

        for name in ("DisputeOpened", "DisputeRuled", "DisputeDefaulted"):
            dispatch.register("Disputes", name, ruling)
    return dispatch


def _chain_indexer(settings: Settings, pls: PlsService) -> ChainIndexer:
    """The event indexer over this deployment, connected on its first pass."""
    connected: list[IndexReader] = []
    chains: list[MeshChain] = []

    def reader() -> IndexReader:
        if not connected:
            from orchestrator.chain.deployment import Deployment
            from orchestrator.chain.indexer import ChainIndexReader
            from orchestrator.chain.sdk import MeshChain

            try:
                chain = MeshChain.connect(settings.rpc_url, Deployment.load(settings.data_dir))
            except Exception as exc:  # no deployment yet, or no node: wait for one
                raise ChainUnavailable(str(exc)) from None
            chains.append(chain)
            connected.append(ChainIndexReader(chain, finality_tag=settings.chain_finality_tag,
                                              max_chunk=settings.chain_index_max_chunk))
        return connected[0]

    def chain() -> MeshChain:  # connected by the pass that read the events it hands out
        reader()
        return chains[0]

    return ChainIndexer(reader, event_dispatch(chain=chain, pls=pls),
                        margin=settings.chain_reorg_margin)


def _open_collateral(factory: Callable[[], Session]) -> Callable[[str], int]:
    """What a provider's open assignments hold, read from the DB (the chain only holds the
    standing reservation that backs them)."""
    def read(provider: str) -> int:
        with factory() as session:
            return pls_store.open_collateral(session, provider=provider)

    return read


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


def _listing_stake(factory: Callable[[], Session], stake_reader: StakeReader | None,
                   listing_reader: StakeReader | None) -> Callable[[], StakeReader] | None:
    """The reader placement ranks by: the one given, else the indexed events (None: a test
    that gave only `stake_reader` ranks by it too)."""
    if listing_reader is not None:
        return lambda: listing_reader
    if stake_reader is not None:
        return None
    indexed = IndexedStake(factory)
    return lambda: indexed


def create_app(settings: Settings | None = None, *, escrow_reader: EscrowReader | None = None,
               clock: Callable[[], float] = time.time, stake_reader: StakeReader | None = None,
               listing_reader: StakeReader | None = None,
               pls_config: PlsConfig | None = None) -> FastAPI:
    """Build one app instance; everything it owns hangs off `app.state.ctx`. `stake_reader`
    (default: the chain SDK) answers the free-stake check a placement decides on;
    `listing_reader` the free stake candidates are ranked by (default: the indexed events,
    or `stake_reader` alone when only that one is given); `pls_config` overrides the PLS knobs
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
                                reservation_s=settings.pls_reservation_s,
                                lease_hold=LeaseHold(lone_grace_s=settings.pls_lone_grace_s),
                                slashing=SlashingConfig(
                                    reconnect_grace_s=settings.pls_reconnect_grace_s,
                                    outage_window_s=settings.pls_outage_window_s,
                                    decision_delay_s=settings.pls_decision_delay_s)),
        stake_reader=(lambda: stake_reader) if stake_reader is not None
        else _chain_stake(settings), metrics=metrics, open_collateral=_open_collateral(factory),
        listing_reader=_listing_stake(factory, stake_reader, listing_reader))
    blob_store = BlobStore(settings.data_dir / "blobs")
    verification_secret = (settings.verification_secret.get_secret_value().encode()
                           if settings.verification_secret
                           else hmac.new(secret, b"verification", hashlib.sha256).digest())
    ctx = AppContext(
        settings=settings, factory=factory, blobs=blob_store,
        metrics=metrics,
        heartbeats=HeartbeatBuffer(factory, lease_ttl_s=settings.lease_ttl_s,
                                   flush_every_s=settings.heartbeat_flush_s,
                                   on_flush=pls_service.ingest.on_heartbeats),
        detector=PhiAccrualDetector(), session_secret=secret, escrow_reader=escrow_reader,
        clock=clock, pls=pls_service,
        placement=PlacementPass(factory, gate=pls_service.placement if settings.pls_placement
                                else None, reservation_ttl_s=settings.reservation_ttl_s,
                                lead_ttl_s=3 * settings.placement_interval_s,
                                idle_gap_s=settings.placement_interval_s, metrics=metrics,
                                clock=clock),
        verifier=Verifier(blobs=blob_store, pls=pls_service, secret=verification_secret,
                          policy=SamplingPolicy.parse(settings.verification_policy),
                          windows=settings.verification_windows,
                          epoch_s=settings.pls_epoch_s),
        registrations=PerKeyRate(limit=settings.registrations_per_hour, window_s=3600.0),
        uploads=UploadLimits(max_blob_bytes=settings.max_blob_bytes,
                             ttl_s=settings.upload_ttl_s,
                             wallet_quota_bytes=settings.wallet_upload_quota_bytes,
                             capacity_bytes=settings.upload_capacity_bytes,
                             node_bytes_per_hour=settings.node_upload_bytes_per_hour,
                             node_grace_s=settings.node_upload_grace_s))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.json_logs:
            configure_logging()
        upgrade_to_head(engine)
        with factory() as session:
            ctx.pls.replay.rebuild(session, now=ctx.now())
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

    # /docs is served from local assets (routes/docs.py); ReDoc would come from a CDN
    app = FastAPI(title="DePIN Mesh orchestrator", version="0.1.0", lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    app.state.ctx = ctx
    install_error_handlers(app)
    for module in (nodes, pls, tasks, jobs, blobs, admin, verification, dashboard, disputes):
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(health.router)
    app.include_router(dashboard.pages)
    app.include_router(docs.router)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes,
                       stream_prefix=f"{API_PREFIX}/blobs/",
                       route_limits=[(f"{API_PREFIX}/jobs", MAX_JOB_BYTES),
                                     (f"{API_PREFIX}/nodes/[^/]+/popw/answer",
                                      settings.max_popw_answer_bytes),
                                     (f"{API_PREFIX}/nodes/[^/]+/progress",
                                      MAX_SHOWN_PROGRESS_BYTES),
                                     (f"{API_PREFIX}/tasks/[^/]+/complete", MAX_RENDER_BYTES),
                                     (f"{API_PREFIX}/checks/[^/]+/result", MAX_RENDER_BYTES)])
    app.add_middleware(ArrivalTime, clock=ctx.now)  # outermost: stamped before anything waits
    install_openapi(app)
    return app


def __getattr__(name: str) -> FastAPI:
    """`orchestrator.main:app` is built on first access, so importing this module (tests,
    the CLI) does not open a database."""
    if name == "app":
        application = create_app()
        globals()["app"] = application
        return application
    raise AttributeError(name)
