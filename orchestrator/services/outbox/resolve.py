"""Step 1 of an outbox pass (`InFlightResolver`): the fate of every signed transaction, read
from the receipts of every version signed at its nonce (any of them may be the one mined).
Mined and `confirmations` deep -> confirmed. No receipt -> the newest signed bytes broadcast
again, or, `replace_after_s` after signing or refused as underpriced, replaced at the same
nonce with both fees bumped (persisted before it is broadcast); a gap below it is filled first.
Its nonce spent with no receipt -> its rows are signed afresh. A mined revert is judged on the
culprit row the error names; the other rows of its batch are signed again."""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from orchestrator.chain.errors import OutOfGasError
from orchestrator.chain.outbox_tx import MinedReceipt, OutboxChain, Resent, Revert, named_job
from orchestrator.db import outbox as outbox_db
from orchestrator.db.outbox import OutboxEntry, OutboxStatus, SentVersion
from orchestrator.domain.ids import hex0x, unhex
from orchestrator.services.outbox.config import SenderConfig
from orchestrator.services.outbox.nonces import NonceBook
from orchestrator.services.outbox.tally import Tally
from orchestrator.services.outbox.units import Units
from orchestrator.services.outbox.verdicts import Verdicts, signed_settle

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger("orchestrator.outbox")


class InFlightResolver:
    """Resolves the `sent` rows, one transaction (all rows signed into it) per unit."""

    def __init__(self, tx: OutboxChain, config: SenderConfig, nonces: NonceBook,
                 verdicts: Verdicts, units: Units) -> None:
        self.tx = tx
        self.config = config
        self.nonces = nonces
        self.verdicts = verdicts
        self.units = units

    def resolve_in_flight(self, session: Session, now: float, tally: Tally) -> bool:
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
            if not self.units.run(session, now, tally, rows, OutboxStatus.SENT,
                                  partial(self._resolve, session, now, tx_hash, rows,
                                          latest_block)):
                return False
        return not tally.blocked

    def _resolve(self, session: Session, now: float, tx_hash: str, rows: list[OutboxEntry],
                 latest_block: list[int], tally: Tally) -> None:
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
            if due and not self.nonces.fill_gap(versions[-1], tally) and self._replace(
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
                self.nonces.resync_all()
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
        self.verdicts.confirm(session, now, rows, OutboxStatus.SENT, None, tally,
                              gas_used=receipt.gas_used)

    def _mined(self, hashes: list[str]) -> tuple[str, MinedReceipt] | None:
        """The version that was mined, newest first (at most one can be: one nonce)."""
        for tx_hash in reversed(hashes):
            receipt = self.tx.receipt(tx_hash)
            if receipt is not None:
                return tx_hash, receipt
        return None

    def _replace(self, session: Session, now: float, rows: list[OutboxEntry], raw: str,
                 newest: SentVersion, tally: Tally) -> bool:
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

    def _deep_enough(self, receipt: MinedReceipt, latest_block: list[int]) -> bool:
        if not self.config.confirmations:
            return True
        if not latest_block:
            latest_block.append(self.tx.latest_block())
        return latest_block[0] - receipt.block >= self.config.confirmations

    def _mined_revert(self, session: Session, now: float, rows: list[OutboxEntry],
                      error: Revert, tally: Tally) -> None:
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
                self.verdicts.judge(session, now, row, OutboxStatus.SENT, error, tally)
            return
        innocent = [row.id for row in rows if row.id != culprit.id]
        if innocent:
            outbox_db.return_to_pending(session, action_ids=innocent, now=now,
                                        note=f"batch reverted on row {culprit.id}; re-signed")
        self.verdicts.judge(session, now, culprit, OutboxStatus.SENT, error, tally)

    @staticmethod
    def _named_row(rows: list[OutboxEntry], error: Revert) -> OutboxEntry | None:
        job_id = named_job(error)
        if job_id is None:
            return None
        # Every row here was signed, so its payload decodes.
        return next((row for row in rows if signed_settle(row).job_id == job_id), None)
