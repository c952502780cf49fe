"""PLS placement gates: the tier work may use a node for, the engine's ranking of candidates
(RS floor, free stake covering the risk-priced collateral, probation, exploration) for the
placement pass (`services.placement`), the collateral lock in the placement's transaction,
and each lease's Young/Daly checkpoint interval."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from sqlalchemy.orm import Session

from orchestrator.db import outbox
from orchestrator.db import pls as store
from orchestrator.db.placement import PlacementConflict
from orchestrator.domain.chain_actions import AssignCollateral, ReserveCollateral
from orchestrator.domain.ids import unhex
from orchestrator.domain.matching import Candidate, eligible
from orchestrator.domain.merkle import placement_id
from orchestrator.domain.reliability import RsComponents
from orchestrator.domain.types import NodeSpec, TaskNeeds, Tier
from orchestrator.services.pls_state import PlsState, StakeUnavailable

log = logging.getLogger("orchestrator.pls")


@dataclass(frozen=True, slots=True)
class Admission:
    """A placement the gate allows: the node's RS for the task, the collateral to lock, the
    raw RS (before recalibration) the placement is made at, the node's verified render speed
    and that of the fastest node busy now that could take the task (0: none), from which
    the gate tells whether the task should rather wait (`PlacementGate.held_back`)."""

    rs: float
    collateral: int
    raw_rs: float | None = None
    speed: float = 1.0
    faster_speed: float = 0.0


class QueuedTask(Protocol):
    """A waiting task as the faster-node wait reads it (`db.placement.WaitingTask`, or a
    simulated task)."""

    @property
    def queued_at(self) -> float:
        """Since when it waits for a node (its arrival, or its requeue)."""
        ...

    def deadline(self, needs: TaskNeeds) -> float:
        """Its job's deadline."""
        ...


class PlacementGate(Protocol):
    """Predictive Latency Staking admission, applied by the placement pass (implemented by
    `PlsPlacement`, below: `services.pls.PlsService.placement`)."""

    def effective_spec(self, spec: NodeSpec, now: float) -> NodeSpec:
        """The node with the tier work may use now."""
        ...

    def rank(self, candidates: Sequence[Candidate], needs: TaskNeeds, now: float
             ) -> list[tuple[str, Admission]]:
        """The candidates a task may go to, best first, each with its admission."""
        ...

    def covers(self, provider: str, amount: int, now: float) -> bool:
        """The provider's free stake still covers `amount`, and its reservation can back it
        within the provider's terms."""
        ...

    def held_back(self, needs: TaskNeeds, admission: Admission, task: QueuedTask,
                  now: float) -> bool:
        """The task should wait for a faster node than the admitted one."""
        ...

    def reserved(self, session: Session, *, task_id: int, job_id: str, node_id: str,
                 provider: str, admission: Admission, now: float) -> None:
        """Called in the placement's transaction (locks the collateral); PlacementConflict
        when the provider's stake no longer covers it (retried)."""
        ...


