"""What the operator dashboard shows (`/dashboard` polls `snapshot` every few seconds): the
nodes, the jobs and their frames, settlements, slashes, disputes on chain, contested results
(verification tie-breaks), and the service figures.

Public: what the chain shows anyway (providers, scores, tiers, stake, settlements, slashes)
and progress counts. Admin only: thumbnails of results, which are the customers' images.
Token amounts travel as decimal strings (wei overflow a JavaScript number).
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError
from sqlalchemy.orm import Session

from orchestrator.db import dashboard as store
from orchestrator.db import nodes as node_db
from orchestrator.db import verification as verification_db
from orchestrator.db.models import Job, Node, NodeSession, OutboxAction, Task
from orchestrator.domain.chain_actions import PayloadError, SettleJob, decode
from orchestrator.domain.errors import Invalid, Missing
from orchestrator.domain.lifecycle import JobStatus, OutboxStatus, TaskStatus, VerificationStatus
from orchestrator.domain.types import SlashReason, Tier
from orchestrator.services import jobs
from orchestrator.services.pls import PlsService
from orchestrator.services.pls_staking import SLASH_KEY
from orchestrator.services.pls_state import StakeUnavailable
from orchestrator.storage.blobs import BlobStore
from orchestrator.telemetry.metrics import MeshMetrics, ServiceFigures
from protocol.images import is_exr

REFRESH_S = 2.0  # the page polls this often: its data is never more than this (+ a request) old
RS_HORIZON_S = 3600.0  # the RS shown is the node's score for an hour-long task
RS_EPOCHS = 24  # sparkline points: the last committed epoch scores, then the live RS
LIMIT = 20  # rows per table
DAY_S = 86_400.0
THUMBNAIL_PX = 160
ACTIVE = {JobStatus.FUNDED, JobStatus.SCHEDULED, JobStatus.RUNNING}
FINISHED_TASKS = {TaskStatus.DONE.value, TaskStatus.VERIFIED.value}


@dataclass(frozen=True, slots=True)
class NodeRow:
    node_id: str
    provider: str
    gpu_model: str
    region: str
    health: str
    draining: bool
    tier: str
    rs: float | None  # live, for an hour-long task; None until the service knows the node
    rs_history: list[float]  # committed epoch scores, oldest first, then `rs`
    stake_bonded: str | None  # None: the chain could not be read
    stake_free: str | None
    uptime_1d: float | None  # share of the window online (since registration, if later)
    uptime_7d: float | None
    verification_passed: int
    verification_failed: int
    earned: str  # settled payouts to the node's provider (confirmed on chain)
    pending_earnings: str  # queued or sent settlements
    last_heartbeat_s: float | None  # seconds ago


@dataclass(frozen=True, slots=True)
class TileRow:
    task_id: int
    tile: int
    status: str
    progress: float
    node_id: str | None
    attempts: int
    has_result: bool
    thumbnail: str | None  # URL of the result's thumbnail (admin view only)


@dataclass(frozen=True, slots=True)
class FrameRow:
    frame: int
    progress: float
    tiles: list[TileRow]


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: str
    status: str
    customer: str
    amount: str
    created_at: float
    tasks: int
    tasks_done: int
    progress: float
    eta_s: float | None  # None: not running, or nothing to extrapolate from yet
    frames: list[FrameRow]
    reason: str | None  # why it stopped (failed, cancelled, expired)


@dataclass(frozen=True, slots=True)
class SettlementRow:
    job_id: str
    status: str  # the outbox row's
    tx_hash: str | None
    gas_used: int | None  # the mined transaction's (a batch's gas is shared by its jobs)
    providers: int
    paid: str
    updated_at: float


@dataclass(frozen=True, slots=True)
class SlashRow:
    """A slash the service decided. `slash_id` is the chain's slash id (the integer
    `GET /v1/slashes/{slash_id}/evidence` and `mesh dispute open --slash` take), as a decimal
    string, once the indexer matched it (None before, and for low-score slashes proven from an
    epoch root until they are); `decision_id` is the service's own id of the decision."""

    slash_id: str | None
    decision_id: str
    node_id: str
    provider: str
    reason: str
    amount: str
    decided_at: float
    detail: str
    chain_status: str | None  # the slash action's outbox status; None: proven by epoch root
    tx_hash: str | None
    chain_note: str | None  # a failed action's reason (the contract's decoded error)


