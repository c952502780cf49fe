"""Outbox rows as the chain sender sees them, and every status move it makes on them.

Rows move along `domain.lifecycle.OUTBOX_TRANSITIONS` (pending -> sent -> confirmed | failed;
`sent` rows may return to pending when their transaction provably can never land, confirmed
ones to sent when a reorg removed their transaction). Each move
is checked against that table and is a guarded UPDATE (`WHERE status = <expected>`), so a row
can never be sent twice even if two senders raced past the leader lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, func, insert, select, update
from sqlalchemy.orm import Session

from orchestrator.db.models import ChainNonce, OutboxAction, OutboxTransaction
from orchestrator.domain.chain_actions import AssignCollateral, ChainAction, decode, encode
from orchestrator.domain.errors import DomainError
from orchestrator.domain.fees import Fees
from orchestrator.domain.ids import JobId
from orchestrator.domain.lifecycle import OutboxStatus, outbox_transition


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


@dataclass(frozen=True, slots=True)
class SentVersion:
    """One signed version of a transaction (the first, or a fee-bumped replacement)."""

    tx_hash: str
    sender: str
    nonce: int
    fees: Fees
    signed_at: float


def enqueue_chain_action(session: Session, *, kind: str, idempotency_key: str,
                         payload: dict[str, Any], now: float) -> bool:
    """Queue a row once; False when the key was already queued (exactly-once). Services
    queue typed actions through `queue_action`, which writes the payload."""
    if session.scalars(select(OutboxAction.id)
                       .where(OutboxAction.idempotency_key == idempotency_key)).first():
        return False
    session.add(OutboxAction(idempotency_key=idempotency_key, kind=kind, payload=payload,
                             status=OutboxStatus.PENDING.value, attempts=0, created_at=now,
                             updated_at=now))
    return True


def queue_action(session: Session, *, action: ChainAction, idempotency_key: str,
                 now: float) -> bool:
    """Queue a typed chain action once (its codec writes the row); False when the key was
    already queued (exactly-once)."""
    return enqueue_chain_action(session, kind=action.kind, idempotency_key=idempotency_key,
                                payload=encode(action), now=now)


def queue_actions(session: Session, *, actions: Sequence[tuple[str, ChainAction]],
                  now: float) -> list[str]:
    """Queue typed chain actions, each (idempotency key, action) once, in one read of the
    keys already queued and one executemany INSERT of the rest (in the given order; a key
    repeated in `actions` counts once, its first action). Returns the keys queued now. (An
    executemany: psycopg pipelines it, where one multi-row INSERT of a batch spends longer
    compiling its thousands of bind parameters than the pipeline takes.)"""
    keys = [key for key, _ in actions]
    queued = set(session.scalars(select(OutboxAction.idempotency_key)
                                 .where(OutboxAction.idempotency_key.in_(keys)))) if keys else set()
    rows: list[dict[str, Any]] = []
    new_keys: list[str] = []
    for key, action in actions:
        if key in queued:
            continue
        queued.add(key)
        new_keys.append(key)
        rows.append({"idempotency_key": key, "kind": action.kind, "payload": encode(action),
                     "status": OutboxStatus.PENDING.value, "attempts": 0, "created_at": now,
                     "updated_at": now})
    if rows:  # Core: no ORM bookkeeping per row
        session.execute(insert(cast(Table, OutboxAction.__table__)), rows)
    return new_keys


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


def keys_of_tx(session: Session, *, tx_hash: str, kind: str) -> list[str]:
    """Idempotency keys of the rows of `kind` whose transaction (as mined) is `tx_hash`."""
    return list(session.scalars(select(OutboxAction.idempotency_key).where(
        OutboxAction.tx_hash == tx_hash.lower(), OutboxAction.kind == kind)
        .order_by(OutboxAction.id)))


def unmined(session: Session, *, kind: str) -> list[OutboxEntry]:
    """Rows of `kind` queued or sent but not yet confirmed, oldest first (a read: locks
    nothing)."""
    return [_entry(row) for row in session.scalars(
        select(OutboxAction).where(OutboxAction.kind == kind, OutboxAction.status.in_(
            [OutboxStatus.PENDING.value, OutboxStatus.SENT.value]))
        .order_by(OutboxAction.id))]


def assignment_batch(session: Session, *, job_id: bytes, provider: str,
                     placement: int | None = None) -> list[AssignCollateral] | None:
    """The assigns one committed root was built over, in queue order: the root of the newest
    confirmed assign of (job, provider), of placement `placement` when given, that went out in
    a transaction of its own; None when there is none. An assign confirmed because its root
    was already committed sent nothing (another assign of the same terms built the same
    root): the one that sent it holds the proof. A read of confirmed rows only (scanned
    newest first: proofs are needed for the rare slash or dispute)."""
    rows = session.scalars(select(OutboxAction).where(
        OutboxAction.kind == AssignCollateral.kind,
        OutboxAction.status == OutboxStatus.CONFIRMED.value,
        OutboxAction.tx_hash.is_not(None)).order_by(OutboxAction.id.desc()))
    wanted = (JobId.of(job_id), provider)
    tx_hash = next((row.tx_hash for row in rows
                    if (row.payload.get("job_id"), row.payload.get("provider")) == wanted
                    and placement in (None, _int_or_none(row.payload.get("placement")))), None)
    if tx_hash is None:
        return None
    batch = session.scalars(select(OutboxAction).where(
        OutboxAction.kind == AssignCollateral.kind, OutboxAction.tx_hash == tx_hash,
        OutboxAction.status == OutboxStatus.CONFIRMED.value).order_by(OutboxAction.id))
    return [action for row in batch
            if isinstance(action := decode(row.kind, row.payload), AssignCollateral)]


def _int_or_none(value: object) -> int | None:
    """A stored decimal field as an int; None when it is not one (a row of an older format)."""
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


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


def record_signed(session: Session, *, action_ids: Sequence[int], tx_hash: str, sender: str,
                  nonce: int, fees: Fees, raw_tx: str, now: float) -> None:
    """Persist the signed transaction BEFORE it is broadcast (the crash-safety point), and
    take its nonce: the key's next one is the one after."""
    _move(session, action_ids=action_ids, expected=OutboxStatus.PENDING,
          target=OutboxStatus.SENT, values={"tx_hash": tx_hash, "nonce": nonce,
                  "attempts": OutboxAction.attempts + 1, "next_attempt_at": None,
                  "updated_at": now})
    _set_raw(session, action_ids[0], raw_tx)
    _add_version(session, tx_hash=tx_hash, sender=sender, nonce=nonce, fees=fees, now=now)
    set_next_nonce(session, address=sender, nonce=nonce + 1, now=now)


