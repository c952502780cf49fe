"""Data access for Predictive Latency Staking: the durable side of the service's reliability
book (sessions, samples, outcomes), PoPW challenges and verdicts, collateral locks, slash
decisions and epoch score roots. Keyword-only, one caller transaction each."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Engine, Table, delete, event, func, insert, select, update
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    CollateralLock,
    Lease,
    Node,
    NodeSession,
    PendingProbe,
    PlsLogCursor,
    PlsLogHead,
    PlsObservationRecord,
    PopwChallengeRecord,
    PopwVerdictRecord,
    ProgressWithdrawal,
    ScoreEpoch,
    ScoreLeaf,
    SlashRecord,
    Task,
    TaskOutcomeRecord,
    TelemetrySample,
)
from orchestrator.domain.ids import hex0x, unhex

# ---------------------------------------------------------------- sessions and samples


def open_session(session: Session, *, node_id: str, at: float) -> bool:
    """Open a session for the node unless one is open; True when this opened it."""
    if session.scalars(select(NodeSession.id).where(NodeSession.node_id == node_id,
                                                    NodeSession.ended_at.is_(None))).first():
        return False
    session.add(NodeSession(node_id=node_id, started_at=at))
    return True


def close_session(session: Session, *, node_id: str, at: float, abrupt: bool,
                  started_before: float | None = None) -> bool:
    """End the node's open session (only if it started before `started_before`, when given);
    False when it had none."""
    query = update(NodeSession).where(NodeSession.node_id == node_id,
                                      NodeSession.ended_at.is_(None))
    if started_before is not None:
        query = query.where(NodeSession.started_at < started_before)
    result = session.execute(query.values(ended_at=at, abrupt=abrupt))
    return bool(getattr(result, "rowcount", 0))


def censor_session(session: Session, *, node_id: str, ended_at: float) -> bool:
    """Count the node's session that ended abruptly at `ended_at` as censored (like a drain):
    its process rendered on through the silence. False when there is no such session."""
    result = session.execute(update(NodeSession)
                             .where(NodeSession.node_id == node_id,
                                    NodeSession.ended_at == ended_at,
                                    NodeSession.abrupt.is_(True))
                             .values(abrupt=False))
    return bool(getattr(result, "rowcount", 0))


def all_sessions(session: Session) -> list[NodeSession]:
    return list(session.scalars(select(NodeSession).order_by(NodeSession.started_at,
                                                             NodeSession.id)))


def add_samples(session: Session, *, rows: Sequence[tuple[str, str, float, float]]) -> None:
    """Bulk insert (node_id, metric, at, value) telemetry rows."""
    if rows:
        session.execute(insert(TelemetrySample), [
            {"node_id": node_id, "metric": metric, "at": at, "value": value}
            for node_id, metric, at, value in rows])


def add_probe(session: Session, *, node_id: str, nonce: bytes, sent_at: float) -> None:
    session.add(PendingProbe(nonce=nonce.hex(), node_id=node_id, sent_at=sent_at))


def take_probe(session: Session, *, node_id: str, nonce: bytes) -> float | None:
    """The probe's send time, removed (None: unknown, expired or echoed already); of two
    echoes at once, one gets it."""
    return session.execute(delete(PendingProbe)
                           .where(PendingProbe.nonce == nonce.hex(),
                                  PendingProbe.node_id == node_id)
                           .returning(PendingProbe.sent_at)
                           .execution_options(synchronize_session=False)).scalar_one_or_none()


def take_expired_probes(session: Session, *, sent_before: float,
                        node_ids: Sequence[str] | None = None) -> list[tuple[str, float]]:
    """(node, sent) of the probes sent before `sent_before` (of `node_ids`, or any node),
    removed: each is lost, and counted once however many replicas look."""
    query = delete(PendingProbe).where(PendingProbe.sent_at < sent_before)
    if node_ids is not None:
        query = query.where(PendingProbe.node_id.in_(list(node_ids)))
    rows = session.execute(query.returning(PendingProbe.node_id, PendingProbe.sent_at)
                           .execution_options(synchronize_session=False))
    return sorted((str(node_id), float(sent)) for node_id, sent in rows)


def samples_since(session: Session, *, since: float,
                  metrics: Iterable[str] | None = None) -> list[TelemetrySample]:
    query = select(TelemetrySample).where(TelemetrySample.at >= since)
    if metrics is not None:
        query = query.where(TelemetrySample.metric.in_(list(metrics)))
    return list(session.scalars(query.order_by(TelemetrySample.at, TelemetrySample.id)))


def add_outcome(session: Session, *, node_id: str, task_id: int, outcome: str,
                at: float) -> None:
    session.add(TaskOutcomeRecord(node_id=node_id, task_id=task_id, outcome=outcome, at=at))


def all_outcomes(session: Session) -> list[TaskOutcomeRecord]:
    return list(session.scalars(select(TaskOutcomeRecord).order_by(TaskOutcomeRecord.id)))


def all_nodes(session: Session) -> list[Node]:
    return list(session.scalars(select(Node).order_by(Node.id)))


# ---------------------------------------------------------------- PoPW


def add_challenge(session: Session, *, nonce: bytes, node_id: str, gpu_class: str,
                  issued_at: float, deadline: float) -> None:
    session.add(PopwChallengeRecord(nonce=hex0x(nonce), node_id=node_id, gpu_class=gpu_class,
                                    issued_at=issued_at, deadline=deadline))


def get_challenge(session: Session, *, nonce: bytes) -> PopwChallengeRecord | None:
    return session.get(PopwChallengeRecord, hex0x(nonce))


def consume_challenge(session: Session, *, nonce: bytes, at: float) -> bool:
    """Mark the nonce used; False when another request consumed it first (a replay)."""
    result = session.execute(update(PopwChallengeRecord)
                             .where(PopwChallengeRecord.nonce == hex0x(nonce),
                                    PopwChallengeRecord.consumed_at.is_(None))
                             .values(consumed_at=at))
    return bool(getattr(result, "rowcount", 0))


def add_verdict(session: Session, *, node_id: str, nonce: bytes, passed: bool, tier: int,
                decided_at: float, expires_at: float, reasons: list[str]) -> None:
    session.add(PopwVerdictRecord(node_id=node_id, nonce=hex0x(nonce), passed=passed, tier=tier,
                                  decided_at=decided_at, expires_at=expires_at, reasons=reasons))


def latest_verdict(session: Session, *, node_id: str) -> PopwVerdictRecord | None:
    return session.scalars(select(PopwVerdictRecord).where(PopwVerdictRecord.node_id == node_id)
                           .order_by(PopwVerdictRecord.id.desc())).first()


def latest_verdicts(session: Session) -> list[tuple[PopwVerdictRecord, str | None]]:
    """Each node's newest verdict with the GPU class its challenge was issued for."""
    newest = (select(func.max(PopwVerdictRecord.id)).group_by(PopwVerdictRecord.node_id)
              .scalar_subquery())
    rows = session.execute(
        select(PopwVerdictRecord, PopwChallengeRecord.gpu_class)
        .outerjoin(PopwChallengeRecord, PopwChallengeRecord.nonce == PopwVerdictRecord.nonce)
        .where(PopwVerdictRecord.id.in_(newest)))
    return [(record, gpu_class) for record, gpu_class in rows]


