"""What an outcome means for outbox rows and their jobs (`Verdicts`): rows that took effect are
confirmed (a settle's job goes to `settlement.mark_settled`), and a revert is judged: confirmed
with a note when it proves the action already took effect (`JobEscrowAlreadySettled` while the
escrow shows the job Settled, `StakeManagerEpochAlreadyCommitted` with the same stored root,
`JobEscrowAssignmentsAlreadyCommitted`), else failed with the decoded error, never resent."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from orchestrator.chain.errors import ContractError
from orchestrator.chain.outbox_tx import OutboxChain, Revert, error_name
from orchestrator.db import outbox as outbox_db
from orchestrator.db.outbox import OutboxEntry, OutboxStatus
from orchestrator.domain.chain_actions import AssignCollateral, CommitEpoch, SettleJob, decode
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.ids import JobId
from orchestrator.services import settlement
from orchestrator.services.outbox.tally import Tally

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger("orchestrator.outbox")


class Verdicts:
    """Confirms and fails rows, reading the chain where a revert may prove an action done."""

    def __init__(self, tx: OutboxChain) -> None:
        self.tx = tx

    def judge(self, session: Session, now: float, entry: OutboxEntry, expected: OutboxStatus,
              error: Revert, tally: Tally) -> None:
        """A revert: confirmed if it proves the action already took effect, else failed."""
        note = self._already_done(entry, error)
        if note is not None:
            self.confirm(session, now, [entry], expected, note, tally)
        else:
            self.fail(session, now, entry, expected, error_name(error), str(error), tally)

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

    def confirm(self, session: Session, now: float, rows: list[OutboxEntry],
                expected: OutboxStatus, note: str | None, tally: Tally, *,
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
                session, job_id=JobId.of(signed_settle(row).job_id), escrow=EscrowStatus.SETTLED,
                now=now, reason=f"settlement confirmed on chain ({note or row.tx_hash})",
                final=False)
            if lag is not None:
                tally.settlement_lags.append(lag)

    def fail(self, session: Session, now: float, entry: OutboxEntry, expected: OutboxStatus,
             error_name: str, note: str, tally: Tally) -> None:
        """The row's action can never succeed: failed, counted by `error_name`, never resent."""
        outbox_db.record_failed(session, action_ids=[entry.id], expected=expected, now=now,
                                note=note)
        tally.failed.append((entry.kind, error_name))
        log.error("outbox row %d (%s) failed: %s", entry.id, entry.kind, note)


def signed_settle(row: OutboxEntry) -> SettleJob:
    """A settle row that was already decoded once (signed or confirmed): it decodes again."""
    action = decode(row.kind, row.payload)
    assert isinstance(action, SettleJob)
    return action