@dataclass(frozen=True, slots=True)
class ContestedRow:
    """A result whose verification went to a tie-break or left evidence."""

    commitment_id: int
    job_id: str
    task_id: int
    node_id: str
    provider: str
    status: str
    detail: str
    evidence: str | None  # digest the slash carries on chain
    decided_at: float | None


@dataclass(frozen=True, slots=True)
class DisputeRow:
    """A dispute on chain (`mesh dispute open`), as its events told us."""

    dispute_id: int
    kind: str  # settlement | slash
    job_id: str | None
    slash_id: str | None  # the chain's slash id, as a decimal string
    opener: str
    respondent: str
    bond: str
    frozen_amount: str
    status: str
    opened_at: float
    ruling_deadline: float
    opened_tx: str
    ruled_tx: str | None
    outcome: str  # where the frozen money went


@dataclass(frozen=True, slots=True)
class Dashboard:
    generated_at: float
    refresh_s: float
    admin: bool
    service: ServiceFigures
    nodes: list[NodeRow]
    jobs: list[JobRow]
    settlements: list[SettlementRow]
    slashes: list[SlashRow]
    disputes: list[DisputeRow]
    contested: list[ContestedRow]


def snapshot(session: Session, *, pls: PlsService, metrics: MeshMetrics, now: float,
             admin: bool, thumbnail_url: str) -> Dashboard:
    """Everything the page shows, read in one pass; `thumbnail_url` has a `{sha256}` field."""
    return Dashboard(
        generated_at=now, refresh_s=REFRESH_S, admin=admin, service=metrics.figures(),
        nodes=_nodes(session, pls, now),
        jobs=[_job(job, tasks, now, thumbnail_url if admin else None,
                   jobs.stop_reason(session, job))
              for job, tasks in store.recent_jobs(session, limit=LIMIT)],
        settlements=[_settlement(row) for row in store.settle_actions(session, limit=LIMIT)],
        slashes=_slashes(session), disputes=_disputes(session), contested=_contested(session))


def _nodes(session: Session, pls: PlsService, now: float) -> list[NodeRow]:
    nodes = node_db.all_nodes(session)
    online: dict[str, list[NodeSession]] = defaultdict(list)
    for interval in store.sessions_since(session, since=now - 7 * DAY_S):
        online[interval.node_id].append(interval)
    history: dict[str, list[float]] = defaultdict(list)
    for leaf in store.score_history(session, epochs=RS_EPOCHS):
        history[leaf.node_id].append(leaf.score_bps / 10_000)
    verdicts = verification_db.counts(session).by_node
    earned, pending = _earnings(store.settle_actions(session, statuses=[
        OutboxStatus.PENDING, OutboxStatus.SENT, OutboxStatus.CONFIRMED]))
    stakes = {provider: _stake(pls, provider, now) for provider in {n.provider for n in nodes}}
    rows = []
    for node in nodes:
        components = pls.placement.components(node.id, now, RS_HORIZON_S)
        rs = None if components is None else round(components.calibrated, 4)
        bonded, free = stakes[node.provider]
        by_status = verdicts.get(node.id, {})
        rows.append(NodeRow(
            node_id=node.id, provider=node.provider, gpu_model=node.gpu_model,
            region=node.region, health=node.health, draining=node.draining,
            tier=Tier(node.tier).name.lower(), rs=rs,
            rs_history=history[node.id] + ([] if rs is None else [rs]),
            stake_bonded=bonded, stake_free=free,
            uptime_1d=_uptime(node, online[node.id], now, DAY_S),
            uptime_7d=_uptime(node, online[node.id], now, 7 * DAY_S),
            verification_passed=by_status.get(VerificationStatus.PASSED.value, 0),
            verification_failed=by_status.get(VerificationStatus.FAILED.value, 0),
            earned=str(earned.get(node.provider, 0)),
            pending_earnings=str(pending.get(node.provider, 0)),
            last_heartbeat_s=None if node.last_heartbeat_at is None
            else round(max(now - node.last_heartbeat_at, 0.0), 1)))
    return rows


