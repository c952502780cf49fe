"""DePIN Mesh as built, driven in the simulator: the service's own `PlsEngine` (RS with
online recalibration and daily prior refits, expected-cost ranking with probation and
exploration, risk-priced collateral, Young/Daly checkpoints, `LeaseHold`, the staking policy
that slashes and re-tiers), fed on a virtual clock.

It sees only what a real orchestrator observes: detector verdicts (session starts and
abrupt ends), signed probes (RTT, loss), agent GPU telemetry, measured upload throughput and
checkpoint times, and task outcomes. Each reaches the engine as the typed observation the
service logs for it (`domain.pls_observations`), through `PlsEngine.apply` (`observe`), so the
engine's guards are the service's. Ground truth enters only through those samples; the
driver models only the world (stake on chain, the handshake's judgement of a true link).

It places as the service's `PlsPlacement` gate does, through the same rule
(`scheduling.free_slots.FreeSlots`): the engine's ranking of the idle eligible nodes in node
id order (`PlsPolicy.rank_at_speeds`, as `PlsEngine.rank_candidates` calls it), each with its
exact collateral, raw RS, speed and the fastest busy node that could take the task; the
provider's free stake must cover the collateral; the task waits for a faster node by
`PlsEngine.wait_until`. The collateral is locked when the slot is reserved."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from eth_utils import to_checksum_address
from numpy.typing import NDArray

from mesh.simulation.engine import Attempt, PlacementObserver, Reservation, Simulation
from mesh.simulation.jobs import VALUE_PER_REF_GPU_HOUR
from mesh.simulation.models import GPU_CLASSES, THROTTLE_SLOWDOWN, TOKEN, NodeProfile
from mesh.simulation.policies import Grid, HoldingGate, LazyAdmissions, TaskView
from orchestrator.domain.pls import RankedRows
from orchestrator.domain.pls_engine import PlsConfig, PlsEngine
from orchestrator.domain.pls_observations import (
    Abandoned,
    AttemptEnded,
    CheckpointCost,
    Departed,
    GpuReport,
    Handshake,
    NodeKnown,
    Observation,
    Probe,
    SessionEnded,
    SessionStarted,
    TierDecided,
    Upload,
)
from orchestrator.domain.popw import PopwConfig, PopwVerdict
from orchestrator.domain.reliability import GpuSample, TaskOutcome
from orchestrator.domain.slashing import SlashReason
from orchestrator.domain.types import NodeSpec, TaskNeeds, Tier
from orchestrator.scheduling.free_slots import Ranking
from orchestrator.services.pls_placement import Admission, QueuedTask

PROBES_PER_CONTACT = 4  # ping-pong rounds timed whenever the orchestrator talks to a node
GPU_SAMPLES_PER_CONTACT = 8  # enough that the throttled share tracks the true rate
THROTTLED_REASON = 0x20  # NVML SwThermalSlowdown
MAX_SM_CLOCK_MHZ = 1900.0


def provider_address(node_index: int) -> str:
    """One staking wallet per simulated node."""
    return to_checksum_address(f"0x{node_index + 1:040x}")


def attempt_task_id(attempt: Attempt) -> int:
    """The id an attempt's collateral and slashes go by: its task and attempt number, as the
    service's placement id packs them (`task << 32 | attempt`)."""
    return attempt.task.key << 32 | attempt.task.attempts


def handshake_tier(profile: NodeProfile, config: PopwConfig) -> Tier:
    """The tier a PoPW handshake grants this node: the judge's link and thermal thresholds
    applied to its true link (the challenge kernel itself is not simulated)."""
    if profile.loss > config.max_probe_loss:
        return Tier.BACKGROUND
    hot = profile.throttle_rate > 0.3
    if profile.jitter_ms <= config.high_tier_max_jitter_ms and not hot:
        return Tier.HIGH
    return Tier.STANDARD


class Admissions(LazyAdmissions):
    """The PLS engine's admissions of a ranking (RS, exact collateral, raw RS, speeds)."""

    def __init__(self, engine: PlsEngine, needs: TaskNeeds, ranked: RankedRows,
                 speeds: NDArray[np.float64], faster_speed: float) -> None:
        self._engine = engine
        self._needs = needs
        self._ranked = ranked
        self._speeds = speeds
        self._faster = faster_speed

    def __len__(self) -> int:
        return int(self._ranked.rows.size)

    def admission(self, index: int) -> Admission:
        ranked = self._ranked
        rs, p_fail = float(ranked.rs[index]), float(ranked.p_fail[index])
        return Admission(rs, self._engine.collateral(self._needs, p_fail),
                         float(ranked.raw_rs[index]), float(self._speeds[index]), self._faster)


