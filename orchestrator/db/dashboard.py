"""Reads for the operator dashboard (`services.dashboard`): bounded, newest first, no locks."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    DisputeRow,
    Job,
    NodeSession,
    OutboxAction,
    ScoreLeaf,
    SlashRecord,
    Task,
    VerificationCommitment,
    VerificationEvidence,
)
from orchestrator.domain.lifecycle import OutboxStatus, VerificationStatus


def sessions_since(session: Session, *, since: float) -> list[NodeSession]:
    """Online intervals still open or ended after `since` (what uptime over a window needs)."""
    return list(session.scalars(select(NodeSession).where(
        or_(NodeSession.ended_at.is_(None), NodeSession.ended_at >= since))))


def score_history(session: Session, *, epochs: int) -> list[ScoreLeaf]:
    """Committed epoch scores of the last `epochs` epochs that have any, oldest first."""
    recent = select(ScoreLeaf.epoch).distinct().order_by(ScoreLeaf.epoch.desc()).limit(epochs)
    return list(session.scalars(select(ScoreLeaf).where(ScoreLeaf.epoch.in_(recent))
                                .order_by(ScoreLeaf.epoch)))


def settle_actions(session: Session, *, statuses: Sequence[OutboxStatus] | None = None,
                   limit: int | None = None) -> list[OutboxAction]:
    """Settle rows of the outbox, newest first."""
    query = select(OutboxAction).where(OutboxAction.kind == "settle").order_by(
        OutboxAction.id.desc()).limit(limit)
    if statuses is not None:
        query = query.where(OutboxAction.status.in_([s.value for s in statuses]))
    return list(session.scalars(query))


def slash_actions(session: Session, *, keys: Sequence[str]) -> dict[str, OutboxAction]:
    """The outbox rows of these slash idempotency keys, by key."""
    if not keys:
        return {}
    return {row.idempotency_key: row for row in session.scalars(
        select(OutboxAction).where(OutboxAction.idempotency_key.in_(list(keys))))}


def recent_slashes(session: Session, *, limit: int) -> list[SlashRecord]:
    return list(session.scalars(select(SlashRecord).order_by(
        SlashRecord.decided_at.desc()).limit(limit)))


def contested_results(session: Session, *, limit: int) -> list[VerificationCommitment]:
    """Results disputed now, or that were (evidence was kept for them), newest first."""
    evidenced = select(VerificationEvidence.commitment_id)
    return list(session.scalars(select(VerificationCommitment).where(or_(
        VerificationCommitment.status == VerificationStatus.DISPUTED.value,
        VerificationCommitment.id.in_(evidenced))).order_by(
        VerificationCommitment.id.desc()).limit(limit)))


def recent_chain_disputes(session: Session, *, limit: int) -> list[DisputeRow]:
    """On-chain disputes as their events told us, newest first."""
    return list(session.scalars(select(DisputeRow).order_by(DisputeRow.dispute_id.desc())
                                .limit(limit)))


def evidence_digests(session: Session, *, commitment_ids: Sequence[int]) -> dict[int, str]:
    if not commitment_ids:
        return {}
    return {row.commitment_id: row.digest for row in session.scalars(
        select(VerificationEvidence).where(
            VerificationEvidence.commitment_id.in_(list(commitment_ids))))}


def recent_jobs(session: Session, *, limit: int) -> list[tuple[Job, list[Task]]]:
    """The newest jobs and their tasks in index order."""
    jobs = list(session.scalars(select(Job).order_by(Job.created_at.desc(), Job.id)
                                .limit(limit)))
    tasks: dict[str, list[Task]] = {job.id: [] for job in jobs}
    if jobs:
        for task in session.scalars(select(Task).where(Task.job_id.in_(list(tasks)))
                                    .order_by(Task.job_id, Task.index)):
            tasks[task.job_id].append(task)
    return [(job, tasks[job.id]) for job in jobs]


def result_task(session: Session, *, sha256: str) -> Task | None:
    """A task whose accepted result is this blob (thumbnails are made of results only)."""
    return session.scalars(select(Task).where(Task.result_sha256 == sha256).limit(1)).first()
