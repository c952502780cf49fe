"""Predictive Latency Staking placement: rank candidate nodes by expected cost.

    expected_cost(node) = compute + P(fail) * (rework_fraction * compute + rescheduling_cost
                                               + delay_fraction * task value)
    compute             = price per reference GPU-hour * expected reference hours
    P(fail)             = 1 - RS(node, T)

Tasks are sized in reference GPU-seconds (an RTX 3090's); a node's asking price is turned
into the price of a reference GPU-hour and T into its wall time there by the render speed
of the GPU class its PoPW handshake proved (`PlsEngine.rank`).

RS is conditioned on the task's duration T and the node's current uptime, so a
long task's P(fail) separates nodes far more than a short one's: long tasks go
to nodes with high conditional survival. The cost is then weighted by the node's
track record (`CostModel.record_share`) and, past the job's critical path, by how
late a slow GPU would deliver (`CostModel.latency_share_per_hour`). Nodes whose
free on-chain stake cannot cover the risk-priced collateral (`collateral.py`)
are dropped, and long tasks go only to nodes with a verified record
(`Probation`) while any such node is a candidate. Nodes under the RS floor wait
while enough of the free candidates clear it (`PlsPolicy.rank_rows`); on a grid
of short-lived hosts the floor gives way and the risk is priced instead.
`LeaseHold` decides whether a silent node's lease is kept through a silence its
peers share (and keeps that silence out of the node's record). A share of short
tasks goes to the best new node (few sessions observed) so newcomers can build a
history; that choice is drawn from the policy's own seeded generator, so a run is
reproducible given the seed and the sequence of calls.

A task that would run past its job's critical path on the best free node may wait for a
faster busy one, never longer than the lateness that saves (`faster_node_wait_s`).

Two entry points: `rank` takes `matching.Candidate`s (the service), `rank_rows`
takes numpy arrays of book rows (the simulator; no per-node Python work but
for the exploration draw).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from orchestrator.domain.collateral import CollateralPolicy
from orchestrator.domain.matching import Candidate, ScoreFn, eligible
from orchestrator.domain.reliability import Durations, ReliabilityBook
from orchestrator.domain.slashing import StakingPolicy
from orchestrator.domain.types import NodeSpec, TaskNeeds

REFERENCE_SPEED = 1.0  # the reference card's render speed (`popw.GpuClass.render_speed`)


def faster_node_wait_s(needs: TaskNeeds, chosen_speed: float, faster_speed: float) -> float:
    """How long (from when it was queued) a task may wait for a busy node of `faster_speed`
    rather than start now on the best free one: the lateness past the job's critical path
    that the faster node would save, else 0. Ski rental: if no faster node frees up in that
    time the task starts on the slow one, at most twice as late as starting at once; if one
    does, it is at most as late. A frame range that runs for hours on a slow GPU is what
    holds a job's completion (the p99 of `mesh bench churn`); a short one has slack."""
    if faster_speed <= chosen_speed or chosen_speed <= 0.0:
        return 0.0
    slack = max(needs.critical_path_s, needs.expected_duration_s)
    faster_wall = needs.expected_duration_s / faster_speed
    return max(needs.expected_duration_s / chosen_speed - max(slack, faster_wall), 0.0)


def compute_cost(prices: NDArray[np.float64], needs: TaskNeeds) -> NDArray[np.float64]:
    """Token units the task's work costs at these prices per reference GPU-hour (the
    expected cost's compute term; a quote's price, `services.quotes`)."""
    return prices * (needs.expected_duration_s / 3600.0)


