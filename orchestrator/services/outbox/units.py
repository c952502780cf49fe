"""The units of an outbox pass: each in-flight transaction, and each run of pending rows that
goes into one transaction, runs in a savepoint of the pass's transaction (`Units.run`). A
transient RPC error undoes that unit's writes and backs its rows off, and the pass stops there,
so rows behind it wait and actions reach the chain in the order queued. A unit may also end
the pass with `WaitForChain`: what it saw is no verdict until the chain has caught up."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from orchestrator.chain.outbox_tx import TRANSIENT_ERRORS
from orchestrator.db import outbox as outbox_db
from orchestrator.db.outbox import OutboxEntry, OutboxStatus
from orchestrator.services.outbox.config import SenderConfig
from orchestrator.services.outbox.nonces import NonceBook
from orchestrator.services.outbox.tally import Tally

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger("orchestrator.outbox")


class WaitForChain(Exception):
    """A revert seen while earlier transactions are unmined: judge it once they have landed."""


class Units:
    """Runs a pass's units, each in its own savepoint."""

    def __init__(self, config: SenderConfig, nonces: NonceBook) -> None:
        self.config = config
        self.nonces = nonces

    def run(self, session: Session, now: float, tally: Tally, rows: Sequence[OutboxEntry],
            expected: OutboxStatus, action: Callable[[Tally], object]) -> bool:
        """Run one unit (an in-flight transaction, a batch, an action) in a savepoint.

        A transient RPC error undoes the unit's writes, backs its rows off and returns False:
        the pass stops there, so later rows never overtake earlier ones.
        """
        unit = Tally(unmined_ahead=tally.unmined_ahead, nonce_checked=set(tally.nonce_checked))
        try:
            with session.begin_nested():
                action(unit)
        except WaitForChain:
            return False
        except TRANSIENT_ERRORS as exc:
            self.nonces.resync_all()
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
