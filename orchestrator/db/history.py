"""Whole-history reads for the history checker (`mesh.bench.history_check`): every
job, task, lease and slash, as plain rows, in one pass each; and the leader leases and outbox
as they stand (`mesh.bench.scaleout` samples them while replicas run)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orchestrator.db.models import Job, LeaderLock, Lease, Node, OutboxAction, SlashRecord, Task


def jobs(session: Session) -> list[Job]:
    return list(session.scalars(select(Job).order_by(Job.id)))


def tasks(session: Session) -> list[Task]:
    return list(session.scalars(select(Task).order_by(Task.job_id, Task.index)))


def leases(session: Session) -> list[Lease]:
    return list(session.scalars(select(Lease).order_by(Lease.node_id, Lease.slot,
                                                       Lease.created_at)))


def slashes(session: Session) -> list[SlashRecord]:
    return list(session.scalars(select(SlashRecord)))


def node_providers(session: Session) -> dict[str, str]:
    """node id -> its provider's address."""
    return {node.id: node.provider for node in session.scalars(select(Node))}


def leader_locks(session: Session) -> list[tuple[str, str, float]]:
    """(periodic job, holder, expires at) of every leader lease."""
    return [(lock.name, lock.holder, lock.expires_at)
            for lock in session.scalars(select(LeaderLock))]


def outbox_statuses(session: Session) -> dict[str, dict[str, int]]:
    """Outbox rows per action kind and status (pending, sent, confirmed, failed)."""
    counts: dict[str, dict[str, int]] = {}
    for kind, status, count in session.execute(
            select(OutboxAction.kind, OutboxAction.status, func.count())
            .group_by(OutboxAction.kind, OutboxAction.status)):
        counts.setdefault(kind, {})[status] = int(count)
    return counts


def outbox_failures(session: Session) -> dict[str, int]:
    """Failed outbox rows per `kind: decoded error`."""
    return {f"{kind}: {note}": int(count) for kind, note, count in session.execute(
        select(OutboxAction.kind, OutboxAction.note, func.count())
        .where(OutboxAction.status == "failed")
        .group_by(OutboxAction.kind, OutboxAction.note))}
