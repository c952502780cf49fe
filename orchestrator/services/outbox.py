"""The outbox sender: every chain action the orchestrator queued lands on chain exactly once.

One pass (`OutboxSender.work`) runs under the leader lease `outbox-sender`
(`scheduling.periodic.LeaderRunner`), so two orchestrator processes never both send, and
does all its bookkeeping in that lease's transaction:

1. Resolve `sent` rows by the receipts of every version signed at their nonce (a stuck one
   is replaced, and any version sent may be the one mined). Success with `confirmations`
   blocks on top -> `confirmed`. No receipt -> broadcast the newest signed bytes again (same
   nonce, so at most one version lands; a transaction the node dropped is back in its pool).
   Not mined `replace_after_s` after it was signed -> a replacement at the same nonce with
   both fees up at least 12.5 % (`domain.fees`, within the fee cap), persisted before it is
   broadcast. Waiting above a gap (nonces below it that no transaction holds) -> the gap is
   filled with empty transfers to ourselves. If the node says that nonce is spent and no
   version has a receipt, those bytes can never land and the rows are signed afresh. A mined
   revert is decoded by replaying the call and handled as in 3.
2. Sign `pending` rows in queue order: a contiguous run of `settle` rows becomes ONE
   `settleBatch` (`settleBatchSolo` when every job has one provider; at most
   `settle_batch_size` jobs), a contiguous run of `assign` rows ONE `commitAssignments`
   of their Merkle root (as many); a `prove` row carries the proof built from the assign
   rows its root was committed with; any other kind is one transaction. The
   signed bytes, hash and nonce are written to the rows (status `sent`), and broadcast only
   after the transaction commits: what reaches the chain is always on disk first. New rows
   are signed only when every in-flight transaction is accounted for, so nonces never clash.
   Nonces come from the database (`chain_nonces`), not from the node between passes; after
   any error, and in a newly started process, they are resynced from the chain's pending
   count, never below a nonce one of our rows' transactions holds (in flight, broadcast or
   not, or confirmed: a reorg the index has not seen yet may have taken it off the chain).
3. Reverts (at gas estimation or when mined): an error that proves the action already took
   effect -> `confirmed` with a note (`JobEscrowAlreadySettled` while the escrow shows the
   job Settled; `StakeManagerEpochAlreadyCommitted` when the stored root is the same;
   `JobEscrowAssignmentsAlreadyCommitted`, whose root is the run's). Any
   other revert -> `failed` with the decoded error, counted in `mesh_outbox_failed_total`,
   never resent. Before a settle batch is signed each job's escrow is read: jobs already
   settled are confirmed and left out, and jobs that would revert alone are failed and left
   out, so one bad job cannot block the others.
   A transaction that ran out of gas is no verdict either: its rows are signed again.
   A revert seen while a transaction ahead in the queue is still unmined is no verdict (a
   slash estimated before its lock landed): the pass stops and the next one re-checks.
4. Transient RPC errors undo that unit's changes, count an attempt and back off
   exponentially; rows behind it wait, so actions reach the chain in the order queued.
   A slow node is an RPC error too: the web3 connection's timeout ends the request.

`resend_reorged` is the indexer's way back in: confirmed rows whose mined transaction a reorg
removed go back in flight, and step 1 sends their bytes again; their jobs go back to settling,
and a receipt no longer settles them (`settlement.mark_settled(final=False)`): the re-sent
settlement's final event does.

Rows are read through the one codec (`domain.chain_actions`); a row it refuses fails as
`InvalidPayload`. A confirmed settle hands its job to `services.settlement.mark_settled`, the
one owner of settling -> settled. Every chain call is `chain.outbox_tx`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client import Counter

from orchestrator.chain.errors import ChainError, ContractError, OutOfGasError, RevertError
from orchestrator.chain.outbox_tx import (
    TRANSIENT_ERRORS,
    MinedReceipt,
    OutboxChain,
    Resent,
    Revert,
    error_name,
    named_job,
)
from orchestrator.chain.sdk import MeshAccount, MeshChain
from orchestrator.chain.tx import SignedTx, TransactionSender
from orchestrator.config import Settings
from orchestrator.db import outbox as outbox_db
from orchestrator.db.outbox import OutboxEntry, OutboxStatus, SentVersion
from orchestrator.domain.chain_actions import (
    AssignCollateral,
    ChainAction,
    CommitEpoch,
    PayloadError,
    ProveAssignment,
    SettleJob,
    decode,
)
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.fees import FeePolicy, Fees
from orchestrator.domain.ids import JobId, hex0x, unhex
from orchestrator.services import chain_events, pls_chain, settlement
from orchestrator.telemetry.metrics import MeshMetrics

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger("orchestrator.outbox")

LEASE_NAME = "outbox-sender"
BATCHED_KINDS = (SettleJob.kind, AssignCollateral.kind)  # a run of one of these: one transaction


GWEI = 10**9


@dataclass(frozen=True, slots=True)
class SenderConfig:
    confirmations: int = 0  # blocks mined on top of the receipt's block before `confirmed`
    replace_after_s: float = 60.0  # unmined this long after signing: replace with a fee bump
    fees: FeePolicy = field(default_factory=lambda: FeePolicy(
        priority_fee_wei=GWEI, max_fee_cap_wei=500 * GWEI))
    settle_batch_size: int = 50  # jobs per settleBatch or assignment root (settle: ~15k gas/job)
    max_rows: int = 500  # rows looked at per phase and pass
    backoff_base_s: float = 1.0
    backoff_max_s: float = 300.0


def _nothing(_: SignedTx) -> None:
    return None


@dataclass(frozen=True, slots=True)
class FaultHooks:
    """Crash points for tests, called around each broadcast once the pass has committed."""

    before_broadcast: Callable[[SignedTx], None] = _nothing
    after_broadcast: Callable[[SignedTx], None] = _nothing


class OutboxMetrics:
    """Sender counters, registered in the app's registry beside its other metrics."""

    def __init__(self, metrics: MeshMetrics) -> None:
        registry = metrics.registry
        self.settlement_lag = metrics.settlement_lag
        self.sent = Counter("mesh_outbox_transactions_total", "Transactions signed and persisted",
                            ["kind"], registry=registry)
        self.confirmed = Counter("mesh_outbox_confirmed_total", "Outbox actions confirmed",
                                 ["kind"], registry=registry)
        self.replaced = Counter("mesh_outbox_replacements_total",
                                "Stuck transactions replaced at their nonce with higher fees",
                                ["kind"], registry=registry)
        self.gap_fillers = Counter("mesh_outbox_gap_fillers_total",
                                   "Empty transfers sent to fill a nonce gap", registry=registry)
        self.failed = Counter("mesh_outbox_failed_total",
                              "Outbox actions that reverted for good (never resent)",
                              ["kind", "error"], registry=registry)
        self.transient = Counter("mesh_outbox_transient_errors_total",
                                 "RPC failures the sender backed off from", registry=registry)


