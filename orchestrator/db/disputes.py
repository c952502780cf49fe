"""Queries of disputes as followed from the chain, and of what a dispute's evidence bundle
gathers: a job's checkpoints and results, its settlement transaction, the score leaves of its
providers, and the slash records a ruling may undo."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.db import pls
from orchestrator.db.models import (
    Checkpoint,
    DisputeRow,
    Node,
    OutboxAction,
    ScoreEpoch,
    ScoreLeaf,
    SlashRecord,
    Task,
    VerificationEvidence,
)
from orchestrator.domain.lifecycle import DisputeState, dispute_transition


def get_dispute(session: Session, *, dispute_id: int) -> DisputeRow | None:
    """The dispute, row-locked and re-read: two handlers of one event must not both apply it."""
    return session.get(DisputeRow, dispute_id, with_for_update=True, populate_existing=True)


def add_dispute(session: Session, **fields: Any) -> DisputeRow:
    row = DisputeRow(status=DisputeState.OPEN.value, **fields)
    session.add(row)
    session.flush()
    return row


def set_dispute_status(session: Session, *, row: DisputeRow, target: DisputeState,
                       **values: Any) -> None:
    dispute_transition(DisputeState(row.status), target)
    row.status = target.value
    for name, value in values.items():
        setattr(row, name, value)


def list_disputes(session: Session, *, statuses: Sequence[DisputeState] | None = None,
                  party: str | None = None) -> list[DisputeRow]:
    """Disputes by id, optionally only in `statuses` and only where `party` opened or answers."""
    query = select(DisputeRow).order_by(DisputeRow.dispute_id)
    if statuses is not None:
        query = query.where(DisputeRow.status.in_([s.value for s in statuses]))
    if party is not None:
        query = query.where((DisputeRow.opener == party) | (DisputeRow.respondent == party))
    return list(session.scalars(query))


def disputes_of_job(session: Session, *, job_id: str) -> list[DisputeRow]:
    return list(session.scalars(select(DisputeRow).where(DisputeRow.job_id == job_id)
                                .order_by(DisputeRow.dispute_id)))


def disputes_of_slash(session: Session, *, slash_id: int) -> list[DisputeRow]:
    return list(session.scalars(select(DisputeRow).where(DisputeRow.slash_id == slash_id)
                                .order_by(DisputeRow.dispute_id)))


def job_checkpoints(session: Session, *, job_id: str) -> list[tuple[Checkpoint, Task]]:
    """Every checkpoint and result of the job's tasks, in task and upload order."""
    return [(checkpoint, task) for checkpoint, task in session.execute(
        select(Checkpoint, Task).join(Task, Task.id == Checkpoint.task_id)
        .where(Task.job_id == job_id).order_by(Task.index, Checkpoint.id))]


def providers_of_nodes(session: Session, *, node_ids: Sequence[str]) -> dict[str, str]:
    return {node.id: node.provider
            for node in session.scalars(select(Node).where(Node.id.in_(node_ids)))}


def nodes_of_provider(session: Session, *, provider: str) -> list[Node]:
    return list(session.scalars(select(Node).where(Node.provider == provider)
                                .order_by(Node.id)))


def sent_tx(session: Session, *, idempotency_key: str) -> str | None:
    """The transaction hash the outbox sent (or last signed) for this action."""
    return session.scalars(select(OutboxAction.tx_hash).where(
        OutboxAction.idempotency_key == idempotency_key)).first()


def score_leaves(session: Session, *, provider: str, closed_from: float, closed_to: float
                 ) -> list[tuple[ScoreEpoch, ScoreLeaf]]:
    """The provider's committed leaves of epochs closed in [closed_from, closed_to]."""
    return [(epoch, leaf) for epoch, leaf in session.execute(
        select(ScoreEpoch, ScoreLeaf).join(ScoreLeaf, ScoreLeaf.epoch == ScoreEpoch.epoch)
        .where(ScoreLeaf.provider == provider, ScoreEpoch.closed_at >= closed_from,
               ScoreEpoch.closed_at <= closed_to).order_by(ScoreEpoch.epoch))]


def slash_records(session: Session, *, slash_id: int, provider: str, reason: int,
                  evidence: str) -> list[SlashRecord]:
    """Our slash decisions that the on-chain slash `slash_id` (of `provider`, for `reason`,
    with `evidence`) carried out: the one its final `Slashed` event was matched to
    (`pls_chain.on_slashed`), else, before that event is indexed, the candidates it would be
    matched among (`pls.unmatched_slashes`)."""
    matched = pls.slash_on_chain(session, chain_slash_id=slash_id)
    if matched is not None:
        return [matched]
    return pls.unmatched_slashes(session, provider=provider, reason=reason, evidence=evidence)


def get_slash_record(session: Session, *, slash_id: str) -> SlashRecord | None:
    return session.get(SlashRecord, slash_id)


def verification_evidence(session: Session, *, digest: str) -> VerificationEvidence | None:
    """The stored evidence of a failed verification, by the digest its slash carries."""
    return session.get(VerificationEvidence, digest)