def record_replacement(session: Session, *, action_ids: Sequence[int], tx_hash: str,
                       sender: str, nonce: int, fees: Fees, raw_tx: str, now: float) -> None:
    """Persist a fee-bumped version at the same nonce BEFORE it is broadcast; the rows now
    resend it, and every earlier version stays known (any of them may still be mined)."""
    _move(session, action_ids=action_ids, expected=OutboxStatus.SENT, target=None,
          values={"tx_hash": tx_hash, "updated_at": now})
    _set_raw(session, action_ids[0], raw_tx)
    _add_version(session, tx_hash=tx_hash, sender=sender, nonce=nonce, fees=fees, now=now)


def record_mined_version(session: Session, *, action_ids: Sequence[int], tx_hash: str,
                         now: float) -> None:
    """An earlier version than the newest was mined: the rows point at the one that landed."""
    _move(session, action_ids=action_ids, expected=OutboxStatus.SENT, target=None,
          values={"tx_hash": tx_hash, "updated_at": now})


def _set_raw(session: Session, action_id: int, raw_tx: str) -> None:
    session.execute(update(OutboxAction).where(OutboxAction.id == action_id)
                    .values(raw_tx=raw_tx).execution_options(synchronize_session=False))


def _add_version(session: Session, *, tx_hash: str, sender: str, nonce: int, fees: Fees,
                 now: float) -> None:
    session.add(OutboxTransaction(tx_hash=tx_hash, sender=sender, nonce=nonce,
                                  max_fee_per_gas=fees.max_fee_per_gas,
                                  max_priority_fee_per_gas=fees.max_priority_fee_per_gas,
                                  signed_at=now))
    session.flush()