@dataclass
class _Tally:
    """What one unit of a pass did; counted in metrics only once its writes are kept."""

    signed: list[tuple[str, SignedTx]] = field(default_factory=list)
    replaced: list[tuple[str, SignedTx]] = field(default_factory=list)
    gap_fillers: int = 0
    nonce_checked: set[str] = field(default_factory=set)  # keys whose nonce met the chain
    confirmed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    settlement_lags: list[float] = field(default_factory=list)
    transient: int = 0
    blocked: bool = False  # an in-flight transaction is unaccounted for: sign nothing new
    # A transaction ahead in the queue is not mined yet, so a revert seen now may only mean
    # "its effect is missing" (a slash estimated before its lock landed): not a verdict.
    unmined_ahead: bool = False

    def merge(self, other: _Tally) -> None:
        self.signed += other.signed
        self.replaced += other.replaced
        self.gap_fillers += other.gap_fillers
        self.nonce_checked |= other.nonce_checked
        self.confirmed += other.confirmed
        self.failed += other.failed
        self.settlement_lags += other.settlement_lags
        self.transient += other.transient
        self.blocked = self.blocked or other.blocked
        self.unmined_ahead = self.unmined_ahead or other.unmined_ahead


class _WaitForChain(Exception):
    """A revert seen while earlier transactions are unmined: judge it once they have landed."""


