"""The chain event index: its cursor, the block hashes it checks, and the events themselves.

Rows move along `domain.lifecycle.CHAIN_EVENT_TRANSITIONS`; every move here is one guarded
UPDATE. A row is never deleted: a dropped row keeps its `applied` flag, so when the same
transaction lands again (same hash, same log position) the row is revived instead of a new
one counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from orchestrator.db.models import ChainBlock, ChainCursor, ChainEventRecord, ChainEventSubject
from orchestrator.domain.chain_events import (
    ChainEvent,
    args_from_json,
    args_to_json,
    subjects,
)
from orchestrator.domain.ids import hex0x, unhex
from orchestrator.domain.lifecycle import ChainEventStatus, chain_event_transition

S = ChainEventStatus
CANONICAL = (S.PROVISIONAL.value, S.FINAL.value)


@dataclass(frozen=True, slots=True)
class Cursor:
    name: str
    next_block: int
    final_block: int
    chunk: int
    reorgs: int
    deepest_reorg: int


@dataclass(frozen=True, slots=True)
class StoredEvent:
    id: int
    event: ChainEvent
    status: ChainEventStatus
    applied: bool


def _event(row: ChainEventRecord) -> ChainEvent:
    return ChainEvent(contract=row.contract, name=row.name, args=args_from_json(row.args),
                      block_number=row.block_number, block_hash=unhex(row.block_hash),
                      tx_hash=unhex(row.tx_hash), log_index=row.log_index)


def _cursor(row: ChainCursor) -> Cursor:
    return Cursor(name=row.name, next_block=row.next_block, final_block=row.final_block,
                  chunk=row.chunk, reorgs=row.reorgs, deepest_reorg=row.deepest_reorg)


def lock_cursor(session: Session, *, name: str, start_block: int, chunk: int,
                now: float) -> Cursor:
    """The cursor `name`, created at `start_block` on first use; locked for this pass."""
    row = session.scalars(select(ChainCursor).where(ChainCursor.name == name)
                          .with_for_update()).one_or_none()
    if row is None:
        row = ChainCursor(name=name, next_block=start_block, final_block=start_block - 1,
                          chunk=chunk, reorgs=0, deepest_reorg=0, updated_at=now)
        session.add(row)
        session.flush()
    return _cursor(row)


def get_cursor(session: Session, *, name: str) -> Cursor | None:
    row = session.get(ChainCursor, name)
    return None if row is None else _cursor(row)


def advance_cursor(session: Session, *, name: str, next_block: int, final_block: int,
                   chunk: int, now: float) -> None:
    session.execute(update(ChainCursor).where(ChainCursor.name == name).values(
        next_block=next_block, final_block=final_block, chunk=chunk, updated_at=now))


def block_hashes(session: Session, *, cursor: str, from_block: int) -> dict[int, str]:
    """Stored hashes of heights >= `from_block`."""
    return {row.number: row.hash for row in session.scalars(
        select(ChainBlock).where(ChainBlock.cursor == cursor, ChainBlock.number >= from_block))}


def heights_below(session: Session, *, cursor: str, below: int, limit: int) -> dict[int, str]:
    """Up to `limit` stored hashes of heights < `below`, highest first (a deep reorg's walk)."""
    return {row.number: row.hash for row in session.scalars(
        select(ChainBlock).where(ChainBlock.cursor == cursor, ChainBlock.number < below)
        .order_by(ChainBlock.number.desc()).limit(limit))}


def save_block_hashes(session: Session, *, cursor: str, hashes: dict[int, bytes]) -> None:
    if not hashes:
        return
    session.execute(delete(ChainBlock).where(ChainBlock.cursor == cursor,
                                             ChainBlock.number.in_(list(hashes))))
    session.add_all(ChainBlock(cursor=cursor, number=number, hash=hex0x(value))
                    for number, value in hashes.items())


def prune_block_hashes(session: Session, *, cursor: str, below: int) -> None:
    """Forget hashes of heights < `below` that hold no canonical event (those are kept: they
    locate a reorg deeper than the margin)."""
    holding = select(ChainEventRecord.block_number).where(
        ChainEventRecord.cursor == cursor, ChainEventRecord.status.in_(CANONICAL))
    session.execute(delete(ChainBlock).where(ChainBlock.cursor == cursor,
                                             ChainBlock.number < below,
                                             ChainBlock.number.not_in(holding)))


@dataclass(frozen=True, slots=True)
class RolledBack:
    provisional: int  # events dropped before they were final (never applied)
    final: int  # events dropped after they were final (applied: a reorg deeper than the margin)


def roll_back(session: Session, *, cursor: str, from_block: int, now: float) -> RolledBack:
    """Drop every canonical event at heights >= `from_block` and forget those heights; the
    cursor re-reads from there."""
    counts: dict[ChainEventStatus, int] = {}
    for status in (S.PROVISIONAL, S.FINAL):
        chain_event_transition(status, S.DROPPED)
        result = session.execute(
            update(ChainEventRecord)
            .where(ChainEventRecord.cursor == cursor, ChainEventRecord.status == status.value,
                   ChainEventRecord.block_number >= from_block)
            .values(status=S.DROPPED.value, seen_at=now)
            .execution_options(synchronize_session=False))
        counts[status] = int(getattr(result, "rowcount", 0))
    session.execute(delete(ChainBlock).where(ChainBlock.cursor == cursor,
                                             ChainBlock.number >= from_block))
    row = session.get(ChainCursor, cursor)
    if row is not None:
        row.next_block = min(row.next_block, from_block)
        row.final_block = min(row.final_block, from_block - 1)
        row.reorgs += 1
        row.updated_at = now
    return RolledBack(provisional=counts[S.PROVISIONAL], final=counts[S.FINAL])


def note_reorg_depth(session: Session, *, cursor: str, depth: int) -> None:
    session.execute(update(ChainCursor).where(ChainCursor.name == cursor,
                                              ChainCursor.deepest_reorg < depth)
                    .values(deepest_reorg=depth))


def store_events(session: Session, *, cursor: str, events: Sequence[tuple[ChainEvent, int]],
                 final_block: int, now: float) -> int:
    """Record `(event, position in its transaction)` pairs read from the canonical chain;
    returns how many were new. A dropped row of the same transaction and position is revived
    (still applied if it was and reads the same), so nothing is counted twice."""
    new = 0
    for event, position in events:
        status = S.FINAL if event.block_number <= final_block else S.PROVISIONAL
        row = session.scalars(select(ChainEventRecord).where(
            ChainEventRecord.cursor == cursor, ChainEventRecord.tx_hash == hex0x(event.tx_hash),
            ChainEventRecord.tx_position == position)).one_or_none()
        args = args_to_json(event.args)
        if row is None:
            row = ChainEventRecord(cursor=cursor, contract=event.contract, name=event.name,
                                   args=args, block_number=event.block_number,
                                   block_hash=hex0x(event.block_hash), log_index=event.log_index,
                                   tx_hash=hex0x(event.tx_hash), tx_position=position,
                                   status=status.value, applied=False, seen_at=now)
            session.add(row)
            session.flush()
            new += 1
        elif row.status == S.DROPPED.value:
            chain_event_transition(S.DROPPED, status)
            same = (row.contract, row.name, row.args) == (event.contract, event.name, args)
            row.applied = row.applied and same
            row.contract, row.name, row.args = event.contract, event.name, args
            row.block_number, row.block_hash = event.block_number, hex0x(event.block_hash)
            row.log_index, row.status, row.seen_at = event.log_index, status.value, now
            session.execute(delete(ChainEventSubject).where(ChainEventSubject.event_id == row.id))
            session.flush()
        else:
            raise RuntimeError(f"event {hex0x(event.tx_hash)}#{position} is already indexed at "
                               f"block {row.block_number}: the cursor re-read a range")
        session.add_all(ChainEventSubject(event_id=row.id, subject=subject)
                        for subject in sorted(subjects(event)))
    return new


def promote_final(session: Session, *, cursor: str, final_block: int) -> int:
    """Provisional events at heights <= `final_block` become final; returns how many."""
    chain_event_transition(S.PROVISIONAL, S.FINAL)
    result = session.execute(
        update(ChainEventRecord)
        .where(ChainEventRecord.cursor == cursor, ChainEventRecord.status == S.PROVISIONAL.value,
               ChainEventRecord.block_number <= final_block)
        .values(status=S.FINAL.value).execution_options(synchronize_session=False))
    return int(getattr(result, "rowcount", 0))


def unapplied_final(session: Session, *, cursor: str, limit: int) -> list[StoredEvent]:
    """Final events no handler has run on yet, in chain order."""
    return [StoredEvent(id=row.id, event=_event(row), status=S.FINAL, applied=False)
            for row in session.scalars(
                select(ChainEventRecord)
                .where(ChainEventRecord.cursor == cursor,
                       ChainEventRecord.status == S.FINAL.value,
                       ChainEventRecord.applied.is_(False))
                .order_by(ChainEventRecord.block_number, ChainEventRecord.log_index)
                .limit(limit))]


def mark_applied(session: Session, *, event_id: int) -> None:
    result = session.execute(
        update(ChainEventRecord)
        .where(ChainEventRecord.id == event_id, ChainEventRecord.status == S.FINAL.value,
               ChainEventRecord.applied.is_(False))
        .values(applied=True).execution_options(synchronize_session=False))
    if getattr(result, "rowcount", 0) != 1:
        raise RuntimeError(f"chain event {event_id} was applied by someone else")


def events(session: Session, *, cursor: str, subject: str | None = None,
           final_only: bool = False) -> list[StoredEvent]:
    """Canonical events (of one subject, or all) in chain order."""
    statuses = (S.FINAL.value,) if final_only else CANONICAL
    query = (select(ChainEventRecord)
             .where(ChainEventRecord.cursor == cursor, ChainEventRecord.status.in_(statuses))
             .order_by(ChainEventRecord.block_number, ChainEventRecord.log_index))
    if subject is not None:
        query = query.join(ChainEventSubject,
                           ChainEventSubject.event_id == ChainEventRecord.id).where(
            ChainEventSubject.subject == subject)
    return [StoredEvent(id=row.id, event=_event(row), status=S(row.status), applied=row.applied)
            for row in session.scalars(query)]


def unindexed(session: Session, *, tx_hashes: Sequence[str]) -> list[str]:
    """Of `tx_hashes` (0x hex), those with no event row at all: the index has not read their
    block, or they are not on the chain."""
    wanted = [tx_hash.lower() for tx_hash in tx_hashes]
    if not wanted:
        return []
    seen = set(session.scalars(select(ChainEventRecord.tx_hash)
                               .where(ChainEventRecord.tx_hash.in_(wanted))))
    return [tx_hash for tx_hash in wanted if tx_hash not in seen]


def reorged_out(session: Session, *, tx_hashes: Sequence[str]) -> set[str]:
    """Of `tx_hashes` (0x hex), those whose events the index saw and then lost to a reorg,
    with none of them back on the canonical chain: their receipts are gone, so the sender
    must broadcast them again (the outbox calls this for rows it holds as sent or confirmed).
    """
    wanted = [tx_hash.lower() for tx_hash in tx_hashes]
    if not wanted:
        return set()
    rows = session.execute(
        select(ChainEventRecord.tx_hash, ChainEventRecord.status)
        .where(ChainEventRecord.tx_hash.in_(wanted))).all()
    seen: dict[str, bool] = {}
    for tx_hash, status in rows:
        seen[tx_hash] = seen.get(tx_hash, True) and status == S.DROPPED.value
    return {tx_hash for tx_hash, dropped in seen.items() if dropped}

