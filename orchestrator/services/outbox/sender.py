"""The outbox sender's pass (`OutboxSender`): resolve the in-flight transactions, then sign the
pending rows, all in the `outbox-sender` lease's transaction; once it commits, count what the
pass did in metrics and broadcast what it signed (what reaches the chain is on disk first).
`build_sender` is the service's periodic job."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client import Counter

from orchestrator.chain.errors import ChainError
from orchestrator.chain.outbox_tx import TRANSIENT_ERRORS, OutboxChain
from orchestrator.chain.sdk import MeshAccount, MeshChain
from orchestrator.chain.tx import SignedTx
from orchestrator.config import Settings
from orchestrator.domain.fees import FeePolicy
from orchestrator.services.outbox.config import GWEI, SenderConfig
from orchestrator.services.outbox.nonces import NonceBook
from orchestrator.services.outbox.resolve import InFlightResolver
from orchestrator.services.outbox.sign import PendingSigner
from orchestrator.services.outbox.tally import Tally
from orchestrator.services.outbox.units import Units
from orchestrator.services.outbox.verdicts import Verdicts
from orchestrator.telemetry.metrics import MeshMetrics

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger("orchestrator.outbox")

LEASE_NAME = "outbox-sender"


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


class OutboxSender:
    """Drains the outbox with one signing key; run `work` under the `outbox-sender` lease."""

    def __init__(self, chain: MeshChain, account: MeshAccount, metrics: MeshMetrics, *,
                 slasher: MeshAccount | None = None, config: SenderConfig | None = None,
                 hooks: FaultHooks | None = None) -> None:
        self.tx = OutboxChain(chain, account, slasher)
        self.metrics = OutboxMetrics(metrics)
        self.config = config or SenderConfig()
        self.hooks = hooks or FaultHooks()
        self.nonces = NonceBook(self.tx, self.config)
        verdicts = Verdicts(self.tx)
        units = Units(self.config, self.nonces)
        self.in_flight = InFlightResolver(self.tx, self.config, self.nonces, verdicts, units)
        self.pending = PendingSigner(self.tx, self.config, self.nonces, verdicts, units)

    def work(self, session: Session, now: float) -> Callable[[], None]:
        """Resolve in-flight transactions and sign new ones in `session`'s transaction;
        returns what to run after it commits (count, then broadcast what was signed)."""
        tally = Tally()
        try:
            if self.in_flight.resolve_in_flight(session, now, tally):
                self.pending.sign_pending(session, now, tally)
        except BaseException:
            self.nonces.resync_all()
            raise
        return partial(self._after_commit, tally)

    def _after_commit(self, tally: Tally) -> None:
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
                self.nonces.resync_all()
                return
            self.hooks.after_broadcast(signed)


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
