"""The placement pass: the one way waiting tasks get nodes, in the service as in `mesh bench
schedule`. Each waiting task, in the queue's order (least laxity first), goes to the node the
PLS gate ranks best among every idle eligible node (`scheduling.placer.Placer`, deciding by
`scheduling.free_slots.FreeSlots`, the rule the churn simulator places by too); the placement
is a reservation the node picks up on its next pull (`work.pull_lease`), and one not started
within the reservation's time to live is released by the sweep (`work.expire_leases`).

A pass runs every `placement_interval_s` on the periodic scheduler (a job submitted, a lease
released, a node back), so a task waits at most that long for a pass once a node is free, and
when an idle node pulls (`idle_pull`) if something changed for it since the last pass began
(`db.placement.changed_for`: it registered, a slot of its came free, it was heard from
after a failed start, a task became ready) or no pass began within `idle_gap_s`; otherwise
the last pass already weighed this node's free slots against the same queue, and the
scheduler's next one places what comes after. One process places at a time:
a pass takes the named leader lease `placement` first (`db.leaders.try_lead`) and renews it
before every batch, ending early if it lost it, so a pass longer than the lease cannot
overlap another replica's; within a process passes run one after another; the partial unique
indexes on live leases stay the last guard against a double lease."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import leaders as leader_db
from orchestrator.db import placement as placement_db
from orchestrator.scheduling.placer import BatchResult, Placer
from orchestrator.services.pls_placement import PlacementGate
from orchestrator.telemetry.metrics import MeshMetrics

log = logging.getLogger("orchestrator")

LEASE_NAME = "placement"
BATCH = 2_000  # tasks decided and committed per transaction of a pass


class PlacementPass:
    """Runs the placement pass for one orchestrator process."""

    def __init__(self, factory: sessionmaker[Session], *, gate: PlacementGate | None,
                 reservation_ttl_s: float, lead_ttl_s: float, idle_gap_s: float,
                 metrics: MeshMetrics, clock: Callable[[], float], holder: str | None = None,
                 batch_size: int = BATCH) -> None:
        """`gate`: PLS (None: plain matching, chain-less development); `lead_ttl_s`: how
        long the `placement` lease outlives this process's last pass or batch (a replica takes
        over within that of this one's death); `idle_gap_s`: an idle pull with nothing changed
        for its node runs a pass only when none began for that long (`idle_pull`)."""
        self.factory = factory
        self.gate = gate
        self.reservation_ttl_s = reservation_ttl_s
        self.lead_ttl_s = lead_ttl_s
        self.idle_gap_s = idle_gap_s
        self.metrics = metrics
        self.clock = clock
        self.holder = holder or uuid.uuid4().hex
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._began: float | None = None  # when this process's latest pass began

    def _lead(self) -> bool:
        """Take or renew the `placement` lease."""
        with self.factory.begin() as session:
            return leader_db.try_lead(session, name=LEASE_NAME, holder=self.holder,
                                      now=self.clock(), ttl_s=self.lead_ttl_s)

    def run(self, *, unless_began_since: float | None = None) -> BatchResult | None:
        """One pass over the whole queue if this process leads placement (takes the lease,
        renewing it between batches); None when another process does, or when a pass began
        after `unless_began_since` (it saw all a caller of that time would have). A
        caller arriving during a pass waits for it, so a pulling node sees what it placed."""
        with self._lock:
            if (unless_began_since is not None and self._began is not None
                    and self._began > unless_began_since):
                return None
            if not self._lead():
                return None
            self._began = self.clock()
            result = Placer(self.factory, gate=self.gate, clock=self.clock,
                            lease_ttl_s=self.reservation_ttl_s).place_all(
                batch_size=self.batch_size, renew=self._lead)
        self.metrics.placements.inc(len(result.placed))  # the wait is counted at the start
        if result.conflicts:
            log.warning("placement pass: %d batches rolled back on a conflict and retried",
                        result.conflicts)
        return result

    def idle_pull(self, session: Session, *, node_id: str) -> None:
        """A node pulled with no reservation waiting: run a pass if one may place work on it
        (see the module docstring), in transactions of the pass's own. `session` is the
        pull's, committed first so the pull reads what the pass wrote."""
        now = self.clock()
        began = self._began
        due = (began is None or now - began >= self.idle_gap_s
               or placement_db.changed_for(session, node_id=node_id, since=began))
        session.commit()
        if due:
            self.run(unless_began_since=now)
