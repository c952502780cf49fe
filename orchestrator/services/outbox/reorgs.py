"""The indexer's way back into the outbox: confirmed rows whose mined transaction a reorg took
off the chain go back in flight (`resend_reorged`), found through the index's dropped events
(`resend_after_reorg`) or, for a transaction the index never saw, by asking the chain
(`UnindexedCheck`). The sender's next pass sends their bytes again; their jobs go back to
settling and their epochs to uncommitted."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from orchestrator.db import outbox as outbox_db
from orchestrator.domain.chain_actions import CommitEpoch, SettleJob
from orchestrator.domain.ids import JobId
from orchestrator.services import chain_events, pls_chain, settlement
from orchestrator.services.outbox.verdicts import signed_settle

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger("orchestrator.outbox")


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
            JobId.of(signed_settle(row).job_id) for row in reopened if row.kind == SettleJob.kind])
        pls_chain.uncommit_reorged(session, epochs=[
            int(row.payload["epoch"]) for row in reopened if row.kind == CommitEpoch.kind])
    return ids