def _stake(pls: PlsService, provider: str, now: float) -> tuple[str | None, str | None]:
    try:
        stake = pls.state.stake.stake(provider, now)
    except StakeUnavailable:
        return None, None
    return str(stake.bonded), str(stake.free)


def _uptime(node: Node, intervals: Iterable[NodeSession], now: float,
            window_s: float) -> float | None:
    """Share of the window (from registration, when that is later) the node was online."""
    start = max(now - window_s, node.registered_at)
    if now <= start:
        return None
    online = sum(max(0.0, min(s.ended_at if s.ended_at is not None else now, now)
                     - max(s.started_at, start)) for s in intervals)
    return round(min(online / (now - start), 1.0), 4)


def _settled(row: OutboxAction) -> SettleJob | None:
    try:
        action = decode(row.kind, row.payload)
    except PayloadError:  # the sender marks such a row failed; it pays nobody
        return None
    return action if isinstance(action, SettleJob) else None


def _earnings(rows: Sequence[OutboxAction]) -> tuple[dict[str, int], dict[str, int]]:
    earned: dict[str, int] = defaultdict(int)
    pending: dict[str, int] = defaultdict(int)
    for row in rows:
        action = _settled(row)
        if action is None:
            continue
        book = earned if row.status == OutboxStatus.CONFIRMED.value else pending
        for provider, payout in zip(action.providers, action.payouts, strict=True):
            book[provider] += payout
    return earned, pending


def _job(job: Job, tasks: Sequence[Task], now: float, thumbnail_url: str | None,
         reason: str | None) -> JobRow:
    frames: dict[int, list[TileRow]] = defaultdict(list)
    for task in tasks:
        payload: dict[str, Any] = task.payload
        done = task.status in FINISHED_TASKS
        frames[int(payload.get("frame", task.index))].append(TileRow(
            task_id=task.id, tile=int(payload.get("tile", 0)), status=task.status,
            progress=1.0 if done else round(task.progress, 4), node_id=task.node_id,
            attempts=task.attempts, has_result=task.result_sha256 is not None,
            thumbnail=None if thumbnail_url is None or task.result_sha256 is None
            or payload.get("kind") != "blender"
            else thumbnail_url.format(sha256=task.result_sha256)))
    rows = [FrameRow(frame=frame, progress=round(sum(t.progress for t in tiles) / len(tiles), 4),
                     tiles=sorted(tiles, key=lambda t: t.tile))
            for frame, tiles in sorted(frames.items())]
    progress = sum(t.progress for f in rows for t in f.tiles) / len(tasks) if tasks else 0.0
    return JobRow(job_id=job.id, status=job.status, customer=job.customer, amount=str(job.amount),
                  created_at=job.created_at, tasks=len(tasks),
                  tasks_done=sum(1 for t in tasks if t.status in FINISHED_TASKS),
                  progress=round(progress, 4), eta_s=_eta(job, progress, now), frames=rows,
                  reason=reason)


def _eta(job: Job, progress: float, now: float) -> float | None:
    """Time left at the job's pace so far (work done since it was submitted)."""
    if JobStatus(job.status) not in ACTIVE or progress <= 0:
        return None
    elapsed = max(now - job.created_at, 0.0)
    return round(elapsed * (1 - progress) / progress, 1)


