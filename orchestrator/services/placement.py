"""The placement pass: the one way waiting tasks get nodes, in the service as in `mesh bench
schedule`. Each waiting task, in the queue's order (least laxity first), goes to the node the
PLS gate ranks best among every idle eligible node (`scheduling.placer.Placer`, deciding by
`scheduling.free_slots.FreeSlots`, the rule the churn simulator places by too); the placement
is a reservation the node picks up on its next pull (`work.pull_lease`), and one not started
within the reservation's time to live is released by the sweep (`work.expire_leases`).

A pass runs when something may change the answer: a node pulls with no reservation (it is
idle), and every `placement_interval_s` on the periodic scheduler (a job submitted, a lease
released, a node back), so a task waits at most that long for a pass once a node is free.
One process places at a time: a pass takes the named leader lease `placement` first
(`db.leaders.try_lead`), and within a process passes run one after another; the partial
unique indexes on live leases stay the last guard against a double lease."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import leaders as leader_db
from orchestrator.scheduling.placer import BatchResult, Placer
from orchestrator.services.pls_placement import PlacementGate
from orchestrator.telemetry.metrics import MeshMetrics

log = logging.getLogger("orchestrator")

LEASE_NAME = "placement"
BATCH = 2_000  # tasks decided and committed per transaction of a pass


class PlacementPass:
    """Runs the placement pass for one orchestrator process."""

    def __init__(self, factory: sessionmaker[Session], *, gate: PlacementGate | None,
                 reservation_ttl_s: float, lead_ttl_s: float, metrics: MeshMetrics,
                 clock: Callable[[], float], holder: str | None = None) -> None:
        """`gate`: PLS (None: plain matching, chain-less development); `lead_ttl_s`: how
        long the `placement` lease outlives this process's last pass (a replica takes over
        within that of this one's death)."""
        self.factory = factory
        self.gate = gate
        self.reservation_ttl_s = reservation_ttl_s
        self.lead_ttl_s = lead_ttl_s
        self.metrics = metrics
        self.clock = clock
        self.holder = holder or uuid.uuid4().hex
        self._lock = threading.Lock()

    def run(self) -> BatchResult | None:
        """One pass over the whole queue if this process leads placement (takes or renews
        the lease); None when another process does. A caller arriving during a pass waits
        for it, so a pulling node sees what it placed."""
        with self._lock:
            with self.factory.begin() as session:
                if not leader_db.try_lead(session, name=LEASE_NAME, holder=self.holder,
                                          now=self.clock(), ttl_s=self.lead_ttl_s):
                    return None
            result = Placer(self.factory, gate=self.gate, clock=self.clock,
                            lease_ttl_s=self.reservation_ttl_s).place_all(batch_size=BATCH)
        self.metrics.placements.inc(len(result.placed))  # the wait is counted at the start
        if result.conflicts:
            log.warning("placement pass: %d batches rolled back on a conflict and retried",
                        result.conflicts)
        return result
