"""Step 2 of an outbox pass (`PendingSigner`): the `pending` rows signed in queue order, each
unit one transaction. A run of `settle` rows is ONE `settleBatch` of the jobs whose escrow is
funded (jobs already settled are confirmed, unfunded ones failed, and jobs that would revert
alone judged, all left out), a run of `assign` rows ONE `commitAssignments` of their Merkle
root, a `prove` row carries the proof built from the assign rows its root was committed with,
and any other kind is one transaction. The signed bytes, hash and nonce are written to the rows
(status `sent`) and broadcast only after the pass commits; a revert seen while a transaction
ahead is unmined ends the pass (`WaitForChain`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from orchestrator.chain.errors import ContractError, RevertError
from orchestrator.chain.outbox_tx import OutboxChain, Revert
from orchestrator.chain.tx import SignedTx, TransactionSender
from orchestrator.db import outbox as outbox_db
from orchestrator.db.outbox import OutboxEntry, OutboxStatus
from orchestrator.domain.chain_actions import (
    AssignCollateral,
    ChainAction,
    PayloadError,
    ProveAssignment,
    SettleJob,
    decode,
)
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.fees import Fees
from orchestrator.domain.ids import hex0x
from orchestrator.services.outbox.config import SenderConfig
from orchestrator.services.outbox.nonces import NonceBook
from orchestrator.services.outbox.tally import Tally
from orchestrator.services.outbox.units import Units, WaitForChain
from orchestrator.services.outbox.verdicts import Verdicts

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

BATCHED_KINDS = (SettleJob.kind, AssignCollateral.kind)  # a run of one of these: one transaction


class PendingSigner:
    """Signs the `pending` rows, one transaction per unit, once every in-flight one is
    accounted for (`InFlightResolver.resolve_in_flight`), so nonces never clash."""

    def __init__(self, tx: OutboxChain, config: SenderConfig, nonces: NonceBook,
                 verdicts: Verdicts, units: Units) -> None:
        self.tx = tx
        self.config = config
        self.nonces = nonces
        self.verdicts = verdicts
        self.units = units

    def sign_pending(self, session: Session, now: float, tally: Tally) -> None:
        entries = outbox_db.pending_actions(session, limit=self.config.max_rows)
        index = 0
        while index < len(entries):
            run = self._next_run(entries, index, now)
            if not run:
                return  # the oldest row is backing off: nothing may overtake it
            index += len(run)
            action: Callable[[Tally], object]
            if run[0].kind == SettleJob.kind:
                action = partial(self._sign_settles, session, now, run)
            elif run[0].kind == AssignCollateral.kind:
                action = partial(self._sign_assigns, session, now, run)
            else:
                action = partial(self._sign_one, session, now, run[0])
            if not self.units.run(session, now, tally, run, OutboxStatus.PENDING, action):
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
                 tally: Tally) -> ChainAction | None:
        """The row's action through the codec; a row it refuses fails, never to be sent."""
        try:
            return decode(entry.kind, entry.payload)
        except PayloadError as exc:
            self.verdicts.fail(session, now, entry, OutboxStatus.PENDING, "InvalidPayload",
                               f"invalid payload: {exc}", tally)
            return None

    def _sign_settles(self, session: Session, now: float, run: list[OutboxEntry],
                      tally: Tally) -> None:
        live: list[tuple[OutboxEntry, SettleJob]] = []
        batched: set[bytes] = set()
        for entry in run:
            action = self._decoded(session, now, entry, tally)
            if not isinstance(action, SettleJob):
                continue
            status = self.tx.escrow_status(action.job_id)
            if status is EscrowStatus.SETTLED:
                self.verdicts.confirm(session, now, [entry], OutboxStatus.PENDING,
                                      "already settled on chain", tally)
            elif status is not EscrowStatus.FUNDED:
                self.verdicts.fail(session, now, entry, OutboxStatus.PENDING, "EscrowNotFunded",
                                   f"escrow job is {status.name}", tally)
            elif action.job_id not in batched:  # a duplicate waits for the first to land
                batched.add(action.job_id)
                live.append((entry, action))
        while live:
            try:
                signed = self.tx.sign_settlements(
                    [action for _, action in live], fees=self._fees(self.tx.account.sender),
                    nonce=self.nonces.next_nonce(session, now, self.tx.account.sender, tally))
            except (ContractError, RevertError) as error:
                live = self._without_reverting(session, now, live, error, tally)
                continue
            self._persist(session, now, [entry for entry, _ in live], SettleJob.kind, signed,
                          tally)
            return

    def _without_reverting(self, session: Session, now: float,
                           live: list[tuple[OutboxEntry, SettleJob]], batch_error: Revert,
                           tally: Tally) -> list[tuple[OutboxEntry, SettleJob]]:
        """Judge the jobs that revert on their own; the others go on in the batch."""
        if tally.unmined_ahead:
            raise WaitForChain
        if len(live) == 1:
            self.verdicts.judge(session, now, live[0][0], OutboxStatus.PENDING, batch_error,
                                tally)
            return []
        errors = [(entry, self.tx.simulate_settlement(action)) for entry, action in live]
        reverting = [(entry, error) for entry, error in errors if error is not None]
        if not reverting:  # only the batch as a whole fails (gas?): no row can be blamed
            reverting = [(entry, batch_error) for entry, _ in live]
        for entry, error in reverting:
            self.verdicts.judge(session, now, entry, OutboxStatus.PENDING, error, tally)
        judged = {entry.id for entry, _ in reverting}
        return [(entry, action) for entry, action in live if entry.id not in judged]

    def _sign_assigns(self, session: Session, now: float, run: list[OutboxEntry],
                      tally: Tally) -> None:
        """One root over the run; a revert is judged for every row (they share the root)."""
        live = [(entry, action) for entry in run
                if isinstance(action := self._decoded(session, now, entry, tally),
                              AssignCollateral)]
        if not live:
            return
        try:
            signed = self.tx.sign_assignments(
                [action for _, action in live], fees=self._fees(self.tx.account.sender),
                nonce=self.nonces.next_nonce(session, now, self.tx.account.sender, tally))
        except (ContractError, RevertError) as error:
            if tally.unmined_ahead:
                raise WaitForChain from error
            for entry, _ in live:
                self.verdicts.judge(session, now, entry, OutboxStatus.PENDING, error, tally)
            return
        self._persist(session, now, [entry for entry, _ in live], AssignCollateral.kind, signed,
                      tally)

    def _sign_one(self, session: Session, now: float, entry: OutboxEntry, tally: Tally) -> None:
        action = self._decoded(session, now, entry, tally)
        if action is None:
            return
        sender = self.tx.signer(action.kind).sender
        try:
            if isinstance(action, ProveAssignment):
                batch = outbox_db.assignment_batch(session, job_id=action.job_id,
                                                   provider=action.provider,
                                                   placement=action.placement)
                if batch is None:
                    # Its root may be on the way (unmined, or short of confirmations).
                    if tally.unmined_ahead or outbox_db.in_flight_actions(session):
                        raise WaitForChain
                    self.verdicts.fail(session, now, entry, OutboxStatus.PENDING,
                                       "NoCommittedAssignment",
                                       "no confirmed assign row for this placement", tally)
                    return
                signed = self.tx.sign_proof(action, batch, fees=self._fees(sender),
                                            nonce=self.nonces.next_nonce(session, now, sender,
                                                                         tally))
            else:
                signed = self.tx.sign(action, fees=self._fees(sender),
                                      nonce=self.nonces.next_nonce(session, now, sender, tally))
        except (ContractError, RevertError) as error:
            if tally.unmined_ahead:
                raise WaitForChain from error
            self.verdicts.judge(session, now, entry, OutboxStatus.PENDING, error, tally)
            return
        self._persist(session, now, [entry], entry.kind, signed, tally)

    def _fees(self, sender: TransactionSender) -> Fees:
        return self.config.fees.initial(sender.next_base_fee())

    def _persist(self, session: Session, now: float, rows: list[OutboxEntry], kind: str,
                 signed: SignedTx, tally: Tally) -> None:
        outbox_db.record_signed(session, action_ids=[row.id for row in rows],
                                tx_hash=signed.tx_hash, sender=self.tx.signer(kind).address,
                                nonce=signed.nonce, fees=signed.fees,
                                raw_tx=hex0x(signed.raw), now=now)
        tally.signed.append((kind, signed))
        tally.unmined_ahead = True