def versions(session: Session, tx_hash: str) -> list[SentVersion]:
    """Every version signed at the nonce of `tx_hash` by its key, oldest first (empty for a
    hash the outbox never signed)."""
    head = session.get(OutboxTransaction, tx_hash)
    if head is None:
        return []
    return [SentVersion(tx_hash=row.tx_hash, sender=row.sender, nonce=row.nonce,
                        fees=Fees(max_fee_per_gas=row.max_fee_per_gas,
                                  max_priority_fee_per_gas=row.max_priority_fee_per_gas),
                        signed_at=row.signed_at)
            for row in session.scalars(
                select(OutboxTransaction)
                .where(OutboxTransaction.sender == head.sender,
                       OutboxTransaction.nonce == head.nonce)
                .order_by(OutboxTransaction.signed_at, OutboxTransaction.tx_hash))]


def next_nonce(session: Session, *, address: str) -> int | None:
    """The key's next nonce as the sender keeps it (locked for this pass), None if unknown."""
    return session.scalar(select(ChainNonce.next_nonce).where(ChainNonce.address == address)
                          .with_for_update())


def set_next_nonce(session: Session, *, address: str, nonce: int, now: float) -> None:
    row = session.get(ChainNonce, address, with_for_update=True)
    if row is None:
        session.add(ChainNonce(address=address, next_nonce=nonce, updated_at=now))
    else:
        row.next_nonce, row.updated_at = nonce, now
    session.flush()


def used_nonce_floor(session: Session, *, address: str) -> int:
    """One past the highest nonce a transaction of the key's rows holds, in flight, confirmed
    or failed (0 when none): a resync from the chain never goes below it, even if those bytes
    have not reached the node yet, a reorg took them off the chain or a lagging node does not
    count them. So no nonce one of our transactions used goes to another, and the versions
    signed at a nonce are always one action's (`versions`)."""
    highest = session.scalar(
        select(func.max(OutboxAction.nonce))
        .join(OutboxTransaction, OutboxTransaction.tx_hash == OutboxAction.tx_hash)
        .where(OutboxTransaction.sender == address))
    return 0 if highest is None else int(highest) + 1


def confirmed_tx_hashes(session: Session, *, since: float) -> list[str]:
    """The mined transactions of rows confirmed since `since`: what a reorg could undo."""
    return sorted({tx for tx in session.scalars(
        select(OutboxAction.tx_hash)
        .where(OutboxAction.status == OutboxStatus.CONFIRMED.value,
               OutboxAction.updated_at >= since, OutboxAction.tx_hash.is_not(None)))
        if tx is not None})


def reorged_rows(session: Session, *, tx_hashes: Sequence[str]) -> list[int]:
    """Confirmed rows, by id, whose mined transaction is one of `tx_hashes`: every row of a
    batch, though its signed bytes are on its first row alone (a row with a transaction hash
    always has them there; a row confirmed by a chain read has no transaction)."""
    return list(session.scalars(
        select(OutboxAction.id)
        .where(OutboxAction.tx_hash.in_([tx_hash.lower() for tx_hash in tx_hashes]),
               OutboxAction.status == OutboxStatus.CONFIRMED.value)
        .order_by(OutboxAction.id).with_for_update()))


def record_confirmed(session: Session, *, action_ids: Sequence[int], expected: OutboxStatus,
                     now: float, note: str | None = None, gas_used: int | None = None) -> None:
    """The action took effect; the signed bytes stay, in case a reorg removes it. A batch's
    rows share its transaction's `gas_used`."""
    _move(session, action_ids=action_ids, expected=expected, target=OutboxStatus.CONFIRMED,
          values={"note": note, "gas_used": gas_used, "next_attempt_at": None,
                  "updated_at": now})


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


def reopen_reorged(session: Session, *, action_ids: Sequence[int], now: float,
                   note: str) -> None:
    """A reorg removed the confirmed rows' transaction: in flight again, so the next pass
    resends the same bytes (same nonce: it lands at most once) or re-signs if it cannot."""
    _move(session, action_ids=action_ids, expected=OutboxStatus.CONFIRMED,
          target=OutboxStatus.SENT, values={"note": note, "next_attempt_at": None,
                                            "updated_at": now})


def defer(session: Session, *, action_ids: Sequence[int], expected: OutboxStatus, now: float,
          retry_at: float, note: str) -> None:
    """A transient failure (node down, timeout): count the attempt, try again at `retry_at`."""
    _move(session, action_ids=action_ids, expected=expected, target=None,
          values={"attempts": OutboxAction.attempts + 1, "next_attempt_at": retry_at,
                  "note": note, "updated_at": now})