class OutboxSender:
    """Drains the outbox with one signing key; run `work` under the `outbox-sender` lease."""

    def __init__(self, chain: MeshChain, account: MeshAccount, metrics: MeshMetrics, *,
                 slasher: MeshAccount | None = None, config: SenderConfig | None = None,
                 hooks: FaultHooks | None = None) -> None:
        self.tx = OutboxChain(chain, account, slasher)
        self.metrics = OutboxMetrics(metrics)
        self.config = config or SenderConfig()
        self.hooks = hooks or FaultHooks()
        # Keys whose stored nonce is re-read from the chain before the next signing: all of
        # them in a new process, and again after any error.
        self._resync: set[str] = set()
        self._resync_all()

    def _resync_all(self) -> None:
        self._resync |= {self.tx.account.address, self.tx.slasher.address}

    # ------------------------------------------------------------------ pass

    def work(self, session: Session, now: float) -> Callable[[], None]:
        """Resolve in-flight transactions and sign new ones in `session`'s transaction;
        returns what to run after it commits (count, then broadcast what was signed)."""
        tally = _Tally()
        try:
            if self._resolve_in_flight(session, now, tally):
                self._sign_pending(session, now, tally)
        except BaseException:
            self._resync_all()
            raise
        return partial(self._after_commit, tally)

    def _after_commit(self, tally: _Tally) -> None:
        for kind in tally.confirmed:
            self.metrics.confirmed.labels(kind).inc()
        for kind, error in tally.failed:
            self.metrics.failed.labels(kind, error).inc()
        for lag in tally.settlement_lags:
            self.metrics.settlement_lag.observe(lag)
        self.metrics.transient.inc(tally.transient)
        for kind, _ in tally.signed:
            self.metrics.sent.labels(kind).inc()
        for kind, _ in tally.replaced:
            self.metrics.replaced.labels(kind).inc()
        self.metrics.gap_fillers.inc(tally.gap_fillers)
        for _, signed in tally.replaced + tally.signed:
            self.hooks.before_broadcast(signed)
            try:
                self.tx.broadcast(signed.raw)
            except TRANSIENT_ERRORS as exc:
                # Persisted already: the next pass finds no receipt and sends the same bytes.
                log.warning("broadcast of %s failed (%s); resent next pass", signed.tx_hash,
                            type(exc).__name__)
                self.metrics.transient.inc()
                self._resync_all()
                return
            self.hooks.after_broadcast(signed)

    def _unit(self, session: Session, now: float, tally: _Tally, rows: Sequence[OutboxEntry],
              expected: OutboxStatus, action: Callable[[_Tally], object]) -> bool:
        """Run one unit (an in-flight transaction, a batch, an action) in a savepoint.

        A transient RPC error undoes the unit's writes, backs its rows off and returns False:
        the pass stops there, so later rows never overtake earlier ones.
        """
        unit = _Tally(unmined_ahead=tally.unmined_ahead, nonce_checked=set(tally.nonce_checked))
        try:
            with session.begin_nested():
                action(unit)
        except _WaitForChain:
            return False
        except TRANSIENT_ERRORS as exc:
            self._resync_all()
            attempts = max(row.attempts for row in rows) + 1
            delay = min(self.config.backoff_base_s * 2 ** (attempts - 1),
                        self.config.backoff_max_s)
            # Only the error's type: RPC messages may carry the endpoint URL and its API key.
            outbox_db.defer(session, action_ids=[row.id for row in rows], expected=expected,
                            now=now, retry_at=now + delay,
                            note=f"transient {type(exc).__name__}; attempt {attempts}")
            log.warning("outbox rows %s: %s, retrying in %.0f s", [row.id for row in rows],
                        type(exc).__name__, delay)
            tally.transient += 1
            return False
        tally.merge(unit)
        return True

    # ------------------------------------------------------------------ phase 1: in flight

    def _resolve_in_flight(self, session: Session, now: float, tally: _Tally) -> bool:
        """Settle the fate of every signed transaction; True when new ones may be signed."""
        by_hash: dict[str, list[OutboxEntry]] = {}
        for entry in outbox_db.in_flight_actions(session):  # ids ascending: queue order
            by_hash.setdefault(entry.tx_hash or "", []).append(entry)
        latest_block: list[int] = []  # read once per pass, only if a receipt needs it
        for tx_hash, rows in by_hash.items():
            if any(row.next_attempt_at is not None and row.next_attempt_at > now
                   for row in rows):
                tally.blocked = True
                continue
            if not self._unit(session, now, tally, rows, OutboxStatus.SENT,
                              partial(self._resolve, session, now, tx_hash, rows, latest_block)):
                return False
        return not tally.blocked

    def _resolve(self, session: Session, now: float, tx_hash: str, rows: list[OutboxEntry],
                 latest_block: list[int], tally: _Tally) -> None:
        """One signed transaction: confirm, judge its revert, resend or replace it, or re-sign
        its rows."""
        ids = [row.id for row in rows]
        versions = outbox_db.versions(session, tx_hash)
        hashes = [version.tx_hash for version in versions] or [tx_hash]
        mined = self._mined(hashes)
        if mined is None:
            raw = next((row.raw_tx for row in rows if row.raw_tx), None)
            if raw is None:
                log.error("outbox rows %s: signed bytes of %s are missing", ids, tx_hash)
                tally.blocked = True
                return
            due = bool(versions) and now - versions[-1].signed_at >= self.config.replace_after_s
            if due and not self._fill_gap(versions[-1], tally) and self._replace(
                    session, now, rows, raw, versions[-1], tally):
                return
            resent = self.tx.rebroadcast(raw)
            if resent is Resent.UNDERPRICED:
                if versions and self._replace(session, now, rows, raw, versions[-1], tally):
                    return
                tally.blocked = True  # out of the pool until the base fee falls: wait
                return
            if resent is Resent.IN_POOL:
                tally.unmined_ahead = True
                return  # in the node's pool again (or still): its nonce is accounted for
            mined = self._mined(hashes)
            if mined is None:
                outbox_db.return_to_pending(
                    session, action_ids=ids, now=now,
                    note=f"nonce {rows[0].nonce} was spent by another transaction; re-signed")
                self._resync_all()
                return
        mined_hash, receipt = mined
        if mined_hash != tx_hash:
            outbox_db.record_mined_version(session, action_ids=ids, tx_hash=mined_hash, now=now)
        if not receipt.succeeded:
            self._mined_revert(session, now, rows, self.tx.mined_revert(mined_hash, receipt),
                               tally)
            return
        if not self._deep_enough(receipt, latest_block):
            return  # mined; its nonce is spent, so new transactions may follow
        self._confirm(session, now, rows, OutboxStatus.SENT, None, tally,
                      gas_used=receipt.gas_used)

    def _mined(self, hashes: list[str]) -> tuple[str, MinedReceipt] | None:
        """The version that was mined, newest first (at most one can be: one nonce)."""
        for tx_hash in reversed(hashes):
            receipt = self.tx.receipt(tx_hash)
            if receipt is not None:
                return tx_hash, receipt
        return None

    def _replace(self, session: Session, now: float, rows: list[OutboxEntry], raw: str,
                 newest: SentVersion, tally: _Tally) -> bool:
        """Persist a fee-bumped version of a stuck transaction at its nonce (sent after
        commit); False when the fee cap leaves no room for a bump a node would accept."""
        sender = self.tx.sender_of(newest.sender)
        fees = self.config.fees.replacement(newest.fees, sender.next_base_fee())
        if fees is None:
            log.warning("outbox rows %s: %s is stuck and the fee cap leaves no room for a "
                        "replacement", [row.id for row in rows], newest.tx_hash)
            return False
        signed = sender.replace(unhex(raw), fees)
        outbox_db.record_replacement(session, action_ids=[row.id for row in rows],
                                     tx_hash=signed.tx_hash, sender=newest.sender,
                                     nonce=newest.nonce, fees=fees,
                                     raw_tx=hex0x(signed.raw), now=now)
        log.info("outbox rows %s: %s unmined %.0f s after signing, replaced by %s (max fee "
                 "%d, tip %d wei)", [row.id for row in rows], newest.tx_hash,
                 now - newest.signed_at, signed.tx_hash, fees.max_fee_per_gas,
                 fees.max_priority_fee_per_gas)
        tally.replaced.append((rows[0].kind, signed))
        tally.unmined_ahead = True
        return True

    def _fill_gap(self, newest: SentVersion, tally: _Tally) -> bool:
        """Nonces below a waiting transaction's that neither the chain nor the node's pool
        holds (rows ahead are resolved first, so none of ours is among them): use each with
        an empty transfer to ourselves, sent at once (it moves nothing: nothing to persist).
        True when there was a gap: the transaction can land now, with no bump."""
        sender = self.tx.sender_of(newest.sender)
        pending = sender.nonce_count("pending")
        if pending >= newest.nonce:
            return False
        fees = self.config.fees.initial(sender.next_base_fee())
        for gap in range(pending, newest.nonce):
            sender.broadcast(sender.filler(gap, fees).raw)
            tally.gap_fillers += 1
        log.warning("nonce gap %d..%d of %s below outbox transaction %s: filled", pending,
                    newest.nonce - 1, sender.address, newest.tx_hash)
        return True

    def _deep_enough(self, receipt: MinedReceipt, latest_block: list[int]) -> bool:
        if not self.config.confirmations:
            return True
        if not latest_block:
            latest_block.append(self.tx.latest_block())
        return latest_block[0] - receipt.block >= self.config.confirmations

    def _mined_revert(self, session: Session, now: float, rows: list[OutboxEntry],
                      error: Revert, tally: _Tally) -> None:
        """Blame the job a batch's error names; the rest were never applied and are signed
        again after a fresh escrow check. An error naming no job fails the whole batch. A
        transaction that ran out of gas applied nothing and spent its nonce: its rows are
        signed again, with an estimate made on the state they now meet."""
        if isinstance(error, OutOfGasError):
            outbox_db.return_to_pending(session, action_ids=[row.id for row in rows], now=now,
                                        note=f"{error}; signed again with a fresh estimate")
            log.warning("outbox rows %s: %s; signing again", [row.id for row in rows], error)
            return
        culprit = rows[0] if len(rows) == 1 else self._named_row(rows, error)
        if culprit is None:
            for row in rows:
                self._judge(session, now, row, OutboxStatus.SENT, error, tally)
            return
        innocent = [row.id for row in rows if row.id != culprit.id]
        if innocent:
            outbox_db.return_to_pending(session, action_ids=innocent, now=now,
                                        note=f"batch reverted on row {culprit.id}; re-signed")
        self._judge(session, now, culprit, OutboxStatus.SENT, error, tally)

    @staticmethod
    def _named_row(rows: list[OutboxEntry], error: Revert) -> OutboxEntry | None:
        job_id = named_job(error)
        if job_id is None:
            return None
        # Every row here was signed, so its payload decodes.
        return next((row for row in rows if _settle(row).job_id == job_id), None)

    # ------------------------------------------------------------------ phase 2: sign

    def _sign_pending(self, session: Session, now: float, tally: _Tally) -> None:
        entries = outbox_db.pending_actions(session, limit=self.config.max_rows)
        index = 0
        while index < len(entries):
            run = self._next_run(entries, index, now)
            if not run:
                return  # the oldest row is backing off: nothing may overtake it
            index += len(run)
            action: Callable[[_Tally], object]
            if run[0].kind == SettleJob.kind:
                action = partial(self._sign_settles, session, now, run)
            elif run[0].kind == AssignCollateral.kind:
                action = partial(self._sign_assigns, session, now, run)
            else:
                action = partial(self._sign_one, session, now, run[0])
            if not self._unit(session, now, tally, run, OutboxStatus.PENDING, action):
                return

    def _next_run(self, entries: list[OutboxEntry], start: int,
                  now: float) -> list[OutboxEntry]:
        """The due rows from `start` that go into one transaction: a run of settles, a run of
        assigns, or one row."""
        run: list[OutboxEntry] = []
        for entry in entries[start:]:
            if entry.next_attempt_at is not None and entry.next_attempt_at > now:
                break
            if run and (entry.kind != run[0].kind or run[0].kind not in BATCHED_KINDS
                        or len(run) >= self.config.settle_batch_size):
                break
            run.append(entry)
        return run

    def _decoded(self, session: Session, now: float, entry: OutboxEntry,
                 tally: _Tally) -> ChainAction | None:
        """The row's action through the codec; a row it refuses fails, never to be sent."""
        try:
            return decode(entry.kind, entry.payload)
        except PayloadError as exc:
            self._fail(session, now, entry, OutboxStatus.PENDING, "InvalidPayload",
                       f"invalid payload: {exc}", tally)
            return None

    def _sign_settles(self, session: Session, now: float, run: list[OutboxEntry],
                      tally: _Tally) -> None:
        live: list[tuple[OutboxEntry, SettleJob]] = []
        batched: set[bytes] = set()
        for entry in run:
            action = self._decoded(session, now, entry, tally)
            if not isinstance(action, SettleJob):
                continue
            status = self.tx.escrow_status(action.job_id)
            if status is EscrowStatus.SETTLED:
                self._confirm(session, now, [entry], OutboxStatus.PENDING,
                              "already settled on chain", tally)
            elif status is not EscrowStatus.FUNDED:
                self._fail(session, now, entry, OutboxStatus.PENDING, "EscrowNotFunded",
                           f"escrow job is {status.name}", tally)
            elif action.job_id not in batched:  # a duplicate waits for the first to land
                batched.add(action.job_id)
                live.append((entry, action))
        while live:
            try:
                signed = self.tx.sign_settlements(
                    [action for _, action in live], fees=self._fees(self.tx.account.sender),
                    nonce=self._nonce(session, now, self.tx.account.sender, tally))
            except (ContractError, RevertError) as error:
                live = self._without_reverting(session, now, live, error, tally)
                continue
            self._persist(session, now, [entry for entry, _ in live], SettleJob.kind, signed,
                          tally)
            return

    def _without_reverting(self, session: Session, now: float,
                           live: list[tuple[OutboxEntry, SettleJob]], batch_error: Revert,
                           tally: _Tally) -> list[tuple[OutboxEntry, SettleJob]]:
        """Judge the jobs that revert on their own; the others go on in the batch."""
        if tally.unmined_ahead:
            raise _WaitForChain
        if len(live) == 1:
            self._judge(session, now, live[0][0], OutboxStatus.PENDING, batch_error, tally)
            return []
        errors = [(entry, self.tx.simulate_settlement(action)) for entry, action in live]
        reverting = [(entry, error) for entry, error in errors if error is not None]
        if not reverting:  # only the batch as a whole fails (gas?): no row can be blamed
            reverting = [(entry, batch_error) for entry, _ in live]
        for entry, error in reverting:
            self._judge(session, now, entry, OutboxStatus.PENDING, error, tally)
        judged = {entry.id for entry, _ in reverting}
        return [(entry, action) for entry, action in live if entry.id not in judged]

    def _sign_assigns(self, session: Session, now: float, run: list[OutboxEntry],
                      tally: _Tally) -> None:
        """One root over the run; a revert is judged for every row (they share the root)."""
        live = [(entry, action) for entry in run
                if isinstance(action := self._decoded(session, now, entry, tally),
                              AssignCollateral)]
        if not live:
            return
        try:
            signed = self.tx.sign_assignments(
                [action for _, action in live], fees=self._fees(self.tx.account.sender),
                nonce=self._nonce(session, now, self.tx.account.sender, tally))
        except (ContractError, RevertError) as error:
            if tally.unmined_ahead:
                raise _WaitForChain from error
            for entry, _ in live:
                self._judge(session, now, entry, OutboxStatus.PENDING, error, tally)
            return
        self._persist(session, now, [entry for entry, _ in live], AssignCollateral.kind, signed,
                      tally)

    def _sign_one(self, session: Session, now: float, entry: OutboxEntry, tally: _Tally) -> None:
        action = self._decoded(session, now, entry, tally)
        if action is None:
            return
        sender = self.tx.signer(action.kind).sender
        try:
            if isinstance(action, ProveAssignment):
                batch = outbox_db.assignment_batch(session, job_id=action.job_id,
                                                   provider=action.provider)
                if batch is None:
                    # Its root may be on the way (unmined, or short of confirmations).
                    if tally.unmined_ahead or outbox_db.in_flight_actions(session):
                        raise _WaitForChain
                    self._fail(session, now, entry, OutboxStatus.PENDING, "NoCommittedAssignment",
                               "no confirmed assign row for this job and provider", tally)
                    return
                signed = self.tx.sign_proof(action, batch, fees=self._fees(sender),
                                            nonce=self._nonce(session, now, sender, tally))
            else:
                signed = self.tx.sign(action, fees=self._fees(sender),
                                      nonce=self._nonce(session, now, sender, tally))
        except (ContractError, RevertError) as error:
            if tally.unmined_ahead:
                raise _WaitForChain from error
            self._judge(session, now, entry, OutboxStatus.PENDING, error, tally)
            return
        self._persist(session, now, [entry], entry.kind, signed, tally)

    def _nonce(self, session: Session, now: float, sender: TransactionSender,
               tally: _Tally) -> int:
        """The key's next nonce from the database. Once a pass the chain's pending count may
        raise it (another process used the key); after an error (or a restart) it is resynced
        to that count, but never below the nonces our rows' transactions hold, sent or not,
        confirmed or failed: a nonce is never given to a second action (`used_nonce_floor`)."""
        stored = outbox_db.next_nonce(session, address=sender.address)
        if stored is not None and sender.address in tally.nonce_checked:
            return stored
        pending = sender.nonce_count("pending")
        if stored is None or sender.address in self._resync:
            nonce = max(pending, outbox_db.used_nonce_floor(session, address=sender.address))
        else:
            nonce = max(stored, pending)
        if stored is not None and stored != nonce:
            log.warning("nonce of %s resynced from the chain: %d -> %d", sender.address,
                        stored, nonce)
        outbox_db.set_next_nonce(session, address=sender.address, nonce=nonce, now=now)
        self._resync.discard(sender.address)
        tally.nonce_checked.add(sender.address)
        return nonce

    def _fees(self, sender: TransactionSender) -> Fees:
        return self.config.fees.initial(sender.next_base_fee())

    def _persist(self, session: Session, now: float, rows: list[OutboxEntry], kind: str,
                 signed: SignedTx, tally: _Tally) -> None:
        outbox_db.record_signed(session, action_ids=[row.id for row in rows],
                                tx_hash=signed.tx_hash, sender=self.tx.signer(kind).address,
                                nonce=signed.nonce, fees=signed.fees,
                                raw_tx=hex0x(signed.raw), now=now)
        tally.signed.append((kind, signed))
        tally.unmined_ahead = True

    # ------------------------------------------------------------------ verdicts

    def _judge(self, session: Session, now: float, entry: OutboxEntry, expected: OutboxStatus,
               error: Revert, tally: _Tally) -> None:
        """A revert: confirmed if it proves the action already took effect, else failed."""
        note = self._already_done(entry, error)
        if note is not None:
            self._confirm(session, now, [entry], expected, note, tally)
        else:
            self._fail(session, now, entry, expected, error_name(error), str(error), tally)

    def _already_done(self, entry: OutboxEntry, error: Revert) -> str | None:
        if not isinstance(error, ContractError):
            return None
        action = decode(entry.kind, entry.payload)  # judged rows decoded before they were sent
        if (isinstance(action, SettleJob) and error.name == "JobEscrowAlreadySettled"
                and self.tx.escrow_status(action.job_id) is EscrowStatus.SETTLED):
            return "already settled on chain"
        if (isinstance(action, CommitEpoch) and error.name == "StakeManagerEpochAlreadyCommitted"
                and self.tx.epoch_root(action.epoch) == action.root):
            return f"epoch {action.epoch} was already committed with this root"
        if (isinstance(action, AssignCollateral)
                and error.name == "JobEscrowAssignmentsAlreadyCommitted"):
            return "this assignment root was already committed"
        return None

    def _confirm(self, session: Session, now: float, rows: list[OutboxEntry],
                 expected: OutboxStatus, note: str | None, tally: _Tally, *,
                 gas_used: int | None = None) -> None:
        """The rows took effect. A settle is confirmed only on the chain's word, its mined
        receipt (a settle batch settles every job in it or reverts) or an escrow read showing
        the job Settled, and its job goes to `settlement.mark_settled` with that escrow.
        `gas_used`: our mined transaction's (None when the chain showed it done otherwise)."""
        outbox_db.record_confirmed(session, action_ids=[row.id for row in rows],
                                   expected=expected, now=now, note=note, gas_used=gas_used)
        for row in rows:
            tally.confirmed.append(row.kind)
            if row.kind != SettleJob.kind:
                continue
            lag = settlement.mark_settled(
                session, job_id=JobId.of(_settle(row).job_id), escrow=EscrowStatus.SETTLED,
                now=now, reason=f"settlement confirmed on chain ({note or row.tx_hash})",
                final=False)
            if lag is not None:
                tally.settlement_lags.append(lag)

    def _fail(self, session: Session, now: float, entry: OutboxEntry, expected: OutboxStatus,
              error_name: str, note: str, tally: _Tally) -> None:
        outbox_db.record_failed(session, action_ids=[entry.id], expected=expected, now=now,
                                note=note)
        tally.failed.append((entry.kind, error_name))
        log.error("outbox row %d (%s) failed: %s", entry.id, entry.kind, note)


