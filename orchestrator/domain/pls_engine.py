"""The one Predictive Latency Staking engine: everything PLS decides, in one pure object.

`PlsEngine` owns the `ReliabilityBook` (RS), the `OnlineRecalibrator` that maps raw RS onto
the completion rate observed so far (fed with the raw RS each placement was made at and how
that attempt ended), the daily population-prior refit, placement ranking (`PlsPolicy`:
expected cost, probation, exploration, the RS floor and risk-priced collateral), `LeaseHold`
through shared silences, Young/Daly checkpoint intervals from each node's measured checkpoint
cost, and the `StakingPolicy` (handshakes, slashes, tiers) with its epoch readings.

Two drivers feed it the same typed observations (`domain.pls_observations`), through one
door, `PlsEngine.apply`: `services.pls.PlsService` (adds persistence, locking and the outbox;
its observation log applies each committed row) and `simulation.pls_driver.PlsDriver` (adds a
virtual clock and a modelled world). The guards on what an observation may change (a session
starts only for a node not in one, ends only for one that is, nothing is learnt about a node
the engine does not know) live in `apply`, so they cannot differ between the two. Whatever
the churn benchmark credits to PLS runs here, hence in both.

The prior is refitted before the first session event at or past each `prior_refit_s`
boundary (UTC midnight by default), so replaying the stored session events in time order
(`services.pls_replay`) refits at the same points and rebuilds the same prior.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from orchestrator.domain import pls_observations as obs
from orchestrator.domain.calibration import OnlineRecalibrator
from orchestrator.domain.checkpointing import CheckpointCost, CheckpointPolicy
from orchestrator.domain.collateral import CollateralPolicy
from orchestrator.domain.continuity import ProgressProof
from orchestrator.domain.matching import Candidate
from orchestrator.domain.pls import (
    REFERENCE_SPEED,
    LeaseHold,
    Placement,
    PlsPolicy,
    RankedRows,
    faster_node_wait_s,
)
from orchestrator.domain.popw import PopwConfig, PopwVerdict
from orchestrator.domain.reliability import (
    GpuSample,
    ProbeSample,
    ReliabilityBook,
    TaskOutcome,
    UploadSample,
)
from orchestrator.domain.score_commitment import telemetry_digest
from orchestrator.domain.slashing import (
    PolicyActions,
    ProgressVerdict,
    SlashingConfig,
    StakingPolicy,
)
from orchestrator.domain.types import TaskNeeds, Tier

NO_EVIDENCE = bytes(32)  # readings at or above the demotion threshold never back a slash
MIN_CHECKPOINT_HORIZON_S = 60.0  # the MTBF is read over at least this long a task


@dataclass(frozen=True, slots=True)
class PlsConfig:
    """Every PLS knob, for the service and the simulator alike."""

    min_rs: float = 0.5  # a placement needs RS(node, task duration) at least this...
    floor_share: float = 0.25  # ...while this share of free candidates clear it (`rank_rows`)
    score_horizon_s: float = 3600.0  # T of the RS readings observed and committed per epoch
    epoch_s: float = 3600.0
    prior_refit_s: float = 86_400.0  # the population prior is refitted from the grid daily
    recalibrate_after: int = 500  # ended attempts before raw RS is mapped onto outcomes
    recalibrate_every: int = 1_000  # ended attempts between refits of that map
    probe_timeout_s: float = 10.0  # an unanswered probe counts as lost after this
    gap_persist_s: float = 5.0
    stake_ttl_s: float = 15.0  # how long a free-stake read from the chain is reused
    # A provider's standing reservation lasts this long from a raise, and is extended when a
    # placement finds less than half of it left: longer than an attempt lasts until its
    # abandonment slash is decided, so assigned collateral is slashable while it matters.
    reservation_s: float = 7 * 24 * 3600.0
    max_sample_age_s: float = 600.0  # agent samples older than this are refused
    explore_seed: int = 0  # the exploration draw's generator (a run is reproducible)
    # A task that would run past its job's critical path on the best free node waits for a
    # busy faster one, for at most the lateness that node would save (`faster_node_wait_s`).
    wait_for_faster: bool = True
    collateral: CollateralPolicy = field(default_factory=CollateralPolicy)
    checkpoints: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    popw: PopwConfig = field(default_factory=PopwConfig)
    slashing: SlashingConfig = field(default_factory=SlashingConfig)
    lease_hold: LeaseHold = field(default_factory=LeaseHold)


@dataclass(frozen=True, slots=True)
class Reading:
    """One node's RS over the score horizon and the digest of its telemetry (the evidence a
    slash or an epoch leaf carries)."""

    rs: float
    digest: bytes


@dataclass(frozen=True, slots=True)
class LoneHold:
    """A task whose node went silent alone, its lease kept for `LeaseHold.lone_grace_s`: the
    abandonment it becomes if the node is not back in time, as known at the DEAD verdict (a
    silent node reports no progress, so the work lost then is the work lost at the lapse)."""

    task_id: str
    collateral: int
    raw_rs: float | None
    at: float  # the DEAD verdict: the abandonment is dated here
    value: int | None = None
    rework_share: float | None = None


class PlsEngine:
    """The PLS state of one grid; not thread-safe (the service holds a lock around it)."""

    def __init__(self, config: PlsConfig | None = None) -> None:
        self.config = config or PlsConfig()
        self.book = ReliabilityBook()
        self.recalibrator = OnlineRecalibrator(min_outcomes=self.config.recalibrate_after,
                                               refit_every=self.config.recalibrate_every)
        self.book.set_recalibrator(self.recalibrator)
        self.placement = PlsPolicy(self.book, self.config.collateral,
                                   min_rs=self.config.min_rs, seed=self.config.explore_seed,
                                   floor_share=self.config.floor_share)
        self.staking = StakingPolicy(self.config.slashing)
        self.prior_refits = 0
        self._next_refit: float | None = None
        self._providers: dict[str, str] = {}
        self._checkpoint_cost: dict[str, CheckpointCost] = {}
        self._lone_holds: dict[str, list[LoneHold]] = {}
        self._lone_reported: set[tuple[str, str, float]] = set()  # lapsed holds reported
        # Per book row: the render speed of the GPU class the node's last passing handshake
        # proved (`GpuClass.render_speed`); the reference card's until one passes.
        self._speeds: NDArray[np.float64] = np.empty(0)

    # ----- the one way in -----------------------------------------------------------
    def apply(self, observation: obs.Observation) -> None:
        """Learn one observation: the transition table every driver feeds the engine through.
        An observation about a node the engine does not know changes nothing (a node is
        known from its `NodeKnown` on), and neither does one that repeats what the engine
        already holds (a start for a node in a session, an end for one in none); an end
        dated before its session's start (logged by a replica whose clock is behind) ends
        the session at its start."""
        match observation:
            case obs.NodeKnown():  # (re)registered or logged in: known (idempotent)
                self.register(observation.node_id, observation.provider,
                              region=observation.region,
                              network=observation.network or observation.region,
                              at=observation.registered_at, tier=Tier(observation.tier))
                if observation.session_key is not None:  # its process's ephemeral key
                    self.staking.session_bound(observation.node_id, observation.session_key)
            case obs.Departed():  # one sweep's DEAD verdicts, together (unknown: skipped)
                self.departed(observation.node_ids, observation.at)
            case obs.Heartbeats():  # each known node's beat
                for node_id, at in observation.beats:
                    if self.knows(node_id):
                        self.heartbeat(node_id, at)
            case obs.Handshake():  # the verdict: its tier, and the speed placement plans with
                if self.knows(observation.verdict.node_id):
                    self.handshake(observation.verdict)
            case _ if not self.knows(observation.node_id):
                pass  # about a node never registered here: nothing to learn
            case obs.Probe():  # a timed probe, or a lost one (no RTT)
                self.probe(observation.node_id, ProbeSample(observation.sent, observation.rtt_ms))
            case obs.GpuReport():  # agent GPU samples, in time order
                for sample in observation.samples:
                    self.gpu(observation.node_id, sample)
            case obs.SessionStarted():  # offline -> online; one in a session stays in it
                if not self.online(observation.node_id, observation.at):
                    self.session_started(observation.node_id, observation.at)
            case obs.SessionEnded():  # online -> offline; a node in no session stays out
                began = self.book.session_start(observation.node_id)
                if began is not None:  # never before it began (a replica's clock behind)
                    self.session_ended(observation.node_id, max(observation.at, began),
                                       observation.abrupt)
            case obs.Abandoned():  # a revoked lease: the recalibrator, then the staking policy
                self.abandoned(observation.node_id, str(observation.task_id),
                               observation.collateral, observation.raw_rs, observation.at,
                               value=observation.value, rework_share=observation.rework_share,
                               announced=observation.announced)
            case obs.LoneHeld():  # a lone silent node's lease kept for the grace
                self.hold_lone(observation.node_id, LoneHold(
                    str(observation.task_id), observation.collateral, observation.raw_rs,
                    observation.at, observation.value, observation.rework_share))
            case obs.Upload():  # an upload the orchestrator timed
                self.upload(observation.node_id, UploadSample(observation.at, observation.mbps))
            case obs.CheckpointCost():  # Young/Daly's C for this node
                self.checkpoint_measured(observation.node_id, observation.seconds)
            case obs.AttemptEnded():  # the record, the recalibrator, and a failed check's slash
                self._attempt_ended(observation)
            case obs.StartFailed():  # a reservation never started: the record, the recalibrator
                self.outcome(observation.node_id, TaskOutcome.ABANDONED)
                self.attempt_ended(observation.raw_rs, False)
            case obs.TierDecided():  # a tier decided by the leader's policy or the chain
                self.staking.adopt_tier(observation.node_id, Tier(observation.tier),
                                        observation.at)

    def _attempt_ended(self, ended: obs.AttemptEnded) -> None:
        """A completed attempt counts toward the record and teaches the recalibrator; a failed
        verification goes to the staking policy with the collateral locked for the task; any
        other outcome counts toward the record and teaches the recalibrator a failure."""
        outcome = TaskOutcome(ended.outcome)
        if outcome is TaskOutcome.COMPLETED:
            self.completed(ended.node_id, ended.raw_rs)
        elif outcome is TaskOutcome.FAILED_VERIFICATION:
            self.verification_failed(
                ended.node_id, str(ended.task_id), ended.collateral, ended.raw_rs, ended.at,
                evidence=None if ended.evidence is None else bytes.fromhex(ended.evidence))
        else:
            self.outcome(ended.node_id, outcome)
            self.attempt_ended(ended.raw_rs, False)

    # ----- nodes ----------------------------------------------------------------------
    def register(self, node_id: str, provider: str, *, region: str, network: str, at: float,
                 tier: Tier) -> int:
        """Know a node (idempotent); returns its book row."""
        if node_id not in self._providers:
            self.staking.register(node_id, provider, region, network, at, tier)
            self._providers[node_id] = provider
            self._checkpoint_cost[node_id] = CheckpointCost()
        row = self.book.add_node(node_id)
        if row >= self._speeds.size:
            self._speeds = np.concatenate(
                (self._speeds, np.full(row + 1 - self._speeds.size, REFERENCE_SPEED)))
        return row

    def knows(self, node_id: str) -> bool:
        return node_id in self._providers

    def provider_of(self, node_id: str) -> str:
        return self._providers[node_id]

    def node_ids(self) -> list[str]:
        return sorted(self._providers)

    def online(self, node_id: str, now: float) -> bool:
        return self.book.uptime(node_id, now) is not None

    # ----- sessions ---------------------------------------------------------------------
    def session_started(self, node_id: str, at: float) -> None:
        """The node is online from `at` (a registration or a return after a DEAD verdict)."""
        self._maybe_refit_prior(at)
        self.book.session_started(node_id, at)
        self.staking.node_returned(node_id, at)
        grace = self.config.lease_hold.lone_grace_s
        lapsed = [h for h in self._lone_holds.pop(node_id, ()) if h.at + grace <= at]
        if lapsed:  # back too late: those leases lapsed and still count as abandoned
            self._lone_holds[node_id] = lapsed

    def departed(self, node_ids: Iterable[str], now: float) -> dict[str, float]:
        """The detector called these nodes DEAD, all at once: every departure is recorded
        first (a silence shared within the batch counts), then `LeaseHold` says how long to
        keep each one's leases (0: revoke now, and the departure is the node's own)."""
        known = [node_id for node_id in node_ids if node_id in self._providers]
        for node_id in known:
            self.staking.node_departed(node_id, now)
        return self.lease_holds(known, now)

    def lease_holds(self, node_ids: Iterable[str], now: float) -> dict[str, float]:
        """How long to keep each known node's leases after its DEAD verdict, its departure
        recorded (`departed`, or `apply` of a `Departed`): 0 revokes now."""
        return {node_id: self.config.lease_hold.for_node(self.staking, node_id, now)
                for node_id in node_ids if node_id in self._providers}

    def hold_lone(self, node_id: str, hold: LoneHold) -> None:
        """A lone silent node's lease is kept for the grace instead of revoked at once."""
        self._lone_holds.setdefault(node_id, []).append(hold)

    def lone_held(self, node_id: str) -> bool:
        return node_id in self._lone_holds

    def lone_holds_due(self, now: float) -> list[tuple[str, LoneHold]]:
        """Held tasks of nodes silent for the whole lone grace, oldest verdict first: each is
        to be reported as an abandonment dated at its DEAD verdict (`abandoned`, which drops
        the hold), so the outage window and the slashing rules judge the departure, not the
        revocation."""
        grace = self.config.lease_hold.lone_grace_s
        due = [(node_id, hold) for node_id, holds in self._lone_holds.items()
               for hold in holds if hold.at + grace <= now]
        return sorted(due, key=lambda pair: (pair[1].at, pair[0], pair[1].task_id))

    def session_ended(self, node_id: str, at: float, abrupt: bool) -> None:
        """`abrupt`: the node's own departure; a drain or a shared silence is censored."""
        self._maybe_refit_prior(at)
        self.book.session_ended(node_id, at, abrupt)

    def _maybe_refit_prior(self, at: float) -> None:
        period = self.config.prior_refit_s
        if self._next_refit is None:
            self._next_refit = (math.floor(at / period) + 1) * period
            return
        if at < self._next_refit:
            return
        self._next_refit = (math.floor(at / period) + 1) * period
        try:
            self.book.refit_prior(at)
            self.prior_refits += 1
        except ValueError:
            pass  # no abrupt departure observed yet: keep the prior we have

    # ----- telemetry --------------------------------------------------------------------
    def probe(self, node_id: str, sample: ProbeSample) -> None:
        self.book.record_probe(node_id, sample)

    def gpu(self, node_id: str, sample: GpuSample) -> None:
        self.book.record_gpu(node_id, sample)

    def heartbeat(self, node_id: str, at: float) -> None:
        self.book.record_heartbeat(node_id, at)

    def upload(self, node_id: str, sample: UploadSample) -> None:
        self.book.record_upload(node_id, sample)

    def checkpoint_measured(self, node_id: str, seconds: float) -> None:
        self._checkpoint_cost[node_id].observe(seconds)

    def handshake(self, verdict: PopwVerdict) -> None:
        """The staking policy's tier, and the render speed placement plans with: the class a
        passing handshake proved; a failed one (not the GPU it claims) falls back to the
        reference card."""
        self.staking.handshake(verdict)
        if verdict.node_id in self._providers:
            proved = self.config.popw.gpu_classes.get(verdict.gpu_class or "")
            speed = proved.render_speed if verdict.passed and proved else REFERENCE_SPEED
            self._speeds[self.book.index_of(verdict.node_id)] = speed

    def speeds(self, rows: NDArray[np.intp]) -> NDArray[np.float64]:
        """Render speed (relative to the reference card) of each book row."""
        return self._speeds[rows]

    def speed(self, node_id: str) -> float:
        return float(self._speeds[self.book.index_of(node_id)])

    # ----- attempts ---------------------------------------------------------------------
    def attempt_ended(self, raw_rs: float | None, finished: bool) -> None:
        """Teach the recalibrator: the raw RS the attempt was placed at and whether it
        finished (a lost, revoked or wrongly verified attempt did not)."""
        if raw_rs is not None:
            self.recalibrator.observe(raw_rs, finished)

    def completed(self, node_id: str, raw_rs: float | None) -> None:
        self.book.record_task_outcome(node_id, TaskOutcome.COMPLETED)
        self.attempt_ended(raw_rs, True)

    def outcome(self, node_id: str, outcome: TaskOutcome) -> None:
        """A task outcome that is not the end of a placed attempt (replayed on restart)."""
        self.book.record_task_outcome(node_id, outcome)

    def abandoned(self, node_id: str, task_id: str, collateral: int, raw_rs: float | None,
                  at: float, *, value: int | None = None, rework_share: float | None = None,
                  announced: bool = False) -> None:
        """The node's lease was revoked because it left (dated at its DEAD verdict).
        `value` and `rework_share` (the task's value and the share of it lost since the last
        checkpoint) price the slash at the damage done; without them the whole collateral is
        at stake. `announced`: a drain that handed the checkpoint back, never slashed."""
        if (node_id, task_id, at) in self._lone_reported:
            return  # a lapsed lone hold reported twice (by the sweep and by a decision)
        holds = self._lone_holds.get(node_id, [])
        if any(h.task_id == task_id for h in holds):
            self._lone_reported.add((node_id, task_id, at))
            rest = [h for h in holds if h.task_id != task_id]
            if rest:
                self._lone_holds[node_id] = rest
            else:
                del self._lone_holds[node_id]
        self.attempt_ended(raw_rs, False)
        damage = (None if value is None or rework_share is None else
                  self.config.slashing.abandonment_damage(value, min(max(rework_share, 0.0), 1.0)))
        self.staking.task_abandoned(node_id, task_id, collateral, at, self.digest(node_id, at),
                                    damage=damage, announced=announced)

    def progress_shown(self, proof: ProgressProof, new_chunks: Iterable[bytes], now: float,
                       departed_at: float) -> ProgressVerdict:
        """A node back from the DEAD verdict at `departed_at` shows what its process rendered
        meanwhile (`StakingPolicy.progress_shown`); when that withdraws the abandonment, the
        departure also leaves the node's record: the session ended censored, not abrupt."""
        verdict = self.staking.progress_shown(proof, new_chunks, now)
        if verdict is ProgressVerdict.WITHDRAWN:
            self.book.departure_censored(proof.node_id, departed_at)
        return verdict

    def verification_failed(self, node_id: str, task_id: str, collateral: int,
                            raw_rs: float | None, at: float, *,
                            evidence: bytes | None = None) -> None:
        """`evidence`: the digest of the verification's evidence (else the telemetry's)."""
        self.book.record_task_outcome(node_id, TaskOutcome.FAILED_VERIFICATION)
        self.attempt_ended(raw_rs, False)
        self.staking.verification_failed(node_id, task_id, collateral, at,
                                         evidence or self.digest(node_id, at))

    # ----- placement --------------------------------------------------------------------
    def rank(self, rows: NDArray[np.intp], prices: NDArray[np.float64],
             free_stake: NDArray[np.float64], needs: TaskNeeds, now: float) -> RankedRows:
        """Eligible, idle candidates (book rows) best first (`PlsPolicy.rank_rows`: the RS
        floor, stake covering the collateral, probation, exploration) at each node's verified
        speed (`PlsPolicy.rank_at_speeds`; `prices` are asked per GPU-hour). One exploration
        draw per call."""
        return self.placement.rank_at_speeds(rows, prices, self._speeds[rows], free_stake,
                                             needs, now)

    def rank_candidates(self, candidates: Sequence[Candidate], needs: TaskNeeds, now: float,
                        free_stake: Mapping[str, int], *, explore: bool = True
                        ) -> list[Placement]:
        """The same ranking over `matching.Candidate`s (the service): eligible ones with a
        free slot, ties to the emptier node then the node id, each with the exact collateral
        its provider's free stake covers. Nodes the engine does not know are no candidates.
        `explore` False: no exploration draw (`PlsPolicy.rank_rows`)."""
        known = [c for c in candidates if c.spec.node_id in self._providers]
        return self.placement.rank(known, needs, now, free_stake, speeds=self._speeds,
                                   explore=explore)

    def runs_late(self, needs: TaskNeeds, speed: float) -> bool:
        """Whether the task would run past its job's critical path on a node of `speed`, so
        that a faster node may be worth waiting for (what that is costs a look at the grid,
        taken only then)."""
        return self.config.wait_for_faster and faster_node_wait_s(needs, speed, math.inf) > 0.0

    def wait_until(self, needs: TaskNeeds, chosen_speed: float, faster_speed: float, *,
                   queued_at: float, deadline: float, p_fail: float) -> float:
        """Until when a task queued at `queued_at` should wait for a busy node of
        `faster_speed` rather than start on the best free one (`faster_node_wait_s`), and
        never so long that the chosen node could not meet the job's deadline with its
        expected re-run: the task's wall time there, and again with the chance `p_fail` that
        the attempt is lost. A time in the past: place it now."""
        if not self.config.wait_for_faster:
            return -math.inf
        budget = faster_node_wait_s(needs, chosen_speed, faster_speed)
        if budget <= 0.0:
            return -math.inf
        wall = needs.expected_duration_s / chosen_speed
        return min(queued_at + budget, deadline - wall * (1.0 + min(max(p_fail, 0.0), 1.0)))

    def collateral(self, needs: TaskNeeds, p_fail: float) -> int:
        """The exact collateral to lock for a placement ranked at `p_fail`."""
        return self.config.collateral.required(needs.value, p_fail, needs.expected_duration_s)

    def checkpoint_interval_s(self, node_id: str, now: float, wall_s: float) -> float:
        """Young/Daly interval from the node's predicted MTBF over the task and its measured
        checkpoint cost (the EWMA's prior until a first checkpoint was timed)."""
        mtbf = self.book.predicted_mtbf_s(node_id, now, max(wall_s, MIN_CHECKPOINT_HORIZON_S))
        return self.config.checkpoints.interval(self._checkpoint_cost[node_id].value,
                                                max(mtbf, 1.0))

    # ----- scoring, slashing and epochs ------------------------------------------------
    def digest(self, node_id: str, now: float) -> bytes:
        return telemetry_digest(self.book.summary(node_id, now))

    def readings(self, node_ids: Sequence[str], now: float, *, all_digests: bool = True
                 ) -> dict[str, Reading]:
        """RS over the score horizon of `node_ids`; the digest is computed for every node
        (epoch leaves need it) or, with `all_digests=False`, only where it may back a slash."""
        if not node_ids:
            return {}
        rows = np.fromiter((self.book.index_of(n) for n in node_ids), dtype=np.intp,
                           count=len(node_ids))
        scores = self.book.score_many(rows, now, self.config.score_horizon_s).tolist()
        demote_below = self.staking.config.demote_below
        return {node_id: Reading(rs, self.digest(node_id, now)
                                 if all_digests or rs < demote_below else NO_EVIDENCE)
                for node_id, rs in zip(node_ids, scores, strict=True)}

    def decide(self, readings: Mapping[str, Reading], bonded: Mapping[str, int], now: float
               ) -> PolicyActions:
        """Observe the readings, then let the staking policy decide slashes and tiers."""
        for node_id, reading in readings.items():
            self.staking.observe_score(node_id, reading.rs, now, reading.digest)
        return self.staking.decide(now, bonded)