class PlsDriver(PlacementObserver):
    """Policy `pls`: feeds observations into the engine, ranks and gates placements with it."""

    name = "pls"

    def __init__(self, profiles: Sequence[NodeProfile], specs: Sequence[NodeSpec],
                 rng: np.random.Generator, seed: int, config: PlsConfig | None = None) -> None:
        self.profiles = profiles
        self.engine = PlsEngine(dataclasses.replace(config or PlsConfig(), explore_seed=seed))
        self.book = self.engine.book
        self.staking = self.engine.staking
        self.lease_hold = self.engine.config.lease_hold
        self.popw = self.engine.config.popw
        self.rng = rng
        n = len(profiles)
        self.stake = np.asarray([float(p.stake) for p in profiles])
        self.locked = np.zeros(n)
        self.prices = np.asarray([float(p.price_per_gpu_hour) for p in profiles])
        self.providers = [spec.provider for spec in specs]
        self._nodes_of: dict[str, list[int]] = {}
        for node, provider in enumerate(self.providers):
            self._nodes_of.setdefault(provider, []).append(node)
        self.gate: HoldingGate | None = self  # it is its own gate
        self.held_until = math.inf  # the end of the wait `held_back` last decided
        self.verdict_expires = np.zeros(n)
        self._lease_hold_s = np.zeros(n)  # per node, decided at its last DEAD verdict
        self._collateral: dict[int, int] = {}  # node -> collateral locked for its task
        self._raw_rs: dict[int, float] = {}  # node -> raw RS its running task was placed at
        self._abandoned: dict[str, tuple[int, bool]] = {}  # task id -> (node, blameless)
        self.slashes_by_reason: dict[str, int] = {r.name.lower(): 0 for r in SlashReason}
        for row, (profile, spec) in enumerate(zip(profiles, specs, strict=True)):
            self.observe(NodeKnown(profile.node_id, spec.provider, profile.region, 0.0,
                                   int(spec.tier), None, profile.network))
            if self.book.index_of(profile.node_id) != row:
                raise RuntimeError("book rows must follow node order")

    @property
    def prior_refits(self) -> int:
        return self.engine.prior_refits

    # ----- decisions ------------------------------------------------------------------
    def rank(self, task: TaskView, candidates: NDArray[np.intp], now: float) -> Ranking[int]:
        """The engine's ranking of the candidates (free stake covering the collateral, the
        RS floor, probation, exploration) at their verified speeds, as the service's
        `PlsPlacement.rank`; the fastest busy node that could take the task is looked for
        only when a ranked node would run late (else no wait can follow)."""
        free_stake = self.stake[candidates] - self.locked[candidates]
        ranked = self.engine.rank(candidates, self.prices[candidates], free_stake,
                                  task.needs, now)
        speeds = self.engine.speeds(ranked.rows)
        faster = (self._fastest_busy(task, candidates)
                  if speeds.size and self.engine.runs_late(task.needs, float(speeds.min()))
                  else 0.0)
        return Ranking(ranked.rows.tolist(), task.needs,
                       Admissions(self.engine, task.needs, ranked, speeds, faster))

    def covers(self, provider: str, amount: int, now: float) -> bool:
        """The provider's free stake (bonded, less what its running tasks lock) covers
        `amount`."""
        nodes = self._nodes_of[provider]
        return float((self.stake[nodes] - self.locked[nodes]).sum()) >= amount

    def held_back(self, needs: TaskNeeds, admission: Admission, task: QueuedTask,
                  now: float) -> bool:
        """As `PlsPlacement.held_back`: the task waits for the faster busy node until
        `PlsEngine.wait_until` (kept in `held_until`)."""
        until = self.engine.wait_until(needs, admission.speed, admission.faster_speed,
                                       queued_at=task.queued_at, deadline=task.deadline(needs),
                                       p_fail=1.0 - admission.rs)
        if now < until:
            self.held_until = until
            return True
        return False

    def checkpoint_interval(self, node: int, task: TaskView, cost_s: float, now: float) -> float:
        """Young's interval from the node's predicted hazard over this task and its measured
        checkpoint time (the EWMA's prior until a first checkpoint was timed)."""
        node_id = self.profiles[node].node_id
        return self.engine.checkpoint_interval_s(
            node_id, now, task.remaining_work_s / self.engine.speed(node_id))

    def lease_hold_s(self, node: int, now: float) -> float:
        """What `LeaseHold` decided at the node's DEAD verdict (`node_down`, called first)."""
        return float(self._lease_hold_s[node])

    # ----- observations ---------------------------------------------------------------
    def observe(self, *observations: Observation) -> None:
        """The one way the driver feeds the engine: what the service would log, in order."""
        for observation in observations:
            self.engine.apply(observation)

    def node_up(self, node: int, now: float) -> None:
        self.observe(SessionStarted(self.profiles[node].node_id, now))
        self._contact(node, now)
        self._handshake(node, now)

    def node_down(self, node: int, now: float) -> None:
        """A DEAD verdict. A silence its peers share (`LeaseHold`) keeps the lease and ends
        the session censored, as `PlsService` does: not the node's own departure."""
        node_id = self.profiles[node].node_id
        self.observe(Departed((node_id,), now))
        hold = self.engine.lease_holds([node_id], now)[node_id]
        self._lease_hold_s[node] = hold
        self.observe(SessionEnded(node_id, now, abrupt=hold == 0.0))

    def reserved(self, sim: Simulation, reservation: Reservation) -> None:
        """The slot is reserved: lock the collateral it was admitted at."""
        admission = reservation.admission
        if admission is None:
            raise RuntimeError("a placement the PLS gate did not admit")
        node = reservation.node
        self._collateral[node] = admission.collateral
        if admission.raw_rs is not None:
            self._raw_rs[node] = admission.raw_rs
        self.locked[node] += admission.collateral

    def released(self, sim: Simulation, reservation: Reservation) -> None:
        """Not started: the collateral goes back (the service feeds PLS nothing of it)."""
        self._unlock(reservation.node)

    def completed(self, sim: Simulation, attempt: Attempt) -> None:
        collateral, raw = self._unlock(attempt.node)
        node_id = self.profiles[attempt.node].node_id
        self.observe(AttemptEnded(node_id, attempt_task_id(attempt),
                                  TaskOutcome.COMPLETED.value, raw, collateral, sim.now))
        if attempt.checkpoints:
            self.observe(CheckpointCost(node_id, attempt.cost_s))
        self.observe(Upload(node_id, sim.now, self._measured_upload(attempt.node)))
        self._contact(attempt.node, sim.now)

    def attempt_lost(self, sim: Simulation, attempt: Attempt, blameless: bool) -> None:
        collateral, raw = self._unlock(attempt.node)
        node_id = self.profiles[attempt.node].node_id
        task_id = attempt_task_id(attempt)
        self._abandoned[str(task_id)] = (attempt.node, blameless)
        # Dated at the DEAD verdict, also when the lease was held past it: the staking
        # policy judges the departure (partition? outage?), not the revocation.
        left_at = sim.now if attempt.held_since is None else attempt.held_since
        # The task as leased: the work left when it started, and the share of it lost now.
        leased_s = attempt.compute_s * attempt.speed
        self.observe(Abandoned(node_id, task_id, collateral, raw, left_at,
                               value=round(leased_s / 3600.0 * VALUE_PER_REF_GPU_HOUR),
                               rework_share=attempt.lost_s / leased_s if leased_s > 0 else 1.0))

    def verification_failed(self, sim: Simulation, attempt: Attempt) -> None:
        collateral, raw = self._unlock(attempt.node)
        node_id = self.profiles[attempt.node].node_id
        self.observe(AttemptEnded(node_id, attempt_task_id(attempt),
                                  TaskOutcome.FAILED_VERIFICATION.value, raw, collateral,
                                  sim.now))

    def epoch(self, sim: Grid, now: float) -> None:
        """Score every online node, let the staking policy decide, apply its verdicts."""
        rows = self.book.online_rows()
        node_ids = [self.profiles[row].node_id for row in rows.tolist()]
        readings = self.engine.readings(node_ids, now, all_digests=False)
        for row in rows.tolist():
            if self.verdict_expires[row] - now < 3600.0:
                self._handshake(row, now)
        bonded = {self.providers[i]: int(self.stake[i]) for i in range(len(self.profiles))}
        actions = self.engine.decide(readings, bonded, now)
        node_of = {p.node_id: i for i, p in enumerate(self.profiles)} if actions.slashes or \
            actions.tier_changes else {}
        for decision in actions.slashes:
            node = node_of[decision.node_id]
            self.slashes_by_reason[decision.reason.name.lower()] += 1
            amount = min(float(decision.amount), self.stake[node])
            self.stake[node] -= amount
            sim.slash(node, amount / TOKEN, self._is_false(decision.reason, decision.task_id, node))
        for change in actions.tier_changes:
            node = node_of[change.node_id]
            sim.set_spec(node, dataclasses.replace(sim.specs[node], tier=change.new))
            # logged for every replica as the service does (the deciding engine has it)
            self.observe(TierDecided(change.node_id, int(change.new), change.at))

    # ----- helpers --------------------------------------------------------------------
    def _fastest_busy(self, task: TaskView, idle: NDArray[np.intp]) -> float:
        """The verified speed of the fastest node of the pass's view (up, no failed start),
        able to take the task (its tier and VRAM) and not idle now, as the service's
        `PlsPlacement.rank` reads its slot view (0 when there is none)."""
        busy = task.in_view & task.able
        busy[idle] = False
        rows = np.flatnonzero(busy)
        return float(self.engine.speeds(rows).max()) if rows.size else 0.0

    def _is_false(self, reason: SlashReason, task_id: str | None, node: int) -> bool:
        """A slash of an honest node for something it did not do: a partition or a
        correlated outage read as abandonment, or a failed check of a correct result.
        A cheater is never counted: the rate's denominator is the honest nodes."""
        if self.profiles[node].cheater:
            return False
        if reason is SlashReason.ABANDONMENT and task_id is not None:
            return self._abandoned[task_id][1]
        return reason is SlashReason.FAILED_VERIFICATION

    def _unlock(self, node: int) -> tuple[int, float | None]:
        """The node's attempt ended: release its collateral; (collateral, raw RS placed at)."""
        amount = self._collateral.pop(node, 0)
        self.locked[node] = max(self.locked[node] - amount, 0.0)
        return amount, self._raw_rs.pop(node, None)

    def _measured_upload(self, node: int) -> float:
        return float(self.profiles[node].upload_mbps * self.rng.lognormal(0.0, 0.1))

    def _contact(self, node: int, now: float) -> None:
        """Probes and GPU telemetry gathered whenever the orchestrator talks to the node."""
        profile = self.profiles[node]
        node_id = profile.node_id
        lost = self.rng.random(PROBES_PER_CONTACT) < profile.loss
        rtts = profile.rtt_ms + np.abs(self.rng.normal(0.0, profile.jitter_ms, PROBES_PER_CONTACT))
        self.observe(*(Probe(node_id, now, None if is_lost else rtt)
                       for is_lost, rtt in zip(lost.tolist(), rtts.tolist(), strict=True)))
        throttled = self.rng.random(GPU_SAMPLES_PER_CONTACT) < profile.throttle_rate
        # Consumer GPUs run warmer the more they throttle; throttling starts in the 80s.
        temperatures = 65.0 + 25.0 * profile.throttle_rate + self.rng.normal(
            0.0, 3.0, GPU_SAMPLES_PER_CONTACT)
        self.observe(GpuReport(node_id, tuple(GpuSample(
            at=now, temperature_c=temperature,
            sm_clock_mhz=MAX_SM_CLOCK_MHZ * (1.0 - THROTTLE_SLOWDOWN if hot else 1.0),
            max_sm_clock_mhz=MAX_SM_CLOCK_MHZ,
            throttle_reasons=THROTTLED_REASON if hot else 0, utilization_pct=98.0,
            memory_used_mb=6000.0, memory_total_mb=profile.vram_gb * 1024.0,
            power_w=300.0, power_limit_w=350.0)
            for hot, temperature in zip(throttled.tolist(), temperatures.tolist(), strict=True))))

    def _handshake(self, node: int, now: float) -> None:
        profile = self.profiles[node]
        tier = handshake_tier(profile, self.popw)
        validity = (self.popw.high_validity_s if tier is Tier.HIGH
                    else self.popw.standard_validity_s)
        self.verdict_expires[node] = now + validity
        self.observe(Handshake(PopwVerdict(profile.node_id, tier is not Tier.BACKGROUND, tier,
                                           now, now + validity, (),
                                           GPU_CLASSES[profile.gpu].popw_class)))