@dataclass(frozen=True, slots=True)
class CostModel:
    rework_fraction: float = 1.0  # share of the compute paid again after a failure
    rescheduling_cost: int = 0  # token units per failure: detection, transfer, restart
    # Share of the task value a failed attempt costs the customer in delay. 1.0: a late render
    # is worth about nothing to the customer. In `mesh bench churn` (1,000 nodes, 7 days) 0.1 /
    # 0.5 / 1.0 gave stable-vs-flaky earnings 1.84 / 2.10 / 2.31 with waste and ECE unchanged.
    delay_fraction: float = 1.0
    # Share of the task value the customer loses per hour the task runs past the job's
    # critical path (`TaskNeeds.critical_path_s`, its longest task in reference seconds): a
    # job's result waits for its slowest task, so a long frame range on a slow GPU delays the
    # whole render while a short one in the same job has slack. Priced only beyond that slack,
    # it moves the long tasks to fast GPUs and leaves the rest to price and risk. `mesh bench
    # churn` (1,000 nodes), on the trace with the slowest tail tried: 0.25 / 0.4 / 0.6 gave p99
    # completion 0.72 / 0.70 / 0.64 x uptime's, waste 0.45-0.46 x and stable-vs-flaky earnings
    # 2.5-2.6 throughout.
    latency_share_per_hour: float = 0.6
    # Ranking weight of the node's track record: cost x (1 + record_share x P(a fresh session
    # of this node would end before the task does)), from `ReliabilityBook.record_survival_many`
    # (every finished session, the running one censored). RS conditions on where the node
    # stands in its current session, which is calibrated but forgets quickly (shape < 1); the
    # record keeps a long-lived host ahead of a flaky one that happens to be up right now.
    # `mesh bench churn` (1,000 nodes): stable-vs-flaky earnings 1.70 without it, 2.17 at 8 and
    # 2.20 at 16 (seed 1); 16 beat 8 on seeds 3 and 5 in both waste and earnings.
    record_share: float = 16.0

    def __post_init__(self) -> None:
        if (self.rework_fraction < 0 or self.rescheduling_cost < 0 or self.delay_fraction < 0
                or self.latency_share_per_hour < 0 or self.record_share < 0):
            raise ValueError("cost model terms must be >= 0")


@dataclass(frozen=True, slots=True)
class Probation:
    """Long tasks go to nodes with a verified record. A node that returns wrong results is
    found out by spot checks, but only after it has burnt a task; on probation that task is a
    short one. A failed verification weighs `fail_weight` passes (BOINC likewise cuts a host's
    quota at every invalid result and lets it earn it back slowly); until the passes outweigh
    it the node gets no long task and a short one only when nobody else can take it."""

    max_task_s: float = 1200.0  # reference seconds: longer tasks need a record
    min_passes: int = 3
    fail_weight: float = 20.0

    def trusted(self, passes: NDArray[np.float64], fails: NDArray[np.float64]
                ) -> NDArray[np.bool_]:
        return (passes >= self.min_passes) & (passes >= self.fail_weight * fails)

    def ladder(self, passes: NDArray[np.float64], fails: NDArray[np.float64], long_task: bool
               ) -> tuple[NDArray[np.bool_], ...]:
        """Who may take the task, best rung first; the first rung with a usable candidate
        applies. A long task: nodes with a record, else nodes never caught (a new grid has no
        records yet), never a node whose failed check is not outweighed. A short task: anyone
        not caught, else anyone."""
        trusted = self.trusted(passes, fails)
        clean = fails == 0
        if long_task:
            return trusted, clean
        return trusted | clean, np.ones_like(clean)