# ---------------------------------------------------------------- collateral and slashes


def task_attempts(session: Session, *, task_ids: Sequence[int]) -> dict[int, int]:
    """How many times each task was placed (the attempt a new lock belongs to), by task id."""
    return {task_id: int(attempts or 0) for task_id, attempts in session.execute(
        select(Task.id, Task.attempts).where(Task.id.in_(task_ids)))}


@dataclass(frozen=True, slots=True)
class NewLock:
    """The collateral of one placement (its task's attempt), with the raw RS it was made at."""

    task_id: int
    attempt: int
    job_id: str
    node_id: str
    provider: str
    amount: int
    raw_rs: float | None


def add_locks(session: Session, *, locks: Sequence[NewLock], at: float) -> None:
    """Record these placements' collateral locks, in one statement (Core: no ORM bookkeeping
    per row)."""
    if locks:
        session.execute(insert(cast(Table, CollateralLock.__table__)), [
            {"task_id": lock.task_id, "attempt": lock.attempt, "job_id": lock.job_id,
             "node_id": lock.node_id, "provider": lock.provider, "amount": lock.amount,
             "raw_rs": lock.raw_rs, "created_at": at} for lock in locks])


def open_collateral(session: Session, *, provider: str) -> int:
    """Collateral of the provider's placements whose attempt has not ended: what its standing
    reservation must cover (the chain holds only the reservation, not the assignments)."""
    # Summed here: token amounts are stored as decimal text (uint256 does not fit SQL integers).
    return sum(session.scalars(select(CollateralLock.amount).where(
        CollateralLock.provider == provider, CollateralLock.ended_at.is_(None))))


