"""Nonce bookkeeping of the outbox's keys (`NonceBook`): each key's next nonce is the
database's (`chain_nonces`), not the node's between passes; the chain's pending count may raise
it once a pass, and after any error (and in a newly started process) it is resynced to that
count, never below a nonce one of our rows' transactions holds (`used_nonce_floor`). Nonces
below a waiting transaction's that nothing holds (a gap) are filled with empty transfers."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from orchestrator.chain.outbox_tx import OutboxChain
from orchestrator.chain.tx import TransactionSender
from orchestrator.db import outbox as outbox_db
from orchestrator.db.outbox import SentVersion
from orchestrator.services.outbox.config import SenderConfig
from orchestrator.services.outbox.tally import Tally

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger("orchestrator.outbox")


class NonceBook:
    """The next nonce of the orchestrator's key and the slasher's."""

    def __init__(self, tx: OutboxChain, config: SenderConfig) -> None:
        self.tx = tx
        self.config = config
        # Keys whose stored nonce is re-read from the chain before the next signing: all of
        # them in a new process, and again after any error.
        self._resync: set[str] = set()
        self.resync_all()

    def resync_all(self) -> None:
        """Re-read every key's nonce from the chain before its next signing (after an error)."""
        self._resync |= {self.tx.account.address, self.tx.slasher.address}

    def next_nonce(self, session: Session, now: float, sender: TransactionSender,
                   tally: Tally) -> int:
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

    def fill_gap(self, newest: SentVersion, tally: Tally) -> bool:
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