def resend_after_reorg(session: Session, *, now: float, window_s: float = 86_400.0) -> list[int]:
    """After the indexer saw a reorg: the rows confirmed within `window_s` whose transaction
    the index saw and then lost go back in flight (`resend_reorged`)."""
    recent = outbox_db.confirmed_tx_hashes(session, since=now - window_s)
    gone = chain_events.reorged_out(session, recent) if recent else set()
    return resend_reorged(session, tx_hashes=sorted(gone), now=now) if gone else []


class UnindexedCheck:
    """The reorg no dropped event tells of: a transaction confirmed on its receipt and taken
    off the chain before the index read its block (the index lags the outbox, or the service
    was down), so no pass finds a fork that touches it. After each index pass, the rows
    confirmed within `window_s` whose transaction the index has not seen are asked about on
    the chain: one with no receipt is gone and is sent again (`resend_reorged`). One mined at
    or below the final height is not asked about again (a deeper reorg drops its event)."""

    def __init__(self, window_s: float = 900.0) -> None:
        self.window_s = window_s
        self._final: dict[str, float] = {}  # tx hash -> when it was found final

    def run(self, session: Session, *, now: float, final_block: int,
            mined_at: Callable[[Sequence[str]], dict[str, int]]) -> list[int]:
        since = now - self.window_s
        self._final = {tx: at for tx, at in self._final.items() if at >= since}
        recent = [tx for tx in outbox_db.confirmed_tx_hashes(session, since=since)
                  if tx.lower() not in self._final]
        unseen = chain_events.unindexed(session, recent) if recent else []
        if not unseen:
            return []
        mined = mined_at(unseen)
        self._final.update({tx: now for tx, block in mined.items() if block <= final_block})
        gone = [tx for tx in unseen if tx not in mined]
        return resend_reorged(session, tx_hashes=gone, now=now) if gone else []