@dataclass(frozen=True, slots=True)
class LockEnd:
    """The latest lock of a task on a node, at the end of its attempt."""

    job_id: str
    amount: int
    raw_rs: float | None  # None when the attempt had already ended (nothing new to learn)


def end_lock(session: Session, *, task_id: int, node_id: str, at: float, finished: bool
             ) -> LockEnd | None:
    """Record how the attempt behind the task's latest lock on this node ended (the first
    report wins); None when no collateral was locked for it."""
    lock = latest_lock(session, task_id=task_id, node_id=node_id)
    if lock is None:
        return None
    if lock.ended_at is not None:
        return LockEnd(lock.job_id, lock.amount, None)
    lock.ended_at, lock.finished = at, finished
    return LockEnd(lock.job_id, lock.amount, lock.raw_rs)


def ended_attempts(session: Session) -> list[tuple[float, bool]]:
    """(raw RS, finished) of every ended attempt placed at a known raw RS, in the order the
    attempts ended (ties: by task, then attempt, as the service reports them)."""
    return [(float(raw or 0.0), bool(finished)) for raw, finished in session.execute(
        select(CollateralLock.raw_rs, CollateralLock.finished)
        .where(CollateralLock.ended_at.is_not(None), CollateralLock.raw_rs.is_not(None))
        .order_by(CollateralLock.ended_at, CollateralLock.task_id, CollateralLock.attempt))]


def lock_count(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(CollateralLock)) or 0)


def latest_lock(session: Session, *, task_id: int, node_id: str) -> CollateralLock | None:
    return session.scalars(select(CollateralLock)
                           .where(CollateralLock.task_id == task_id,
                                  CollateralLock.node_id == node_id)
                           .order_by(CollateralLock.attempt.desc())).first()


def add_slash(session: Session, *, slash_id: bytes, node_id: str, provider: str, reason: int,
              amount: int, evidence: bytes, task_id: int | None, decided_at: float,
              detail: str) -> bool:
    """Store a slash decision once; False when its id is already known."""
    if session.get(SlashRecord, hex0x(slash_id)) is not None:
        return False
    session.add(SlashRecord(slash_id=hex0x(slash_id), node_id=node_id, provider=provider,
                            reason=reason, amount=amount, evidence=hex0x(evidence),
                            task_id=task_id, decided_at=decided_at, detail=detail))
    return True


def slash_on_chain(session: Session, *, chain_slash_id: int) -> SlashRecord | None:
    """The decision the chain's slash `chain_slash_id` carried out, once the indexer matched it."""
    return session.scalars(select(SlashRecord).where(
        SlashRecord.chain_slash_id == chain_slash_id)).first()