@dataclass(frozen=True, slots=True)
class LeaseHold:
    """Keep a silent node's lease for a while when its silence is shared by its region or
    network peers. Many nodes of one ISP going quiet within a minute is one upstream cut, not
    many departures: their processes most likely render on and reconnect, and revoking every
    lease throws their work away (Kubernetes stops evicting in a disrupted zone for the same
    reason). A lone silence is revoked at once, as the failure detector says. If the node is
    not back within `hold_s`, or comes back as a new process, the lease is revoked then: the
    work since its last checkpoint was lost either way, only the re-placement is later.

    The same judgement keeps a shared silence out of the node's record: its session ends
    censored (like a drain), not as a departure, because the node did not leave and its peers
    went with it. Counting upstream cuts as departures drowned the difference between a host
    that stays up for a week and one that leaves daily (`mesh bench churn`, six traces, with
    the latency price at 0.6: stable-vs-flaky earnings 1.9-2.5 -> 2.4-2.8, and less waste on
    each)."""

    window_s: float = 30.0  # DEAD verdicts this close together may be one cut
    min_nodes: int = 2
    min_share: float = 0.02  # of the nodes registered in the group
    hold_s: float = 1800.0  # ISP outages last minutes (median ~5 min): most end inside this
    # A lone silence keeps its lease this long before it is revoked (Kubernetes' default
    # toleration of an unreachable node): most lone cuts last under a minute, and a node back
    # within it renders on. The sweep applies it to every policy's leases; `hold_for` stays
    # the shared-silence judgement (a lone silence is still the node's own departure, and a
    # lapsed lone hold is an abandonment dated at the DEAD verdict).
    lone_grace_s: float = 300.0

    def __post_init__(self) -> None:
        if (self.window_s <= 0 or self.hold_s < 0 or self.min_nodes < 2 or self.min_share < 0
                or self.lone_grace_s < 0):
            raise ValueError("window_s > 0, hold_s >= 0, min_nodes >= 2, min_share >= 0, "
                             "lone_grace_s >= 0")

    def for_node(self, staking: StakingPolicy, node_id: str, now: float) -> float:
        """Seconds to keep the leases of `node_id`, just called DEAD (its departure already
        told to `staking`)."""
        return self.hold_for(staking.departures_near(node_id, now, self.window_s))

    def hold_for(self, departures_near: Sequence[tuple[int, int]]) -> float:
        """Seconds to keep the lease, given `StakingPolicy.departures_near`."""
        shared = any(count >= max(self.min_nodes, self.min_share * size)
                     for count, size in departures_near)
        return self.hold_s if shared else 0.0


@dataclass(frozen=True, slots=True)
class RankedRows:
    """Usable candidates best first (arrays aligned with each other)."""

    rows: NDArray[np.intp]  # book rows
    positions: NDArray[np.intp]  # index into the caller's input arrays
    rs: NDArray[np.float64]
    p_fail: NDArray[np.float64]
    expected_cost: NDArray[np.float64]
    collateral: NDArray[np.float64]  # approximate (float64); lock the exact int
    explored: bool  # the first entry was moved there to explore a new node
    raw_rs: NDArray[np.float64]  # before recalibration: feed it back with the outcome


@dataclass(frozen=True, slots=True)
class Placement:
    candidate: Candidate
    rs: float
    p_fail: float
    expected_cost: float
    collateral: int  # to lock from the provider's free stake
    explored: bool
    raw_rs: float  # before recalibration: stored with the lock, fed back with the outcome
    speed: float = REFERENCE_SPEED  # the render speed the node was ranked at