def _settlement(row: OutboxAction) -> SettlementRow:
    action = _settled(row)
    return SettlementRow(
        job_id=row.idempotency_key.removeprefix("settle:"), status=row.status,
        tx_hash=row.tx_hash, gas_used=row.gas_used, providers=0 if action is None
        else len(action.providers), paid="0" if action is None else str(sum(action.payouts)),
        updated_at=row.updated_at)


def _slashes(session: Session) -> list[SlashRow]:
    records = store.recent_slashes(session, limit=LIMIT)
    actions = store.slash_actions(session, keys=[SLASH_KEY + r.slash_id for r in records])
    rows = []
    for record in records:
        action = actions.get(SLASH_KEY + record.slash_id)
        rows.append(SlashRow(
            slash_id=None if record.chain_slash_id is None else str(record.chain_slash_id),
            decision_id=record.slash_id, node_id=record.node_id, provider=record.provider,
            reason=SlashReason(record.reason).name.lower(), amount=str(record.amount),
            decided_at=record.decided_at, detail=record.detail,
            chain_status=None if action is None else action.status,
            tx_hash=None if action is None else action.tx_hash,
            chain_note=action.note if action is not None
            and action.status == OutboxStatus.FAILED else None))
    return rows


def _disputes(session: Session) -> list[DisputeRow]:
    return [DisputeRow(
        dispute_id=d.dispute_id, kind=d.kind, job_id=d.job_id,
        slash_id=None if d.slash_id is None else str(d.slash_id), opener=d.opener,
        respondent=d.respondent, bond=str(d.bond), frozen_amount=str(d.frozen_amount),
        status=d.status, opened_at=d.opened_at, ruling_deadline=d.ruling_deadline,
        opened_tx=d.opened_tx, ruled_tx=d.ruled_tx, outcome=d.outcome)
        for d in store.recent_chain_disputes(session, limit=LIMIT)]


def _contested(session: Session) -> list[ContestedRow]:
    commitments = store.contested_results(session, limit=LIMIT)
    evidence = store.evidence_digests(session, commitment_ids=[c.id for c in commitments])
    return [ContestedRow(commitment_id=c.id, job_id=c.job_id, task_id=c.task_id,
                       node_id=c.node_id, provider=c.provider, status=c.status,
                       detail=c.detail, evidence=evidence.get(c.id), decided_at=c.decided_at)
            for c in commitments]


def thumbnail(session: Session, *, blobs: BlobStore, sha256: str) -> Path:
    """A small PNG of a task's result frame (PNG or EXR), made once and kept beside the blobs."""
    if store.result_task(session, sha256=sha256) is None or not blobs.exists(sha256):
        raise Missing("result_not_found", f"no task result {sha256}")
    target = blobs.root.parent / "thumbnails" / f"{sha256}.png"
    if target.is_file():
        return target
    image = _frame_image(blobs.path_of(sha256))
    image.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".thumb-", suffix=".png")
    with os.fdopen(fd, "wb") as out:
        image.save(out, format="PNG")
    os.replace(temp, target)  # concurrent requests: each writes its own, one wins whole
    return target


def _frame_image(path: Path) -> Image.Image:
    if is_exr(path):
        from protocol.images import OutputInvalid, exr_pixels

        try:
            pixels = exr_pixels(path)
        except OutputInvalid as exc:
            raise Invalid("result_not_an_image", str(exc)) from None
        # scene-linear to sRGB-ish display values; alpha kept
        rgb = np.clip(pixels[..., :3], 0.0, 1.0) ** (1 / 2.2)
        alpha = np.clip(pixels[..., 3:4], 0.0, 1.0)
        return Image.fromarray((np.concatenate([rgb, alpha], axis=2) * 255).round()
                               .astype(np.uint8), "RGBA")
    try:
        with Image.open(path) as image:
            image.load()
            return image.convert("RGBA")
    except (UnidentifiedImageError, OSError) as exc:
        raise Invalid("result_not_an_image", f"the result is not a PNG or EXR image: {exc}"
                      ) from None