def unmatched_slashes(session: Session, *, provider: str, reason: int,
                      evidence: str) -> list[SlashRecord]:
    """Decisions of (provider, reason) no on-chain slash carried out yet whose evidence is
    `evidence`, or (a score slash) whose epoch's committed leaf of the provider carries it as
    its telemetry digest; oldest first."""
    return list(session.scalars(
        select(SlashRecord)
        .outerjoin(ScoreLeaf, (ScoreLeaf.epoch == SlashRecord.epoch)
                   & (ScoreLeaf.provider == SlashRecord.provider))
        .where(SlashRecord.provider == provider, SlashRecord.reason == reason,
               SlashRecord.chain_slash_id.is_(None),
               (SlashRecord.evidence == evidence) | (ScoreLeaf.telemetry_digest == evidence))
        .order_by(SlashRecord.decided_at, SlashRecord.slash_id)))


def set_slash_on_chain(record: SlashRecord, *, chain_slash_id: int, tx_hash: str) -> None:
    record.chain_slash_id, record.chain_tx = chain_slash_id, tx_hash


def set_slash_released(record: SlashRecord, *, tx_hash: str) -> None:
    record.released_tx = tx_hash


def nodes_of_provider(session: Session, *, provider: str) -> list[Node]:
    return list(session.scalars(select(Node).where(Node.provider == provider)
                                .order_by(Node.id)))


def task_slashed(session: Session, *, task_id: int, node_id: str, reason: int) -> bool:
    """Whether a slash of this reason was already decided for this node's work on the task
    (by any replica). Another node failing the same task is another slash."""
    return session.scalars(select(SlashRecord.slash_id).where(
        SlashRecord.task_id == task_id, SlashRecord.node_id == node_id,
        SlashRecord.reason == reason)).first() is not None


def unassigned_low_score_slashes(session: Session, *, reason: int) -> list[SlashRecord]:
    return list(session.scalars(select(SlashRecord).where(SlashRecord.reason == reason,
                                                          SlashRecord.epoch.is_(None))))


def assign_epoch(session: Session, *, records: Iterable[SlashRecord], epoch: int) -> None:
    """The epoch whose committed root carries these low-score slashes."""
    for record in records:
        record.epoch = epoch


def set_node_tier(session: Session, *, node_id: str, tier: int) -> str | None:
    """Store the node's tier; its provider, or None for a node we do not know."""
    node = session.get(Node, node_id)
    if node is None:
        return None
    node.tier = tier
    return node.provider


# ---------------------------------------------------------------- epochs


@dataclass(frozen=True, slots=True)
class LeafRow:
    provider: str
    node_id: str
    score_bps: int
    telemetry_digest: bytes


def get_epoch(session: Session, *, epoch: int) -> ScoreEpoch | None:
    return session.get(ScoreEpoch, epoch)


def add_epoch(session: Session, *, epoch: int, root: bytes, closed_at: float,
              leaves: Sequence[LeafRow]) -> None:
    session.add(ScoreEpoch(epoch=epoch, root=hex0x(root), closed_at=closed_at))
    session.flush()
    session.add_all([ScoreLeaf(epoch=epoch, provider=leaf.provider, node_id=leaf.node_id,
                               score_bps=leaf.score_bps,
                               telemetry_digest=hex0x(leaf.telemetry_digest))
                     for leaf in leaves])


def set_epoch_committed(row: ScoreEpoch, *, tx_hash: str | None, block: int | None) -> None:
    """Where the epoch's commitment is final on chain (None: it is not, or no longer)."""
    row.committed_tx, row.committed_block = tx_hash, block


def uncommitted_epochs(session: Session, *, limit: int) -> list[ScoreEpoch]:
    """The newest epochs whose commitment is not final on chain."""
    return list(session.scalars(select(ScoreEpoch).where(ScoreEpoch.committed_tx.is_(None))
                                .order_by(ScoreEpoch.epoch.desc()).limit(limit)))