class PlsPolicy:
    def __init__(self, book: ReliabilityBook, collateral: CollateralPolicy | None = None,
                 cost: CostModel | None = None, explore_share: float = 0.1,
                 short_task_s: float = 600.0, new_node_sessions: int = 3,
                 probation: Probation | None = None, min_rs: float = 0.0, seed: int = 0,
                 floor_share: float = 0.25) -> None:
        if not 0.0 <= explore_share <= 1.0:
            raise ValueError("explore_share must lie in [0, 1]")
        if not 0.0 <= min_rs <= 1.0:
            raise ValueError("min_rs must lie in [0, 1]")
        if not 0.0 <= floor_share <= 1.0:
            raise ValueError("floor_share must lie in [0, 1]")
        self.book = book
        self.collateral = collateral or CollateralPolicy()
        self.cost = cost or CostModel()
        self.explore_share = explore_share
        self.short_task_s = short_task_s
        self.new_node_sessions = new_node_sessions
        self.probation = probation or Probation()
        self.min_rs = min_rs  # RS for the task below this is no candidate...
        self.floor_share = floor_share  # ...while this share of the free candidates clear it
        self._rng = np.random.default_rng(seed)

    def _expected_cost(self, prices: NDArray[np.float64], p_fail: NDArray[np.float64],
                       needs: TaskNeeds, wall_s: Durations) -> NDArray[np.float64]:
        compute = compute_cost(prices, needs)
        failure = (self.cost.rework_fraction * compute + self.cost.rescheduling_cost
                   + self.cost.delay_fraction * needs.value)
        slack = max(needs.critical_path_s, needs.expected_duration_s)
        late_s = np.maximum(np.asarray(wall_s) - slack, 0.0)
        latency = self.cost.latency_share_per_hour * needs.value * late_s / 3600.0
        return compute + p_fail * failure + latency

    def rank_rows(self, rows: NDArray[np.intp], prices: NDArray[np.float64],
                  free_stake: NDArray[np.float64], needs: TaskNeeds, now: float,
                  wall_durations_s: NDArray[np.float64] | None = None, *, explore: bool = True
                  ) -> RankedRows:
        """Rank already-eligible rows: drops offline nodes, those whose free stake is short
        of the collateral, and those under `min_rs` while the floor holds: while at least
        `floor_share` of the online candidates (the nodes free now, as the placement pass
        offers them) clear it, the risky ones wait for the steadier; when fewer do (a grid of
        short-lived hosts), steady capacity is short and the task goes to a risky node, its
        risk priced (collateral, Young's shorter interval), rather than wait. Ties keep the
        caller's order.
        `wall_durations_s`: how long the task would run on each row (its work over the
        node's verified speed), so a fast GPU is asked to survive a shorter time; default
        `needs.expected_duration_s` for all. `explore` False: no exploration draw (a quote,
        which places nothing, leaves the seeded sequence of placements as it was)."""
        rows = np.asarray(rows, dtype=np.intp)
        durations = (needs.expected_duration_s if wall_durations_s is None
                     else np.asarray(wall_durations_s, dtype=np.float64))
        raw_rs = self.book.raw_score_many(rows, now, durations)
        rs = self.book.recalibrate(raw_rs)
        p_fail = 1.0 - rs
        collateral = self.collateral.required_many(needs.value, p_fail,
                                                   needs.expected_duration_s)
        # raw RS 0: offline (recalibration may still map 0 above 0)
        placeable = (raw_rs > 0.0) & (rs > 0.0) & (np.asarray(free_stake) >= collateral)
        passes, fails = self.book.verified_many(rows)
        ladder = self.probation.ladder(passes, fails,
                                       needs.expected_duration_s > self.probation.max_task_s)
        usable_mask = np.zeros_like(placeable)
        steady = rs >= self.min_rs
        online = raw_rs > 0.0
        holds = bool((steady & online).sum() >= self.floor_share * online.sum())
        floors = (steady,) if holds else (steady, np.ones_like(placeable))  # steady first
        for floor in floors:
            for allowed in ladder:
                if (placeable & floor & allowed).any():
                    usable_mask = placeable & floor & allowed
                    break
            if usable_mask.any():
                break
        # else: the task waits (for a steadier node, or rather than go to a cheater)
        usable = np.flatnonzero(usable_mask)
        wall = durations if np.ndim(durations) == 0 else np.asarray(durations)[usable]
        cost = self._expected_cost(np.asarray(prices, dtype=np.float64)[usable], p_fail[usable],
                                   needs, wall)
        if self.cost.record_share > 0:
            record = self.book.record_survival_many(rows[usable], now, wall)
            cost = cost * (1.0 + self.cost.record_share * (1.0 - record))
        by_cost = np.argsort(cost, kind="stable")
        explored = False
        if (explore and by_cost.size > 1 and needs.expected_duration_s <= self.short_task_s
                and self._rng.random() < self.explore_share):
            sessions = self.book.sessions_observed_many(rows[usable[by_cost]])
            newcomers = np.flatnonzero(sessions < self.new_node_sessions)
            if newcomers.size and newcomers[0] > 0:  # the best node may already be new
                first = newcomers[0]
                by_cost = np.concatenate(([by_cost[first]], by_cost[:first],
                                          by_cost[first + 1:]))
                explored = True
        order = usable[by_cost]
        return RankedRows(rows[order], order, rs[order], p_fail[order], cost[by_cost],
                          collateral[order], explored, raw_rs[order])

    def rank_at_speeds(self, rows: NDArray[np.intp], prices: NDArray[np.float64],
                       speeds: NDArray[np.float64], free_stake: NDArray[np.float64],
                       needs: TaskNeeds, now: float, *, explore: bool = True) -> RankedRows:
        """`rank_rows` for nodes of the given render speeds (against the reference card):
        asking prices per GPU-hour become prices per reference GPU-hour (a cheap slow card is
        not cheaper than it is) and the task's reference seconds its wall time on each (a
        fast card is asked to survive a shorter time, a slow one pays for delivering past the
        critical path)."""
        return self.rank_rows(rows, np.asarray(prices) / speeds, free_stake, needs, now,
                              wall_durations_s=needs.expected_duration_s / speeds,
                              explore=explore)

    def rank(self, candidates: Sequence[Candidate], needs: TaskNeeds, now: float,
             free_stake: Mapping[str, int], speeds: NDArray[np.float64] | None = None, *,
             explore: bool = True) -> list[Placement]:
        """Eligible candidates with a free slot and enough free stake, best first; ties go
        to the emptier node, then to the node id (as `matching.rank`). `speeds`: per book
        row, each node's render speed against the reference card (`rank_at_speeds`); the
        reference card's for all when None."""
        usable = [c for c in candidates if c.free_slots > 0 and eligible(c.spec, needs)]
        usable.sort(key=lambda c: (-c.free_slots, c.spec.node_id))
        if not usable:
            return []
        rows = np.array([self.book.index_of(c.spec.node_id) for c in usable], dtype=np.intp)
        speed = np.full(rows.size, REFERENCE_SPEED) if speeds is None else speeds[rows]
        prices = np.array([c.spec.price_per_gpu_hour for c in usable], dtype=np.float64)
        stake = np.array([free_stake.get(c.spec.provider, 0) for c in usable], dtype=np.float64)
        ranked = self.rank_at_speeds(rows, prices, speed, stake, needs, now, explore=explore)
        placements: list[Placement] = []
        for i, (pos, rs, pf, cost, raw) in enumerate(zip(
                ranked.positions.tolist(), ranked.rs.tolist(), ranked.p_fail.tolist(),
                ranked.expected_cost.tolist(), ranked.raw_rs.tolist(), strict=True)):
            candidate = usable[pos]
            exact = self.collateral.required(needs.value, pf, needs.expected_duration_s)
            if exact <= free_stake.get(candidate.spec.provider, 0):
                placements.append(Placement(candidate, rs, pf, cost, exact,
                                            ranked.explored and i == 0, raw,
                                            float(speed[pos])))
        return placements

    def score_fn(self, now: float) -> ScoreFn:
        """Minus the expected cost, for `matching.rank` (one node at a time: the slow path;
        it ignores stake and exploration, which need the whole candidate set)."""

        def score(node: NodeSpec, needs: TaskNeeds) -> float:
            rs = self.book.score(node.node_id, now, needs.expected_duration_s)
            cost = self._expected_cost(np.array([float(node.price_per_gpu_hour)]),
                                       np.array([1.0 - rs]), needs, needs.expected_duration_s)
            return -float(cost[0])

        return score
