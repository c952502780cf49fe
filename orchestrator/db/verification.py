"""Verification rows: commitments, re-checks, evidence and providers' pooled records. Every
status move goes through the domain tables (`VERIFICATION_TRANSITIONS`, `CHECK_TRANSITIONS`)
and into the status history; a check is leased with a guarded UPDATE, so two replicas can
never hand the same check to two nodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from orchestrator.db import statuses as status_db
from orchestrator.db.models import (
    Task,
    VerificationCheck,
    VerificationCommitment,
    VerificationEvidence,
    VerificationRecord,
)
from orchestrator.domain.lifecycle import (
    CheckStatus,
    TaskStatus,
    VerificationStatus,
    check_transition,
    verification_transition,
)
from orchestrator.domain.verification import ProviderRecord


def add_commitment(session: Session, **fields: Any) -> VerificationCommitment:
    row = VerificationCommitment(status=VerificationStatus.COMMITTED.value, **fields)
    session.add(row)
    session.flush()
    return row


def latest_commitment(session: Session, *, task_id: int) -> VerificationCommitment | None:
    return session.scalars(select(VerificationCommitment)
                           .where(VerificationCommitment.task_id == task_id)
                           .order_by(VerificationCommitment.id.desc())).first()


def latest_commitments(session: Session, *, job_id: str) -> dict[int, VerificationCommitment]:
    """The newest commitment of each task of the job that has one."""
    latest: dict[int, VerificationCommitment] = {}
    for row in session.scalars(select(VerificationCommitment)
                               .where(VerificationCommitment.job_id == job_id)
                               .order_by(VerificationCommitment.id)):
        latest[row.task_id] = row
    return latest


def get_commitment(session: Session, *, commitment_id: int) -> VerificationCommitment | None:
    return session.get(VerificationCommitment, commitment_id)


def lock_check(session: Session, *, check_id: int
               ) -> tuple[VerificationCheck, VerificationCommitment] | None:
    """The check and its commitment, re-read under the commitment's row lock: a result's
    checks are decided one at a time, each seeing what the one before it decided."""
    check = session.get(VerificationCheck, check_id)
    if check is None:
        return None
    commitment = session.get(VerificationCommitment, check.commitment_id, with_for_update=True,
                             populate_existing=True)
    assert commitment is not None  # a foreign key
    session.refresh(check)  # decided under the lock: what the last decision left
    return check, commitment


def set_status(session: Session, *, commitment: VerificationCommitment,
               target: VerificationStatus, now: float, reason: str) -> None:
    change = verification_transition(VerificationStatus(commitment.status), target, at=now,
                                     reason=reason)
    commitment.status = target.value
    commitment.detail = reason
    if target is not VerificationStatus.CHECKING and target is not VerificationStatus.DISPUTED:
        commitment.decided_at = now
    status_db.record_change(session, entity_id=str(commitment.id), change=change)


def add_check(session: Session, *, commitment: VerificationCommitment, window: int, role: str,
              recipe: dict[str, Any], now: float) -> VerificationCheck:
    row = VerificationCheck(commitment_id=commitment.id, window=window, role=role,
                            recipe=recipe, status=CheckStatus.OPEN.value, created_at=now)
    session.add(row)
    session.flush()
    return row


def checks_of(session: Session, *, commitment_id: int) -> list[VerificationCheck]:
    return list(session.scalars(select(VerificationCheck)
                                .where(VerificationCheck.commitment_id == commitment_id)
                                .order_by(VerificationCheck.id)))


def get_check(session: Session, *, check_id: int) -> VerificationCheck | None:
    return session.get(VerificationCheck, check_id)


def set_check_status(session: Session, *, check: VerificationCheck, target: CheckStatus,
                     now: float, reason: str) -> None:
    change = check_transition(CheckStatus(check.status), target, at=now, reason=reason)
    check.status = target.value
    if target in (CheckStatus.MATCHED, CheckStatus.MISMATCHED, CheckStatus.VOID):
        check.done_at = now
    status_db.record_change(session, entity_id=str(check.id), change=change)


def node_env(session: Session, *, node_id: str) -> dict[str, Any] | None:
    """The render environment the node reported last (with a result or a check)."""
    committed = session.scalars(select(VerificationCommitment)
                                .where(VerificationCommitment.node_id == node_id,
                                       VerificationCommitment.env.is_not(None))
                                .order_by(VerificationCommitment.id.desc())).first()
    checked = session.scalars(select(VerificationCheck)
                              .where(VerificationCheck.checker_node == node_id,
                                     VerificationCheck.result.is_not(None))
                              .order_by(VerificationCheck.id.desc())).first()
    found: list[tuple[float, dict[str, Any] | None]] = []
    if committed is not None:
        found.append((committed.created_at, committed.env))
    if checked is not None:
        found.append((checked.done_at or 0.0, (checked.result or {}).get("env")))
    return max(found, key=lambda pair: pair[0])[1] if found else None


def lease_check(session: Session, *, node_id: str, provider: str, now: float,
                ttl_s: float, env: dict[str, Any] | None = None,
                limit: int = 50) -> VerificationCheck | None:
    """The oldest open (or lapsed) check this node may run: not its own provider's result,
    not a window it already rendered for the same commitment, not one that excluded it, nor
    one of a job that names other providers;
    those whose result was rendered with `env` (the node's own) first, so checks are exact
    where they can be."""
    lapsed = ((VerificationCheck.status == CheckStatus.LEASED.value)
              & (VerificationCheck.expires_at < now))
    candidates = session.execute(
        select(VerificationCheck, VerificationCommitment.env)
        .join(VerificationCommitment,
              VerificationCommitment.id == VerificationCheck.commitment_id)
        .where((VerificationCheck.status == CheckStatus.OPEN.value) | lapsed)
        .where(VerificationCommitment.provider != provider)
        .where(VerificationCommitment.node_id != node_id)
        .order_by(VerificationCheck.id).limit(limit)).all()
    ordered = sorted(candidates, key=lambda row: env is not None and row[1] != env)
    for check, _ in ordered:
        excluded = set(check.recipe.get("excluded_providers", []))
        excluded |= {c.checker_provider for c in checks_of(session,
                                                           commitment_id=check.commitment_id)
                     if c.id != check.id and c.window == check.window}
        if provider in excluded:  # a provider renders each window of a result once
            continue
        allowed = check.recipe.get("allowed_providers")
        if allowed is not None and provider not in allowed:  # the job names who may see it
            continue
        if check.status == CheckStatus.LEASED.value:
            set_check_status(session, check=check, target=CheckStatus.OPEN, now=now,
                             reason=f"lease of {check.checker_node} lapsed")
            session.flush()
        taken = session.execute(
            update(VerificationCheck)
            .where(VerificationCheck.id == check.id,
                   VerificationCheck.status == CheckStatus.OPEN.value)
            .values(status=CheckStatus.LEASED.value, checker_node=node_id,
                    checker_provider=provider, expires_at=now + ttl_s)
            .execution_options(synchronize_session=False))
        if taken.rowcount != 1:  # type: ignore[attr-defined]
            continue  # another replica leased it first
        status_db.record_change(session, entity_id=str(check.id), change=check_transition(
            CheckStatus.OPEN, CheckStatus.LEASED, at=now, reason=f"leased to {node_id}"))
        session.refresh(check)
        return check
    return None


def holds_check(session: Session, *, node_id: str, now: float) -> bool:
    """Whether a re-check is leased to this node now."""
    return session.scalars(select(VerificationCheck.id).where(
        VerificationCheck.checker_node == node_id,
        VerificationCheck.status == CheckStatus.LEASED.value,
        VerificationCheck.expires_at >= now).limit(1)).first() is not None


def leased_blobs(session: Session, *, node_id: str, now: float) -> set[str]:
    """Inputs of the checks leased to this node (the .blend it re-renders and its pack)."""
    readable: set[str] = set()
    for check in session.scalars(select(VerificationCheck).where(
            VerificationCheck.checker_node == node_id,
            VerificationCheck.status == CheckStatus.LEASED.value,
            VerificationCheck.expires_at >= now)):
        payload = check.recipe.get("payload", {})
        if payload.get("blend_sha256"):
            readable.add(str(payload["blend_sha256"]))
            readable.update(str(sha256) for sha256 in (payload.get("assets") or {}).values())
    return readable


def record_of(session: Session, *, provider: str) -> ProviderRecord:
    row = session.get(VerificationRecord, provider)
    return ProviderRecord() if row is None else ProviderRecord(row.consecutive_valid,
                                                               row.failures)


def update_record(session: Session, *, provider: str, now: float,
                  change: Callable[[ProviderRecord], ProviderRecord]) -> ProviderRecord:
    """Apply `change` to the provider's record under its row lock: two checks of the same
    provider decided at once would otherwise each write their own streak over the other's."""
    row = session.get(VerificationRecord, provider, with_for_update=True,
                      populate_existing=True)
    if row is None:
        try:  # another process may insert the provider's first record meanwhile
            with session.begin_nested():
                row = VerificationRecord(provider=provider, consecutive_valid=0, failures=0,
                                         updated_at=now)
                session.add(row)
        except IntegrityError:
            row = session.get(VerificationRecord, provider, with_for_update=True,
                              populate_existing=True)
            assert row is not None
    record = change(ProviderRecord(row.consecutive_valid, row.failures))
    row.consecutive_valid = record.consecutive_valid
    row.failures = record.failures
    row.updated_at = now
    return record


def add_evidence(session: Session, *, digest: str, commitment_id: int, node_id: str,
                 evidence: dict[str, Any], now: float) -> None:
    if session.get(VerificationEvidence, digest) is None:
        session.add(VerificationEvidence(digest=digest, commitment_id=commitment_id,
                                         node_id=node_id, evidence=evidence, created_at=now))


def evidence_of(session: Session, *, commitment_id: int) -> list[VerificationEvidence]:
    return list(session.scalars(select(VerificationEvidence)
                                .where(VerificationEvidence.commitment_id == commitment_id)))


def void_open_checks(session: Session, *, commitment: VerificationCommitment, now: float,
                     reason: str) -> int:
    voided = 0
    for check in checks_of(session, commitment_id=commitment.id):
        if check.status in (CheckStatus.OPEN.value, CheckStatus.LEASED.value):
            set_check_status(session, check=check, target=CheckStatus.VOID, now=now,
                             reason=reason)
            voided += 1
    return voided


@dataclass(frozen=True, slots=True)
class VerificationCounts:
    commitments: dict[str, int]  # by status
    checks: dict[str, int]  # by status
    overturned: int  # disputes the tie-breaker decided for the node: a rejection avoided
    check_render_s: float
    by_node: dict[str, dict[str, int]]  # node -> commitments by status


def counts(session: Session) -> VerificationCounts:
    by_status = dict(session.execute(select(VerificationCommitment.status, func.count())
                                     .group_by(VerificationCommitment.status)).all())
    checks = dict(session.execute(select(VerificationCheck.status, func.count())
                                  .group_by(VerificationCheck.status)).all())
    overturned = session.scalar(select(func.count()).select_from(VerificationCheck).where(
        VerificationCheck.role == "tiebreak",
        VerificationCheck.status == CheckStatus.MATCHED.value)) or 0
    render_s = session.scalar(select(func.coalesce(func.sum(VerificationCheck.render_s), 0.0)))
    by_node: dict[str, dict[str, int]] = {}
    for node_id, status, count in session.execute(
            select(VerificationCommitment.node_id, VerificationCommitment.status, func.count())
            .group_by(VerificationCommitment.node_id, VerificationCommitment.status)):
        by_node.setdefault(str(node_id), {})[str(status)] = int(count)
    return VerificationCounts({str(k): int(v) for k, v in by_status.items()},
                              {str(k): int(v) for k, v in checks.items()}, int(overturned),
                              float(render_s or 0.0), by_node)


def redo_task(session: Session, *, task: Task, now: float, reason: str,
              exclude_provider: str | None = None) -> None:
    """A done task whose result failed goes back in line from scratch: its checkpoints were
    the failed node's, so nothing of them is resumed. `exclude_provider`: the one whose result
    failed verification, never given the task again."""
    status_db.set_task_status(session, task=task, target=TaskStatus.RETRY, now=now, reason=reason)
    if exclude_provider is not None:
        excluded = {*task.needs.get("excluded_providers", ()), exclude_provider}
        task.needs = {**task.needs, "excluded_providers": sorted(excluded)}
    task.node_id = None
    task.progress = task.checkpoint_progress = 0.0
    task.checkpoint_sha256 = None
    task.result_sha256 = None


def commitments_of_task(session: Session, *, task_id: int) -> list[VerificationCommitment]:
    return list(session.scalars(select(VerificationCommitment)
                                .where(VerificationCommitment.task_id == task_id)
                                .order_by(VerificationCommitment.id)))


def windows_delivered(session: Session, *, provider: str, since: float) -> int:
    """Windows of the provider's results committed since `since` (its epoch's volume)."""
    return int(session.scalar(select(func.coalesce(func.sum(VerificationCommitment.windows), 0))
                              .where(VerificationCommitment.provider == provider,
                                     VerificationCommitment.created_at >= since)) or 0)