def epoch_leaves(session: Session, *, epoch: int) -> list[LeafRow]:
    return [LeafRow(leaf.provider, leaf.node_id, leaf.score_bps, unhex(leaf.telemetry_digest))
            for leaf in session.scalars(select(ScoreLeaf).where(ScoreLeaf.epoch == epoch)
                                        .order_by(ScoreLeaf.provider))]


# ---------------------------------------------------------------- the observation log

LOG_HEAD = 1  # the one row of `pls_log_head`
_PENDING = "pls_log_pending"  # session.info: (kind, body) rows this transaction will log
_COMMITTED = "pls_log_committed"  # session.info: callbacks to run once they are durable

LogRow = tuple[int, str, dict[str, Any]]  # (id, kind, body)


def log_observations(session: Session, *, rows: Sequence[tuple[str, dict[str, Any]]],
                     committed: Callable[[Engine], None]) -> None:
    """Queue (kind, body) rows for the observation log. They are written as the session's
    transaction commits, after everything else it wrote, so the head row is the last lock
    the transaction takes and it is held only through the commit; `committed(engine)` runs
    once the commit is done. A rollback drops them."""
    if not rows:
        return
    if _PENDING not in session.info:
        session.info[_PENDING], session.info[_COMMITTED] = [], []
        event.listen(session, "before_commit", _write_pending)
        event.listen(session, "after_commit", _after_commit)
        event.listen(session, "after_rollback", _drop_pending)
    # Each row with the (innermost) transaction it was logged in: a savepoint that rolls back
    # (an indexer handler that failed) drops its own rows and keeps the others.
    within = session.get_nested_transaction() or session.get_transaction()
    session.info[_PENDING].extend((within, row) for row in rows)
    if committed not in session.info[_COMMITTED]:
        session.info[_COMMITTED].append(committed)


def _write_pending(session: Session) -> None:
    if session.in_nested_transaction():  # a savepoint released: the rows wait for the commit
        return
    pending: list[tuple[Any, tuple[str, dict[str, Any]]]] = session.info[_PENDING]
    rows = [row for _, row in pending]
    pending.clear()
    if not rows:
        return
    last = _take_ids(session, len(rows))
    first = last - len(rows) + 1
    session.execute(insert(PlsObservationRecord), [
        {"id": first + offset, "kind": kind, "body": body}
        for offset, (kind, body) in enumerate(rows)])


def _take_ids(session: Session, count: int) -> int:
    """Advance the head by `count` (row-locking it until commit); the new last id."""
    moved = session.execute(update(PlsLogHead).where(PlsLogHead.id == LOG_HEAD)
                            .values(last_id=PlsLogHead.last_id + count))
    if not getattr(moved, "rowcount", 0):  # a wiped table: the head restarts past the log
        start = int(session.scalar(select(func.coalesce(func.max(PlsObservationRecord.id), 0)))
                    or 0)
        session.add(PlsLogHead(id=LOG_HEAD, last_id=start + count))
        session.flush()
    return int(session.scalar(select(PlsLogHead.last_id).where(PlsLogHead.id == LOG_HEAD))
               or 0)


def _after_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return
    callbacks: list[Callable[[Engine], None]] = session.info[_COMMITTED]
    session.info[_COMMITTED] = []
    bind = session.get_bind()
    for callback in callbacks:
        callback(bind)  # type: ignore[arg-type]


def _drop_pending(session: Session) -> None:
    savepoint = session.get_nested_transaction()
    if savepoint is None:
        session.info[_PENDING].clear()
        session.info[_COMMITTED] = []
        return
    session.info[_PENDING][:] = [(within, row) for within, row in session.info[_PENDING]
                                 if not _inside(within, savepoint)]


def _inside(transaction: Any, savepoint: Any) -> bool:
    """Whether `transaction` is `savepoint` or one begun inside it."""
    while transaction is not None:
        if transaction is savepoint:
            return True
        transaction = transaction.parent
    return False


