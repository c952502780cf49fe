"""Batch placement: decide in memory (`free_slots.FreeSlots`), commit a batch per transaction,
DB as arbiter. The service's one placement path (`services.placement.PlacementPass` runs it).

Keeping candidate nodes and their free slots in memory makes one decision cost a
walk down a cached ranking rather than a query, and committing many placements in
one transaction amortises the commit. A conflict (another process took a slot or a
task) rolls the batch back; the view is reloaded from the DB and the batch retried.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db.jobs import needs_from_json
from orchestrator.db.placement import (
    PlacementConflict,
    QueuePlace,
    Reservation,
    commit_reservations,
    load_slot_view,
    waiting_tasks,
)
from orchestrator.domain.matching import Candidate, ScoreFn, cheapest_first, rank
from orchestrator.domain.types import NodeSpec
from orchestrator.scheduling.free_slots import FreeSlots, Ranking
from orchestrator.services.pls_placement import Placed, PlacementGate


@dataclass
class BatchResult:
    placed: list[Reservation] = field(default_factory=list)
    unplaceable: int = 0  # tasks with no eligible free slot right now
    held_back: int = 0  # tasks the gate keeps waiting for a faster node
    conflicts: int = 0  # batches rolled back and retried
    decision_s: list[float] = field(default_factory=list)  # per-task decision latency
    wrapped: bool = False  # this batch reached the end of the queue


class Placer:
    """One orchestrator process's view of free GPU slots."""

    def __init__(self, factory: sessionmaker[Session], *, score: ScoreFn = cheapest_first,
                 score_at: Callable[[float], ScoreFn] | None = None, lease_ttl_s: float = 60.0,
                 clock: Callable[[], float] = time.time,
                 gate: PlacementGate | None = None) -> None:
        """`score_at(now)`, when given, supplies a fresh score at every reload; otherwise
        `score` is used as is. `gate` (PLS) replaces the score: it sets each node's usable
        tier at reload, ranks the candidates of each kind of need (the PLS engine's ranking:
        RS floor, collateral covered by free stake, probation, exploration), is told each
        placement's collateral as it is decided (`claim`, so the batch's later decisions
        count it) and locks the batch's collateral in its transaction (`reserved_many`)."""
        self.factory = factory
        self.gate = gate
        self.score = score
        self.score_at = score_at
        self.lease_ttl_s = lease_ttl_s
        self.clock = clock
        self._nodes: dict[str, NodeSpec] = {}
        self._slots: FreeSlots[str] = FreeSlots({}, self._rank)
        self._cursor: QueuePlace | None = None  # the last task looked at; None: the head

    def reload(self) -> None:
        now = self.clock()
        if self.score_at is not None:
            self.score = self.score_at(now)
        with self.factory() as session:
            view = load_slot_view(session)
        gate = self.gate
        self._nodes = {n.node_id: gate.effective_spec(n, now) if gate else n for n in view.nodes}
        self._slots = FreeSlots(
            {n.node_id: sorted(set(range(n.slots)) - view.held.get(n.node_id, set()),
                               reverse=True) for n in view.nodes},
            self._rank, gate=gate, provider_of=lambda node_id: self._nodes[node_id].provider)

    def _rank(self, kind: Hashable, now: float) -> Ranking[str]:
        """Every node of the slot view for a kind of need (its needs as JSON), best first:
        the gate's ranking, or `matching.rank` by the score without one."""
        assert isinstance(kind, str)
        needs = needs_from_json(json.loads(kind))
        free = self._slots.free
        candidates = [Candidate(spec, len(free[spec.node_id])) for spec in self._nodes.values()]
        if self.gate is None:
            return Ranking([c.spec.node_id for c in rank(candidates, needs, self.score)], needs)
        ranked = self.gate.rank(candidates, needs, now)
        return Ranking([node_id for node_id, _ in ranked], needs,
                       [admission for _, admission in ranked])

    def place_batch(self, *, batch_size: int = 500, max_retries: int = 20) -> BatchResult:
        """Place up to `batch_size` waiting tasks (the next ones after the cursor) in one
        transaction; `result.wrapped` says the cursor reached the end of the queue."""
        result = BatchResult()
        if not self._nodes:
            self.reload()
        for _ in range(max_retries):
            session = self.factory()
            try:
                with session.begin():
                    if self.gate is not None:
                        self.gate.drop_claims()  # a rolled-back attempt's claims
                    waiting = waiting_tasks(session, limit=batch_size, after=self._cursor)
                    reservations: list[Reservation] = []
                    placed: list[Placed] = []
                    decisions: list[float] = []
                    for task in waiting:
                        started = time.perf_counter()
                        choice = self._slots.take(
                            task, json.dumps(task.needs, sort_keys=True), self.clock())
                        decisions.append(time.perf_counter() - started)
                        if choice == "held":
                            result.held_back += 1
                            continue
                        if choice is None:
                            result.unplaceable += 1
                            continue
                        assert not isinstance(choice, str)
                        node_id, slot, admission = choice
                        reservations.append(Reservation(task.task_id, task.job_id, node_id,
                                                        slot, task.status))
                        if self.gate is not None and admission is not None:
                            provider = self._nodes[node_id].provider
                            self.gate.claim(provider, admission.collateral)  # seen by the next
                            placed.append(Placed(task.task_id, task.job_id, node_id, provider,
                                                 admission))
                    now = self.clock()
                    commit_reservations(session, reservations=reservations, now=now,
                                        ttl_s=self.lease_ttl_s)
                    if self.gate is not None:
                        self.gate.reserved_many(session, placements=placed, now=now)
                result.placed = reservations
                result.decision_s = decisions
                result.wrapped = len(waiting) < batch_size
                self._cursor = None if result.wrapped else waiting[-1].place
                return result
            except PlacementConflict:
                result.conflicts += 1
                result.unplaceable = 0
                self.reload()
            finally:
                session.close()
        return result

    def place_all(self, *, batch_size: int = 500,
                  renew: Callable[[], bool] | None = None) -> BatchResult:
        """Sweep the whole queue until a full pass places nothing (the service's pass).
        `renew`, when given, is called before every batch after the first (the pass's leader
        lease); False ends the pass there (another process leads placement now)."""
        total = BatchResult()
        self._cursor = None
        placed_this_pass = unplaceable_this_pass = held_this_pass = 0
        first = True
        while True:
            if not first and renew is not None and not renew():
                return total
            first = False
            batch = self.place_batch(batch_size=batch_size)
            total.placed.extend(batch.placed)
            total.conflicts += batch.conflicts
            total.decision_s.extend(batch.decision_s)
            placed_this_pass += len(batch.placed)
            unplaceable_this_pass += batch.unplaceable
            held_this_pass += batch.held_back
            if batch.wrapped:
                if placed_this_pass == 0:
                    total.unplaceable = unplaceable_this_pass
                    total.held_back = held_this_pass
                    return total
                placed_this_pass = unplaceable_this_pass = held_this_pass = 0
