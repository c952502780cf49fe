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
from orchestrator.domain.chain_actions import AssignCollateral, ChainAction, ReserveCollateral
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


@dataclass(frozen=True, slots=True)
class Placed:
    """One placement of a batch whose collateral the gate locks (`reserved_many`)."""

    task_id: int
    job_id: str
    node_id: str
    provider: str
    admission: Admission


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

    def claim(self, provider: str, amount: int) -> None:
        """A placement of the batch being decided uses `amount` of the provider's stake: the
        batch's later `covers` count it (until `reserved_many` or `drop_claims`)."""
        ...

    def drop_claims(self) -> None:
        """The batch being decided was rolled back: its claims no longer use any stake."""
        ...

    def reserved_many(self, session: Session, *, placements: Sequence[Placed], now: float
                      ) -> None:
        """Called in the batch's transaction (locks the collateral of its placements);
        PlacementConflict when a provider's stake no longer covers them (retried)."""
        ...


class PlsPlacement:
    """The `PlacementGate` over `state`'s engine and stake caches."""

    def __init__(self, state: PlsState) -> None:
        self.state = state
        self._claimed: dict[str, int] = {}  # provider -> collateral of the batch being decided

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

    def rank(self, candidates: Sequence[Candidate], needs: TaskNeeds, now: float, *,
             explore: bool = True) -> list[tuple[str, Admission]]:
        """The engine's ranking of these candidates for a task, best first, each with what
        its placement locks, over the listing's free stake (the indexed events); the caller
        takes the first whose provider still `covers` it. Candidates with no free slot left
        tell how fast a node the task could wait for (`held_back`). `explore` False: no
        exploration draw (a quote: `services.quotes`)."""
        able = [c for c in candidates if eligible(c.spec, needs)]
        usable = [c for c in able if c.free_slots > 0]
        free = self._free_stake({c.spec.provider for c in usable}, now)
        with self.state.lock:
            engine = self.state.engine
            placements = engine.rank_candidates(usable, needs, now, free, explore=explore)
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
        less what this process locked since the read and what the batch being decided claimed
        (`claim`), still covers `amount`, and its reservation can back its open
        assignments and `amount`, raised within the provider's terms where it falls short."""
        stake = self.state.stake
        claimed = self._claimed.get(provider, 0)
        try:
            return (stake.free(provider, now) - claimed >= amount and self._reservation_for(
                provider, stake.open_collateral(provider, now) + claimed + amount, now)
                is not None)
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

    def claim(self, provider: str, amount: int) -> None:
        self._claimed[provider] = self._claimed.get(provider, 0) + amount

    def drop_claims(self) -> None:
        self._claimed.clear()

    def reserved_many(self, session: Session, *, placements: Sequence[Placed], now: float
                      ) -> None:
        """Back the collateral of a batch's placements, in the batch's transaction, each with
        the raw RS it was made at (the recalibrator learns from it when the attempt ends): an
        assign leaf per placement (batched into one committed root), after one raise per
        provider of its standing reservation when it no longer covers its open assignments
        and the batch's, or runs short of time (`_reservation_for` over the provider's batch
        total, so the terms' ceiling and horizon bind the one raise). The raises are queued
        before the assigns they back, every row in one INSERT, each under the exactly-once key
        of a placement (`reserve:` the provider's first placement of the batch, `assign:`
        each). The batch's claims become the stake caches' assignments."""
        if not placements:
            return
        stake, listing = self.state.stake, self.state.listing
        attempts = store.task_attempts(session, task_ids=[p.task_id for p in placements])
        by_provider: dict[str, list[Placed]] = {}
        for placed in placements:
            by_provider.setdefault(placed.provider, []).append(placed)
        raises: dict[str, tuple[int, int]] = {}
        actions: list[tuple[str, ChainAction]] = []
        for provider, placed_on in by_provider.items():
            needed = (stake.open_collateral(provider, now)
                      + sum(p.admission.collateral for p in placed_on))
            target = self._reservation_for(provider, needed, now)
            if target is None:  # a stake read since `covers` leaves no raise within the terms
                raise PlacementConflict(f"no reservation within {provider}'s terms backs {needed}")
            if target != stake.reservation(provider, now):
                first = placed_on[0]
                raises[provider] = target
                actions.append((f"reserve:{provider}:{first.task_id}:{attempts[first.task_id]}",
                                ReserveCollateral(provider=provider, amount=target[0],
                                                  until=target[1])))
        locks = [store.NewLock(task_id=p.task_id, attempt=attempts[p.task_id], job_id=p.job_id,
                               node_id=p.node_id, provider=p.provider,
                               amount=p.admission.collateral, raw_rs=p.admission.raw_rs)
                 for p in placements]
        store.add_locks(session, locks=locks, at=now)
        actions.extend((f"assign:{lock.task_id}:{lock.attempt}", AssignCollateral(
            job_id=unhex(lock.job_id), provider=lock.provider,
            placement=placement_id(lock.task_id, lock.attempt), collateral=lock.amount))
            for lock in locks)
        outbox.queue_actions(session, actions=actions, now=now)
        for provider, (amount, until) in raises.items():
            stake.raised(provider, amount, until)
        for placed in placements:
            stake.assign(placed.provider, placed.admission.collateral)
            if listing is not stake:
                listing.assign(placed.provider, placed.admission.collateral)
        self._claimed.clear()

    def checkpoint_interval_s(self, node_id: str, now: float, duration_s: float) -> float:
        """Young/Daly interval from the node's predicted MTBF over the task and its measured
        checkpoint cost, within the policy's bounds."""
        state = self.state
        with state.lock:
            if not state.engine.knows(node_id):
                return state.config.checkpoints.min_s
            return state.engine.checkpoint_interval_s(node_id, now, duration_s)