def log_head(session: Session) -> int:
    """The last id handed out (0 for an empty log)."""
    head = session.scalar(select(PlsLogHead.last_id).where(PlsLogHead.id == LOG_HEAD))
    if head is not None:
        return int(head)
    return int(session.scalar(select(func.coalesce(func.max(PlsObservationRecord.id), 0))) or 0)


def observations_after(source: Session | Engine, *, after: int, limit: int) -> list[LogRow]:
    """Up to `limit` log rows past id `after`, in id order (read in `source`, or in a
    short read of its own from an engine)."""
    query = (select(PlsObservationRecord.id, PlsObservationRecord.kind,
                    PlsObservationRecord.body)
             .where(PlsObservationRecord.id > after).order_by(PlsObservationRecord.id)
             .limit(limit))
    if isinstance(source, Session):
        return [(int(i), str(k), dict(b)) for i, k, b in source.execute(query)]
    with Session(source) as reader:
        return [(int(i), str(k), dict(b)) for i, k, b in reader.execute(query)]


def consistent_reads(session: Session) -> None:
    """Make every read of this (not yet begun) session see one snapshot: REPEATABLE READ on
    PostgreSQL (where each statement has its own snapshot otherwise). SQLite runs one
    process, and nothing writes while it rebuilds."""
    if session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def save_cursor(session: Session, *, replica: str, position: int, now: float) -> None:
    moved = session.execute(update(PlsLogCursor).where(PlsLogCursor.replica == replica)
                            .values(position=position, seen_at=now))
    if not getattr(moved, "rowcount", 0):
        session.add(PlsLogCursor(replica=replica, position=position, seen_at=now))


def prune_observations(session: Session, *, live_since: float, forget_before: float) -> int:
    """Delete the log rows every replica seen since `live_since` has applied (a replica
    silent longer rebuilds from the tables when it finds the gap), and forget cursors not
    seen since `forget_before`; how many rows went."""
    session.execute(delete(PlsLogCursor).where(PlsLogCursor.seen_at < forget_before))
    low = session.scalar(select(func.min(PlsLogCursor.position))
                         .where(PlsLogCursor.seen_at >= live_since))
    if low is None:
        return 0
    result = session.execute(delete(PlsObservationRecord).where(PlsObservationRecord.id <= low))
    return int(getattr(result, "rowcount", 0) or 0)


def log_size(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(PlsObservationRecord)) or 0)


# ---------------------------------------------------------------- continuity across a cut


SILENCE_RELEASES = frozenset({"node dead", "lease lapsed"})


def revoked_lease(session: Session, *, task_id: int, node_id: str) -> Lease | None:
    """The node's latest lease on the task that the sweep revoked for the node's silence: at
    the DEAD verdict, or when a lease held through the lone grace lapsed. A lease the node
    took on the task after it came back (the placement pass may hand it the task again)
    does not hide it: the proof answers the abandonment, whatever was placed since."""
    return session.scalars(select(Lease).where(Lease.task_id == task_id,
                                               Lease.node_id == node_id,
                                               Lease.release_reason.in_(SILENCE_RELEASES))
                           .order_by(Lease.id.desc()).limit(1)).first()


def add_withdrawal(session: Session, *, task_id: int, node_id: str, session_key: str,
                   departed_at: float, withdrawn_at: float, chunks: Sequence[bytes]) -> None:
    session.add(ProgressWithdrawal(task_id=task_id, node_id=node_id, session_key=session_key,
                                   departed_at=departed_at, withdrawn_at=withdrawn_at,
                                   chunks=sorted(c.hex() for c in chunks)))
    session.flush()


def withdrawal_for(session: Session, *, task_id: int) -> ProgressWithdrawal | None:
    return session.get(ProgressWithdrawal, task_id)


def all_withdrawals(session: Session) -> list[ProgressWithdrawal]:
    return list(session.scalars(select(ProgressWithdrawal)
                                .order_by(ProgressWithdrawal.withdrawn_at)))
