"""Settlement: a verified job's payouts queued in the outbox (exactly once), a stopped job's
verified work paid and the rest of its escrow refunded the same way, and the one move
settling -> settled, made only when the escrow on chain shows the job Settled.

`mark_settled` is the move's only owner. The outbox sender calls it when the chain proves a
settle landed (its mined receipt, or an escrow read showing Settled); the periodic escrow
sync calls it for every job still settling with the escrow it reads, which also catches a
settlement someone else sent, and flags jobs the chain closed some other way.

A reorg that removes a settlement sends the job back (`unsettle_reorged`, settled ->
settling); from then on a receipt is not enough: only a final event (the indexer's
`on_settled`, or the escrow sync over final events) settles it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from orchestrator.db import blobs as blob_db
from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db import outbox
from orchestrator.db import statuses as status_db
from orchestrator.db import verification as verification_db
from orchestrator.db.models import Job, Task
from orchestrator.domain.chain_actions import SettleJob
from orchestrator.domain.chain_events import ChainEvent
from orchestrator.domain.chain_views import EscrowedJob, EscrowStatus
from orchestrator.domain.ids import JobId, hex0x, unhex
from orchestrator.domain.lifecycle import (
    SETTLEABLE_VERIFICATION,
    JobStatus,
    TaskStatus,
    VerificationStatus,
)
from orchestrator.domain.merkle import MerkleTree
from orchestrator.telemetry.metrics import MeshMetrics

log = logging.getLogger("orchestrator")

REORGED = "settlement reorged out of the chain"

STOPPED = frozenset({JobStatus.FAILED.value, JobStatus.CANCELLED.value, JobStatus.EXPIRED.value})
"""Terminal job statuses whose escrow `queue_refund` settles."""


def queue_settlement(session: Session, *, job: Job, now: float) -> bool:
    """Verified: pay providers by tasks delivered, via the chain outbox, exactly once; the
    job moves completed -> settling. False when its settlement was already queued."""
    status_db.set_job_status(session, job=job, target=JobStatus.COMPLETED, now=now,
                        reason="verification passed")
    tasks = job_db.job_tasks(session, job_id=job.id)
    for task in tasks:
        status_db.set_task_status(session, task=task, target=TaskStatus.VERIFIED, now=now,
                             reason="job accepted")
    queued = _queue_payouts(session, job=job, tasks=len(tasks), paid=tasks, now=now,
                            merkle_root=job.merkle_root)
    status_db.set_job_status(session, job=job, target=JobStatus.SETTLING, now=now,
                        reason="settlement queued")
    return queued


def queue_refund(session: Session, *, job: Job, now: float) -> bool:
    """A stopped job (failed, cancelled, expired): its verified tasks are paid as a completed
    job pays each task, and the rest of the escrow goes back to the customer, by the one
    settle action (same idempotency key as `queue_settlement`, so exactly once whoever asks
    again). With nothing verified the settlement pays nobody, and the escrow refunds the
    whole amount at once (`JobEscrow.claimRefund`); otherwise after the dispute window.
    The job keeps its status. False when its settlement was already queued."""
    if job.status not in STOPPED:
        raise ValueError(f"job {job.id} is {job.status}: only a stopped job is refunded")
    paid = verified_tasks(session, job_id=job.id)
    return _queue_payouts(session, job=job, tasks=len(job_db.job_tasks(session, job_id=job.id)),
                          paid=paid, now=now,
                          merkle_root=job_merkle_root(session, job_id=job.id) if paid else None)


def verified_tasks(session: Session, *, job_id: str) -> list[Task]:
    """The job's tasks that may be paid for: done, and the latest commitment of their
    result passed verification, was not drawn for it, or an operator accepted it."""
    latest = verification_db.latest_commitments(session, job_id=job_id)
    verified = []
    for task in job_db.job_tasks(session, job_id=job_id):
        row = latest.get(task.id)
        if (task.status in (TaskStatus.DONE.value, TaskStatus.VERIFIED.value)
                and row is not None and row.result_sha256 == task.result_sha256
                and VerificationStatus(row.status) in SETTLEABLE_VERIFICATION):
            verified.append(task)
    return verified


def job_merkle_root(session: Session, *, job_id: str) -> str | None:
    """Root over every checkpoint and result hash of the job (sha256 digests as leaves)."""
    hashes = blob_db.job_artifact_hashes(session, job_id=job_id)
    if not hashes:
        return None
    return hex0x(MerkleTree.build([bytes.fromhex(h) for h in hashes]).root)


def _queue_payouts(session: Session, *, job: Job, tasks: int, paid: Sequence[Task], now: float,
                   merkle_root: str | None) -> bool:
    """The settle action paying each provider job.amount / `tasks` per task of `paid` it
    delivered (the rest is the customer's refund), queued once per job."""
    delivered: dict[str, int] = {}
    for task in paid:
        node = node_db.get_node(session, node_id=task.node_id) if task.node_id else None
        if node is not None:
            delivered[node.provider] = delivered.get(node.provider, 0) + 1
    providers = sorted(delivered)
    payouts = [job.amount * delivered[p] // tasks for p in providers]
    return outbox.queue_action(
        session, idempotency_key=f"settle:{job.id}", now=now,
        action=SettleJob(job_id=JobId(job.id).raw, providers=tuple(providers),
                         payouts=tuple(payouts),
                         merkle_root=None if merkle_root is None else unhex(merkle_root)))


def mark_settled(session: Session, *, job_id: str, escrow: EscrowStatus, now: float,
                 reason: str, final: bool = True) -> float | None:
    """settling -> settled when `escrow` (as the chain shows it) is Settled; returns the
    seconds since the settlement was queued, or None when nothing moved (the escrow does not
    show it settled, the job is not ours, or it already moved on). `final=False` (a receipt
    that a reorg could still undo) moves no job whose settlement a reorg already removed."""
    if escrow is not EscrowStatus.SETTLED:
        return None
    job = job_db.lock_job(session, job_id=job_id)
    if job is None or job.status != JobStatus.SETTLING.value:
        return None
    if not final and _reorged(session, job_id):
        return None
    lag = now - job.updated_at
    status_db.set_job_status(session, job=job, target=JobStatus.SETTLED, now=now, reason=reason)
    return lag


def unsettle_reorged(session: Session, *, job_ids: Sequence[str], now: float) -> list[str]:
    """settled -> settling for the jobs whose settlement a reorg took off the chain (it is
    sent again); returns those that moved. A disputed job is left alone: its dispute would
    have gone with the settlement, and the ruling events decide it."""
    moved = []
    for job_id in job_ids:
        job = job_db.lock_job(session, job_id=job_id)
        if job is None or job.status != JobStatus.SETTLED.value:
            continue
        status_db.set_job_status(session, job=job, target=JobStatus.SETTLING, now=now,
                            reason=REORGED)
        moved.append(job_id)
    if moved:
        log.warning("jobs %s: settlement reorged out; settling again", moved)
    return moved


def _reorged(session: Session, job_id: str) -> bool:
    return any(change.reason == REORGED
               for change in status_db.status_history(session, entity="job", entity_id=job_id))


def on_settled(session: Session, event: ChainEvent, now: float) -> None:
    """Indexer handler for a final `JobSettled` or `JobsSettled`: its jobs move to settled
    (whoever sent the settlement); jobs that are not ours, or moved on, are left alone."""
    job_ids = event.args["jobIds"] if event.name == "JobsSettled" else (event.args["jobId"],)
    for job_id in job_ids:
        lag = mark_settled(session, job_id=JobId.of(bytes(job_id)),
                           escrow=EscrowStatus.SETTLED, now=now,
                           reason=f"settlement final on chain (block {event.block_number})")
        if lag is not None:
            log.info("job 0x%s settled on chain %.1fs after it was queued", job_id.hex(), lag)


@dataclass(frozen=True, slots=True)
class SettlementSync:
    settled: list[tuple[str, float]]  # (job id, seconds from settlement queued to seen on chain)
    diverged: list[str]  # jobs the chain closed some other way (e.g. reclaimed)


def sync_settlements(session: Session, *, read_escrow: Callable[[bytes], EscrowedJob | None],
                     now: float) -> SettlementSync:
    """Passive sync of settling jobs against the escrow: confirm settlements the chain shows,
    and flag any job whose chain state disagrees with ours (execution/settlement divergence)."""
    settled: list[tuple[str, float]] = []
    diverged: list[str] = []
    for job in job_db.jobs_in_status(session, statuses=[JobStatus.SETTLING]):
        escrowed = read_escrow(JobId(job.id).raw)
        if escrowed is None or escrowed.status == EscrowStatus.FUNDED:
            continue  # the settlement transaction has not landed yet
        lag = mark_settled(session, job_id=job.id, escrow=escrowed.status, now=now,
                           reason="settlement confirmed on chain")
        if lag is not None:
            settled.append((job.id, lag))
        elif escrowed.status != EscrowStatus.SETTLED:
            diverged.append(job.id)
    return SettlementSync(settled=settled, diverged=diverged)


def sync_escrow(session: Session, *, read_escrow: Callable[[bytes], EscrowedJob | None],
                metrics: MeshMetrics, now: float) -> SettlementSync:
    """`sync_settlements` with its metrics and logs (the leader's periodic job)."""
    result = sync_settlements(session, read_escrow=read_escrow, now=now)
    for _, lag in result.settled:
        metrics.settlement_lag.observe(lag)
    metrics.divergence.inc(len(result.diverged))
    if result.diverged:
        log.error("chain state diverges from ours for jobs %s", result.diverged)
    return result
