"""The reorg-safe event indexer and the services that subscribe to its events.

One pass (the leader's periodic `chain-index` job, in one transaction):
1. compare the stored hashes of recent heights with the chain; at the first that differs,
   drop every event from the fork point up and read again from there (a reorg deeper than the
   margin walks further down the heights that held events);
2. read the logs of the mesh contracts from the cursor towards the head in adaptive chunks,
   storing each event and the hashes of the heights read near the head;
3. mark events at or below the finality point final (the margin below the head, or the
   chain's `finalized`/`safe` tag where it is stricter);
4. run the handlers registered for each final event that no handler has seen, in chain order,
   each with its `applied` mark in one savepoint: exactly once per event, and never for a
   provisional event, so a reorg above the finality point has nothing to undo.

A transaction that lands again after a reorg (same hash, same log position) revives its old
row rather than adding one, so its events are neither lost nor applied twice.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.orm import Session

from orchestrator.db import chain_events as index
from orchestrator.domain import chain_ledger
from orchestrator.domain.chain_events import ChainEvent, Heights, LogChunk, subject_key
from orchestrator.domain.chain_views import DisputeRecord, EscrowedJob, ProviderStake
from orchestrator.domain.ids import hex0x

log = logging.getLogger("orchestrator.chain_index")

LEASE_NAME = "chain-index"
CURSOR = "mesh"
HASH_WALK = 64  # stored heights read per step of a deep reorg's walk down

Handler = Callable[[Session, ChainEvent, float], object]  # what it returns is not read


class EventDispatch:
    """Handlers keyed by (contract, event name); each runs once per final event."""

    def __init__(self) -> None:
        self._handlers: dict[tuple[str, str], list[Handler]] = defaultdict(list)

    def register(self, contract: str, name: str, handler: Handler) -> None:
        self._handlers[(contract, name)].append(handler)

    def handlers(self, event: ChainEvent) -> Sequence[Handler]:
        return self._handlers.get((event.contract, event.name), ())


class IndexReader(Protocol):
    """What a pass needs from the chain (`chain.indexer.ChainIndexReader`)."""

    start_block: int

    def heights(self, margin: int) -> Heights: ...

    def block_hashes(self, numbers: Sequence[int]) -> dict[int, bytes]: ...

    def read_logs(self, from_block: int, to_block: int, chunk: int) -> LogChunk: ...

    def mined_at(self, tx_hashes: Sequence[str]) -> dict[str, int]: ...


class ChainUnavailable(Exception):
    """No chain to index yet (no deployment saved, the node does not answer): the pass waits
    and the next one tries again."""


class ChainMoved(Exception):
    """The chain changed under this pass (a log's block is not the block at its height now):
    the pass rolls back whole and the next one starts from a consistent view."""


@dataclass(frozen=True, slots=True)
class PassReport:
    head: int
    final: int  # the finality point after this pass
    next_block: int  # the cursor after this pass
    new_events: int
    reorg_depth: int = 0  # blocks replaced by the reorg this pass found (0: none)
    dropped: int = 0  # events rolled back by it
    dropped_final: int = 0  # of which final ones (a reorg deeper than the margin)
    applied: int = 0  # final events handed to the handlers
    failed: list[str] = field(default_factory=list)  # handler errors that stopped dispatch


class ChainIndexer:
    """One cursor over the mesh contracts' events (see the module docstring)."""

    def __init__(self, reader: Callable[[], IndexReader], dispatch: EventDispatch, *,
                 margin: int, cursor: str = CURSOR, blocks_per_pass: int = 50_000,
                 first_chunk: int = 500, apply_limit: int = 5_000) -> None:
        if margin < 0:
            raise ValueError(f"the reorg margin must be >= 0 blocks, not {margin}")
        self.reader = reader
        self.dispatch = dispatch
        self.margin = margin
        self.cursor = cursor
        self.blocks_per_pass = blocks_per_pass
        self.first_chunk = first_chunk
        self.apply_limit = apply_limit

    def run(self, session: Session, now: float) -> PassReport:
        reader = self.reader()
        heights = reader.heights(self.margin)
        cursor = index.lock_cursor(session, name=self.cursor, start_block=reader.start_block,
                                   chunk=self.first_chunk, now=now)
        depth, dropped, dropped_final = 0, 0, 0
        fork = self._fork(session, reader, cursor)
        if fork is not None:
            top = max(cursor.next_block - 1, fork)
            depth = top - fork + 1
            rolled = index.roll_back(session, cursor=self.cursor, from_block=fork, now=now)
            index.note_reorg_depth(session, cursor=self.cursor, depth=depth)
            dropped, dropped_final = rolled.provisional + rolled.final, rolled.final
            log.warning("reorg of %d blocks from %d: %d provisional and %d final events dropped",
                        depth, fork, rolled.provisional, rolled.final)
            if dropped_final:
                log.error("a reorg deeper than the %d-block margin replaced %d final events",
                          self.margin, dropped_final)
            cursor = index.lock_cursor(session, name=self.cursor, start_block=reader.start_block,
                                       chunk=self.first_chunk, now=now)
        next_block, chunk, new = self._read(session, reader, cursor, heights, now)
        final = min(heights.final, next_block - 1)
        index.promote_final(session, cursor=self.cursor, final_block=final)
        index.advance_cursor(session, name=self.cursor, next_block=next_block,
                             final_block=max(final, cursor.final_block),
                             chunk=chunk, now=now)
        index.prune_block_hashes(session, cursor=self.cursor, below=final - self.margin + 1)
        applied, failed = self._apply(session, now)
        return PassReport(head=heights.head, final=final, next_block=next_block, new_events=new,
                          reorg_depth=depth, dropped=dropped, dropped_final=dropped_final,
                          applied=applied, failed=failed)

    def _fork(self, session: Session, reader: IndexReader, cursor: index.Cursor) -> int | None:
        """The lowest height whose block was replaced since it was indexed, or None."""
        stored = index.block_hashes(session, cursor=self.cursor,
                                    from_block=cursor.final_block - self.margin + 1)
        if not stored:
            return None
        heights = sorted(stored)
        current = reader.block_hashes(heights)
        changed = [n for n in heights if _hex(current.get(n)) != stored[n]]
        if not changed:
            return None
        kept = [n for n in heights if n < changed[0]]
        if kept:
            return kept[-1] + 1
        below = changed[0]  # even the oldest recent height changed: walk down older ones
        while True:
            older = index.heights_below(session, cursor=self.cursor, below=below,
                                        limit=HASH_WALK)
            if not older:
                return reader.start_block
            now_at = reader.block_hashes(sorted(older))
            for number in sorted(older, reverse=True):
                if _hex(now_at.get(number)) == older[number]:
                    return number + 1
            below = min(older)

    def _read(self, session: Session, reader: IndexReader, cursor: index.Cursor,
              heights: Heights, now: float) -> tuple[int, int, int]:
        next_block, chunk, new = cursor.next_block, cursor.chunk, 0
        limit = min(heights.head, next_block + self.blocks_per_pass - 1)
        recent = heights.final - self.margin + 1  # heights whose hashes are kept and checked
        while next_block <= limit:
            got = reader.read_logs(next_block, limit, chunk)
            wanted = list(range(max(next_block, recent), got.last_block + 1))
            hashes = reader.block_hashes(wanted)
            if len(hashes) < len(wanted):
                raise ChainMoved(f"the chain is shorter than block {got.last_block} now")
            for event in got.events:
                seen = hashes.setdefault(event.block_number, event.block_hash)
                if seen != event.block_hash:
                    raise ChainMoved(f"block {event.block_number} changed while it was read")
            new += index.store_events(session, cursor=self.cursor,
                                      events=_with_positions(got.events),
                                      final_block=heights.final, now=now)
            index.save_block_hashes(session, cursor=self.cursor, hashes=hashes)
            next_block, chunk = got.last_block + 1, got.chunk
        return next_block, chunk, new

    def _apply(self, session: Session, now: float) -> tuple[int, list[str]]:
        applied = 0
        for stored in index.unapplied_final(session, cursor=self.cursor, limit=self.apply_limit):
            try:
                with session.begin_nested():
                    for handler in self.dispatch.handlers(stored.event):
                        handler(session, stored.event, now)
                    index.mark_applied(session, event_id=stored.id)
            except Exception as exc:
                # Order matters (a ruling after its dispute): stop here, retry next pass.
                log.exception("handler failed on %s.%s at block %d", stored.event.contract,
                              stored.event.name, stored.event.block_number)
                return applied, [f"{stored.event.contract}.{stored.event.name}: {exc}"]
            applied += 1
        return applied, []


def _hex(value: bytes | None) -> str | None:
    """A block hash as stored, None for a height the chain no longer has."""
    return None if value is None else hex0x(value)


def _with_positions(events: Sequence[ChainEvent]) -> list[tuple[ChainEvent, int]]:
    """Each event with its rank among its transaction's mesh logs (stable across blocks)."""
    seen: dict[bytes, int] = defaultdict(int)
    paired = []
    for event in sorted(events, key=lambda e: e.key):
        paired.append((event, seen[event.tx_hash]))
        seen[event.tx_hash] += 1
    return paired


class IndexedChainView:
    """Free stake, escrows and disputes as the indexed events show them (no chain call).

    `final_only` reads only events past the finality point: what state changes act on. The
    default for stake also counts provisional events, the freshest view for planning."""

    def __init__(self, cursor: str = CURSOR) -> None:
        self.cursor = cursor

    def _events(self, session: Session, subjects: Sequence[str],
                final_only: bool) -> list[ChainEvent]:
        found = {stored.id: stored.event for subject in subjects
                 for stored in index.events(session, cursor=self.cursor, subject=subject,
                                            final_only=final_only)}
        return sorted(found.values(), key=lambda event: event.key)

    def provider_stake(self, session: Session, provider: str, *,
                       final_only: bool = False) -> ProviderStake:
        """`provider` checksummed, as the contracts' events name it."""
        return chain_ledger.provider_stake(
            provider, self._events(session, [subject_key("account", provider)], final_only))

    def escrowed_job(self, session: Session, job_id: bytes, *,
                     final_only: bool = True) -> EscrowedJob | None:
        return chain_ledger.escrowed_job(
            job_id, self._events(session, [subject_key("job", job_id)], final_only))

    def dispute(self, session: Session, dispute_id: int, *,
                final_only: bool = True) -> DisputeRecord | None:
        return chain_ledger.dispute(
            dispute_id, self._events(session, [subject_key("dispute", dispute_id)], final_only))


class IndexedStake:
    """The indexed view as a `StakeReader` (placement's listing): one short session a read."""

    def __init__(self, factory: Callable[[], Session], view: IndexedChainView | None = None
                 ) -> None:
        self._factory = factory
        self._view = view or IndexedChainView()

    def provider_stake(self, provider: str) -> ProviderStake:
        with self._factory() as session:
            return self._view.provider_stake(session, provider)


def reorged_out(session: Session, tx_hashes: Sequence[str]) -> set[str]:
    """Of the orchestrator's sent transactions, those a reorg took off the chain (see
    `db.chain_events.reorged_out`): the outbox broadcasts them again."""
    return index.reorged_out(session, tx_hashes=tx_hashes)


def unindexed(session: Session, tx_hashes: Sequence[str]) -> list[str]:
    """Of `tx_hashes`, those no indexed event (of any status) came from."""
    return index.unindexed(session, tx_hashes=tx_hashes)
