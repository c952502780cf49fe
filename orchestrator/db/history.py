"""Whole-history reads for the history checker (`mesh.bench.history_check`): every
job, task, lease and slash, as plain rows, in one pass each; the leader leases and outbox
as they stand (`mesh.bench.scaleout` samples them while replicas run); and one job's record of
times (`mesh.bench.render` reads where a task's time went)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    Checkpoint,
    Job,
    LeaderLock,
    Lease,
    Node,
    OutboxAction,
    SlashRecord,
    StatusHistory,
    Task,
    VerificationCheck,
    VerificationCommitment,
)


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


@dataclass(frozen=True, slots=True)
class JobTimes:
    """What the service recorded of one job, with times: its tasks, every status move of the
    job, its tasks and their re-checks, the tasks' leases and checkpoints (results included),
    and the re-checks of its results."""

    tasks: list[Task]
    moves: list[StatusHistory]  # entity job, task or check; in the order they were made
    leases: list[Lease]
    checkpoints: list[Checkpoint]
    checks: list[VerificationCheck]


def job_times(session: Session, *, job_id: str) -> JobTimes:
    tasks = list(session.scalars(select(Task).where(Task.job_id == job_id).order_by(Task.id)))
    task_ids = [task.id for task in tasks]
    checks = list(session.scalars(
        select(VerificationCheck).join(VerificationCommitment,
                                       VerificationCommitment.id == VerificationCheck.commitment_id)
        .where(VerificationCommitment.job_id == job_id).order_by(VerificationCheck.id)))
    moves = list(session.scalars(select(StatusHistory).where(
        ((StatusHistory.entity == "job") & (StatusHistory.entity_id == job_id))
        | ((StatusHistory.entity == "task")
           & StatusHistory.entity_id.in_([str(i) for i in task_ids]))
        | ((StatusHistory.entity == "check")
           & StatusHistory.entity_id.in_([str(check.id) for check in checks])))
        .order_by(StatusHistory.id)))
    leases = list(session.scalars(select(Lease).where(Lease.task_id.in_(task_ids))
                                  .order_by(Lease.id)))
    checkpoints = list(session.scalars(select(Checkpoint).where(Checkpoint.task_id.in_(task_ids))
                                       .order_by(Checkpoint.id)))
    return JobTimes(tasks, moves, leases, checkpoints, checks)