class PlsPlacement:
    """The `PlacementGate` over `state`'s engine and stake caches."""

    def __init__(self, state: PlsState) -> None:
        self.state = state

    def effective_spec(self, spec: NodeSpec, now: float) -> NodeSpec:
        """The node with the tier work may use now: the policy's tier (demotions count at
        once), and HIGH only while a passing HIGH handshake is fresh."""
        state = self.state
        with state.lock:
            tier = (state.engine.staking.tier(spec.node_id) if state.engine.knows(spec.node_id)
                    else spec.tier)
            verdict = state.verdicts.get(spec.node_id)
        fresh_high = (verdict is not None and verdict.fresh(now) and verdict.tier is Tier.HIGH)
        if fresh_high and tier >= Tier.STANDARD:
            tier = Tier.HIGH
        elif tier is Tier.HIGH:
            tier = Tier.STANDARD
        return replace(spec, tier=tier)

    def components(self, node_id: str, now: float, duration_s: float) -> RsComponents | None:
        """The node's RS over `duration_s` and its factors, as placement sees them (None: a
        node this service does not know)."""
        with self.state.lock:
            if not self.state.engine.knows(node_id):
                return None
            return self.state.book.components(node_id, now, duration_s)

    def _free_stake(self, providers: set[str], now: float) -> dict[str, int]:
        free: dict[str, int] = {}
        for provider in sorted(providers):
            try:
                free[provider] = self.state.listing.free(provider, now)
            except StakeUnavailable as exc:  # fail closed: this provider's nodes wait
                log.warning("placement refused: %s", exc)
                free[provider] = 0
        return free

    def rank(self, candidates: Sequence[Candidate], needs: TaskNeeds, now: float
             ) -> list[tuple[str, Admission]]:
        """The engine's ranking of these candidates for a task, best first, each with what
        its placement locks, over the listing's free stake (the indexed events); the caller
        takes the first whose provider still `covers` it. Candidates with no free slot left
        tell how fast a node the task could wait for (`held_back`)."""
        able = [c for c in candidates if eligible(c.spec, needs)]
        usable = [c for c in able if c.free_slots > 0]
        free = self._free_stake({c.spec.provider for c in usable}, now)
        with self.state.lock:
            engine = self.state.engine
            placements = engine.rank_candidates(usable, needs, now, free)
            busy = [engine.speed(c.spec.node_id) for c in able
                    if c.free_slots <= 0 and engine.knows(c.spec.node_id)]
        faster = max(busy, default=0.0)
        return [(p.candidate.spec.node_id,
                 Admission(p.rs, p.collateral, p.raw_rs, p.speed, faster))
                for p in placements]

    def held_back(self, needs: TaskNeeds, admission: Admission, task: QueuedTask,
                  now: float) -> bool:
        """The task would run late past its job's critical path on the admitted node and a
        faster one is busy: it waits, for at most the lateness that node would save and
        never past the point where the admitted node could still meet the deadline
        (`PlsEngine.wait_until`)."""
        with self.state.lock:
            until = self.state.engine.wait_until(needs, admission.speed, admission.faster_speed,
                                                 queued_at=task.queued_at,
                                                 deadline=task.deadline(needs),
                                                 p_fail=1.0 - admission.rs)
        return now < until

    def covers(self, provider: str, amount: int, now: float) -> bool:
        """The provider's free stake on the chain (the decision's read, not the listing's),
        less what this process locked since the read, still covers `amount` (an earlier
        placement of the batch may have used it), and its reservation can back its open
        assignments and `amount`, raised within the provider's terms where it falls short."""
        stake = self.state.stake
        try:
            return (stake.free(provider, now) >= amount and self._reservation_for(
                provider, stake.open_collateral(provider, now) + amount, now) is not None)
        except StakeUnavailable as exc:
            log.warning("placement refused: %s", exc)
            return False

    def _reservation_for(self, provider: str, needed: int, now: float) -> tuple[int, int] | None:
        """The reservation (amount, until) that backs `needed` of `provider`'s collateral: the
        live one (raises this process queued included) while it covers `needed` for at least
        half the reservation horizon, else a raise to twice `needed` (at most the free stake,
        never less than the live amount) lapsing a horizon from `now`. The horizon is the
        config's, or the provider's terms' where shorter; a raise above the terms' ceiling or
        lapsing past their horizon would revert, so None: no raise within the terms backs it."""
        stake = self.state.stake
        reserved, until = stake.reservation(provider, now)
        on_chain = stake.stake(provider, now)
        terms, free = on_chain.terms, on_chain.free
        horizon = self.state.config.reservation_s
        if terms is not None:
            horizon = min(horizon, terms.horizon_s)
        if reserved >= needed and until >= now + horizon / 2:
            return reserved, until
        amount = max(reserved, min(2 * needed, free, free if terms is None else terms.ceiling))
        lapse = max(until, int(now + horizon))
        if terms is not None and (amount < needed or amount > terms.ceiling
                                  or not now < lapse <= now + terms.horizon_s):
            return None
        return amount, lapse

    def reserved(self, session: Session, *, task_id: int, job_id: str, node_id: str,
                 provider: str, admission: Admission, now: float) -> None:
        """Back the collateral of a placement, in the placement's transaction, with the raw
        RS it was made at (the recalibrator learns from it when the attempt ends): an assign
        leaf (batched into one committed root), after a raise of the provider's standing
        reservation when it no longer covers its open assignments or runs short of time."""
        stake, listing = self.state.stake, self.state.listing
        attempt = store.task_attempts(session, task_id=task_id)
        needed = stake.open_collateral(provider, now) + admission.collateral
        target = self._reservation_for(provider, needed, now)
        if target is None:  # a stake read since `covers` leaves no raise within the terms
            raise PlacementConflict(f"no reservation within {provider}'s terms backs {needed}")
        if target != stake.reservation(provider, now):
            amount, until = target
            outbox.queue_action(
                session, idempotency_key=f"reserve:{provider}:{task_id}:{attempt}", now=now,
                action=ReserveCollateral(provider=provider, amount=amount, until=until))
            stake.raised(provider, amount, until)
        store.add_lock(session, task_id=task_id, attempt=attempt, job_id=job_id,
                       node_id=node_id, provider=provider, amount=admission.collateral,
                       raw_rs=admission.raw_rs, at=now)
        outbox.queue_action(
            session, idempotency_key=f"assign:{task_id}:{attempt}", now=now,
            action=AssignCollateral(job_id=unhex(job_id), provider=provider,
                                    placement=placement_id(task_id, attempt),
                                    collateral=admission.collateral))
        stake.assign(provider, admission.collateral)
        if listing is not stake:
            listing.assign(provider, admission.collateral)

    def checkpoint_interval_s(self, node_id: str, now: float, duration_s: float) -> float:
        """Young/Daly interval from the node's predicted MTBF over the task and its measured
        checkpoint cost, within the policy's bounds."""
        state = self.state
        with state.lock:
            if not state.engine.knows(node_id):
                return state.config.checkpoints.min_s
            return state.engine.checkpoint_interval_s(node_id, now, duration_s)
