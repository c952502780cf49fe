"""Outbox rows as the chain sender sees them, and every status move it makes on them.

Rows move along `domain.lifecycle.OUTBOX_TRANSITIONS` (pending -> sent -> confirmed | failed;
`sent` rows may return to pending when their transaction provably can never land). Each move
is checked against that table and is a guarded UPDATE (`WHERE status = <expected>`), so a row
can never be sent twice even if two senders raced past the leader lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from orchestrator.db import crud
from orchestrator.db.models import OutboxAction
from orchestrator.domain.chain_actions import ChainAction, encode
from orchestrator.domain.lifecycle import DomainError, OutboxStatus, outbox_transition


class OutboxConflict(DomainError):
    """Another sender moved the row first; this pass must roll back and not broadcast."""

    code = "outbox_conflict"


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    id: int
    kind: str
    payload: dict[str, Any]
    attempts: int
    tx_hash: str | None
    raw_tx: str | None  # hex; only on the first row of a batch
    nonce: int | None
    next_attempt_at: float | None
    created_at: float


def queue_action(session: Session, *, action: ChainAction, idempotency_key: str,
                 now: float) -> bool:
    """Queue a typed chain action once (its codec writes the row); False when the key was
    already queued (exactly-once)."""
    return crud.enqueue_chain_action(session, kind=action.kind, idempotency_key=idempotency_key,
                                     payload=encode(action), now=now)


def _entry(row: OutboxAction) -> OutboxEntry:
    return OutboxEntry(id=row.id, kind=row.kind, payload=dict(row.payload), attempts=row.attempts,
                       tx_hash=row.tx_hash, raw_tx=row.raw_tx, nonce=row.nonce,
                       next_attempt_at=row.next_attempt_at, created_at=row.created_at)


def _rows(session: Session, status: OutboxStatus, limit: int | None) -> list[OutboxEntry]:
    return [_entry(row) for row in session.scalars(
        select(OutboxAction).where(OutboxAction.status == status.value)
        .order_by(OutboxAction.id).limit(limit).with_for_update(skip_locked=True))]


def pending_actions(session: Session, *, limit: int) -> list[OutboxEntry]:
    """Rows still to be signed, oldest first (the order they were queued in)."""
    return _rows(session, OutboxStatus.PENDING, limit)


def recent_actions(session: Session, *, status: OutboxStatus | None,
                   limit: int) -> list[OutboxAction]:
    """Newest rows first, of one status or all, for operators (a read: locks nothing)."""
    query = select(OutboxAction).order_by(OutboxAction.id.desc()).limit(limit)
    if status is not None:
        query = query.where(OutboxAction.status == status.value)
    return list(session.scalars(query))


def in_flight_actions(session: Session) -> list[OutboxEntry]:
    """Rows whose transaction is signed and persisted but not yet resolved, oldest first.
    All of them: a batch must be judged whole (few exist: each pass signs a bounded number)."""
    return _rows(session, OutboxStatus.SENT, None)


def _move(session: Session, *, action_ids: Sequence[int], expected: OutboxStatus,
          target: OutboxStatus | None, values: dict[str, Any]) -> None:
    """One guarded UPDATE; `target` None keeps the status (a deferral)."""
    if target is not None:
        outbox_transition(expected, target)
        values = {**values, "status": target.value}
    result = session.execute(
        update(OutboxAction)
        .where(OutboxAction.id.in_(list(action_ids)), OutboxAction.status == expected.value)
        .values(**values).execution_options(synchronize_session=False))
    if getattr(result, "rowcount", 0) != len(action_ids):
        raise OutboxConflict(f"outbox rows {list(action_ids)} are no longer {expected.value}")


def record_signed(session: Session, *, action_ids: Sequence[int], tx_hash: str, nonce: int,
                  raw_tx: str, now: float) -> None:
    """Persist the signed transaction BEFORE it is broadcast (the crash-safety point)."""
    _move(session, action_ids=action_ids, expected=OutboxStatus.PENDING,
          target=OutboxStatus.SENT, values={"tx_hash": tx_hash, "nonce": nonce,
                  "attempts": OutboxAction.attempts + 1, "next_attempt_at": None,
                  "updated_at": now})
    session.execute(update(OutboxAction).where(OutboxAction.id == action_ids[0])
                    .values(raw_tx=raw_tx).execution_options(synchronize_session=False))


def record_confirmed(session: Session, *, action_ids: Sequence[int], expected: OutboxStatus,
                     now: float, note: str | None = None) -> None:
    """The action took effect; the signed bytes are no longer needed."""
    _move(session, action_ids=action_ids, expected=expected, target=OutboxStatus.CONFIRMED,
          values={"note": note, "raw_tx": None,
                  "next_attempt_at": None, "updated_at": now})


def record_failed(session: Session, *, action_ids: Sequence[int], expected: OutboxStatus,
                  now: float, note: str) -> None:
    """A revert (or a malformed payload) that sending again cannot fix: kept for an operator."""
    _move(session, action_ids=action_ids, expected=expected, target=OutboxStatus.FAILED,
          values={"note": note, "raw_tx": None,
                  "next_attempt_at": None, "updated_at": now})


def return_to_pending(session: Session, *, action_ids: Sequence[int], now: float,
                      note: str) -> None:
    """Forget a transaction that can never land (its nonce is spent), so the row is signed
    again; only safe once the chain proves the old bytes are dead."""
    _move(session, action_ids=action_ids, expected=OutboxStatus.SENT,
          target=OutboxStatus.PENDING, values={"tx_hash": None, "raw_tx": None,
                  "nonce": None, "note": note, "updated_at": now})


def defer(session: Session, *, action_ids: Sequence[int], expected: OutboxStatus, now: float,
          retry_at: float, note: str) -> None:
    """A transient failure (node down, timeout): count the attempt, try again at `retry_at`."""
    _move(session, action_ids=action_ids, expected=expected, target=None,
          values={"attempts": OutboxAction.attempts + 1, "next_attempt_at": retry_at,
                  "note": note, "updated_at": now})