def resend_reorged(session: Session, *, tx_hashes: Sequence[str], now: float) -> list[int]:
    """The indexer's entry point: confirmed rows whose mined transaction a reorg removed
    go back in flight (their bytes are kept), so the sender's next pass sends them again or,
    if their nonce went to another transaction, signs them afresh. Returns the rows' ids."""
    ids = outbox_db.reorged_rows(session, tx_hashes=tx_hashes)
    if ids:
        outbox_db.reopen_reorged(session, action_ids=ids, now=now,
                                 note="its transaction was reorged out; sent again")
        log.warning("outbox rows %s: transaction reorged out, sending again", ids)
        reopened = [row for row in outbox_db.in_flight_actions(session) if row.id in ids]
        settlement.unsettle_reorged(session, now=now, job_ids=[
            JobId.of(_settle(row).job_id) for row in reopened if row.kind == SettleJob.kind])
        pls_chain.uncommit_reorged(session, epochs=[
            int(row.payload["epoch"]) for row in reopened if row.kind == CommitEpoch.kind])
    return ids


def _settle(row: OutboxEntry) -> SettleJob:
    """A settle row that was already decoded once (signed or confirmed): it decodes again."""
    action = decode(row.kind, row.payload)
    assert isinstance(action, SettleJob)
    return action


def build_sender(settings: Settings, metrics: MeshMetrics) -> Callable[[Session, float], object]:
    """The periodic work for `settings`: connects to the chain on its first run, so a service
    whose node is not up yet still starts (and retries every tick)."""
    if settings.orchestrator_key is None:
        raise ChainError("the outbox sender needs MESH_ORCHESTRATOR_KEY")
    key, slasher_key = settings.orchestrator_key, settings.slasher_key
    config = SenderConfig(
        confirmations=settings.outbox_confirmations,
        settle_batch_size=settings.outbox_settle_batch,
        replace_after_s=settings.outbox_replace_after_s,
        fees=FeePolicy(priority_fee_wei=int(settings.outbox_priority_fee_gwei * GWEI),
                       max_fee_cap_wei=int(settings.outbox_max_fee_gwei * GWEI)))
    senders: list[OutboxSender] = []

    def work(session: Session, now: float) -> object:
        if not senders:
            chain = MeshChain.from_settings(settings)
            slasher = (chain.account(slasher_key.get_secret_value())
                       if slasher_key is not None else None)
            senders.append(OutboxSender(chain, chain.account(key.get_secret_value()), metrics,
                                        slasher=slasher, config=config))
        return senders[0].work(session, now)

    return work
