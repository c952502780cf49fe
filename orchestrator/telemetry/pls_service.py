"""The service's one Predictive Latency Staking state: a `ReliabilityBook`, a `StakingPolicy`,
a PoPW `ChallengeBook` and the PLS placement policy, fed by the API and the periodic jobs.

Every input is written to the DB in the caller's transaction and then applied in memory, so
a restarted orchestrator rebuilds the same book from the DB (`rebuild`). The pure domain does
all judging; this module only routes events to it, persists them, and turns its decisions
into outbox actions. One lock guards the in-memory state: routes run in a thread pool.

Telemetry metrics stored in `telemetry_samples`: `rtt_ms` (a probe the orchestrator timed),
`probe_lost` (a probe not echoed within `probe_timeout_s`), `hb_gap_s` (a heartbeat gap of at
least `gap_persist_s`; shorter ones only live in memory), `gpu.<field>` (one row per field of
an agent-reported `GpuSample`, grouped back by node and time).
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.chain.views import ProviderStake
from orchestrator.db import crud
from orchestrator.db import pls as store
from orchestrator.db.models import Node, SlashRecord, Task
from orchestrator.db.placement import Admission
from orchestrator.domain.checkpointing import CheckpointCost, CheckpointPolicy
from orchestrator.domain.collateral import CollateralPolicy
from orchestrator.domain.matching import ScoreFn
from orchestrator.domain.pls import LeaseHold, PlsPolicy
from orchestrator.domain.popw import (
    Challenge,
    ChallengeBook,
    PopwAnswer,
    PopwConfig,
    PopwFacts,
    PopwReason,
    PopwVerdict,
)
from orchestrator.domain.reliability import (
    EpochEntry,
    GpuSample,
    ProbeSample,
    ReliabilityBook,
    RsComponents,
    TaskOutcome,
    commit_epoch,
    telemetry_digest,
)
from orchestrator.domain.slashing import SlashDecision, SlashingConfig, StakingPolicy
from orchestrator.domain.types import NodeSpec, SlashReason, TaskNeeds, Tier
from orchestrator.telemetry.metrics import MeshMetrics

log = logging.getLogger("orchestrator.pls")

GPU_FIELDS = tuple(f.name for f in fields(GpuSample) if f.name != "at")
# Verdicts that never consumed the nonce: anyone can send them, so they are not the node's.
NOT_THE_NODES = frozenset({PopwReason.UNKNOWN_CHALLENGE, PopwReason.REPLAYED, PopwReason.FORGED,
                           PopwReason.WRONG_NODE})


class StakeReader(Protocol):
    """The chain's view of a provider's stake (`MeshChain` satisfies it)."""

    def provider_stake(self, provider: str) -> ProviderStake: ...


@dataclass(frozen=True, slots=True)
class PlsConfig:
    min_rs: float = 0.5  # a lease needs RS(node, task duration) at least this
    score_horizon_s: float = 3600.0  # T of the RS readings observed and committed per epoch
    epoch_s: float = 3600.0
    probe_timeout_s: float = 10.0  # an unanswered probe counts as lost after this
    gap_persist_s: float = 5.0
    stake_ttl_s: float = 15.0  # how long a free-stake read from the chain is reused
    max_sample_age_s: float = 600.0  # agent samples older than this are refused
    collateral: CollateralPolicy = field(default_factory=CollateralPolicy)
    checkpoints: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    popw: PopwConfig = field(default_factory=PopwConfig)
    slashing: SlashingConfig = field(default_factory=SlashingConfig)
    lease_hold: LeaseHold = field(default_factory=LeaseHold)


class StakeUnavailable(Exception):
    """The chain could not be read; placement fails closed."""


class StakeCache:
    """Free stake per provider, read through the SDK and reused for `ttl_s`; collateral this
    process locked since the read is subtracted, so one batch cannot overspend a provider."""

    def __init__(self, reader: Callable[[], StakeReader], ttl_s: float) -> None:
        self._reader = reader
        self._ttl_s = ttl_s
        self._cached: dict[str, tuple[float, ProviderStake]] = {}
        self._reserved: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def stake(self, provider: str, now: float) -> ProviderStake:
        with self._lock:
            hit = self._cached.get(provider)
            if hit is not None and now - hit[0] < self._ttl_s:
                return hit[1]
        try:
            stake = self._reader().provider_stake(provider)
        except Exception as exc:
            raise StakeUnavailable(f"cannot read the stake of {provider}: {exc}") from None
        with self._lock:
            self._cached[provider] = (now, stake)
            self._reserved.pop(provider, None)
        return stake

    def free(self, provider: str, now: float) -> int:
        stake = self.stake(provider, now)
        with self._lock:
            return stake.free - self._reserved.get(provider, 0)

    def reserve(self, provider: str, amount: int) -> None:
        with self._lock:
            self._reserved[provider] += amount


@dataclass(frozen=True, slots=True)
class SweepFacts:
    """What a failure sweep found, for the staking side."""

    dead: Sequence[tuple[str, bool]]  # (node id, abrupt: neither draining nor a shared silence)
    abandoned: Sequence[tuple[str, int]]  # (node id, task id) running on a node that died
    returned: Sequence[str]


@dataclass(frozen=True, slots=True)
class DecideResult:
    slashes: tuple[SlashDecision, ...]
    tiers: tuple[tuple[str, Tier], ...]


@dataclass(frozen=True, slots=True)
class ScoreProof:
    epoch: int
    root: bytes
    provider: str
    score_bps: int
    telemetry_digest: bytes
    proof: list[bytes]


class PlsService:
    def __init__(self, config: PlsConfig, *, stake_reader: Callable[[], StakeReader],
                 metrics: MeshMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self.book = ReliabilityBook()
        self.policy = StakingPolicy(config.slashing)
        self.challenges = ChallengeBook(config.popw)
        self.placement = PlsPolicy(self.book, config.collateral)
        self.stake = StakeCache(stake_reader, config.stake_ttl_s)
        self._lock = threading.RLock()
        self._popw_lock = threading.Lock()  # judging: single use of each nonce
        self._providers: dict[str, str] = {}
        self._verdicts: dict[str, PopwVerdict] = {}
        self._probes: dict[str, dict[bytes, float]] = defaultdict(dict)  # node -> nonce -> sent
        self._recent_rtts: dict[str, deque[tuple[float, float | None]]] = defaultdict(
            lambda: deque(maxlen=4 * config.popw.ping_rounds))
        self._last_beat: dict[str, float] = {}
        self._checkpoint_cost: dict[str, CheckpointCost] = defaultdict(CheckpointCost)

    # ----- nodes and sessions ----------------------------------------------------------
    def _know(self, node: Node) -> None:
        if node.id not in self._providers:
            self.policy.register(node.id, node.provider, node.region, node.region,
                                 node.registered_at, Tier(node.tier))
            self.book.add_node(node.id)
            self._providers[node.id] = node.provider

    def lease_holds(self, node_ids: Sequence[str], now: float) -> dict[str, float]:
        """Nodes the detector just called DEAD, all at once: how long to keep each one's leases.
        Their departures are recorded first, so a silence shared within this sweep counts."""
        with self._lock:
            known = [node_id for node_id in node_ids if node_id in self._providers]
            for node_id in known:
                self.policy.node_departed(node_id, now)
            holds = {node_id: self.config.lease_hold.for_node(self.policy, node_id, now)
                     for node_id in known}
        return {node_id: seconds for node_id, seconds in holds.items() if seconds > 0.0}

    def node_registered(self, session: Session, *, node: Node, now: float) -> None:
        """A node (re)registered: it is online from now on."""
        with self._lock:
            self._know(node)
            if self.book.uptime(node.id, now) is None:
                store.open_session(session, node_id=node.id, at=now)
                self.book.session_started(node.id, now)

    def _end_session(self, session: Session, node_id: str, now: float, abrupt: bool) -> None:
        if self.book.uptime(node_id, now) is not None:
            store.close_session(session, node_id=node_id, at=now, abrupt=abrupt)
            self.book.session_ended(node_id, now, abrupt)

    def after_sweep(self, session: Session, *, facts: SweepFacts, now: float) -> None:
        """Departures end sessions (abrupt = DEAD; censored = drained, or a silence shared with
        peers), running tasks on a dead node are reported as abandoned with the collateral
        locked for them, returns start a new session; then overdue probes count as lost."""
        with self._lock:
            for node_id, abrupt in facts.dead:
                if node_id not in self._providers:
                    continue
                self._end_session(session, node_id, now, abrupt)
                if abrupt:
                    self.policy.node_departed(node_id, now)
            for node_id, task_id in facts.abandoned:
                lock = store.latest_lock(session, task_id=task_id, node_id=node_id)
                if node_id in self._providers and lock is not None:
                    self.policy.task_abandoned(node_id, str(task_id), lock.amount, now,
                                               self._digest(node_id, now))
            for node_id in facts.returned:
                if node_id in self._providers and self.book.uptime(node_id, now) is None:
                    store.open_session(session, node_id=node_id, at=now)
                    self.book.session_started(node_id, now)
                    self.policy.node_returned(node_id, now)
            self._expire_probes(session, now, list(self._probes))

    def on_heartbeats(self, session: Session, beats: Mapping[str, float]) -> None:
        """Heartbeat gaps (called from the write-behind flush, in its transaction)."""
        rows: list[tuple[str, str, float, float]] = []
        with self._lock:
            for node_id, at in beats.items():
                if node_id not in self._providers:
                    continue
                last = self._last_beat.get(node_id)
                if last is not None and at - last >= self.config.gap_persist_s:
                    rows.append((node_id, "hb_gap_s", at, at - last))
                self._last_beat[node_id] = at if last is None else max(at, last)
                self.book.record_heartbeat(node_id, at)
        store.add_samples(session, rows=rows)

    # ----- telemetry -------------------------------------------------------------------
    def record_gpu(self, session: Session, *, node_id: str, samples: Sequence[GpuSample],
                   now: float) -> None:
        """Agent-reported samples: self-reported, so the book lets them only lower RS."""
        for sample in samples:
            if not now - self.config.max_sample_age_s <= sample.at <= now + 5.0:
                raise ValueError(f"sample time {sample.at} is not within the last "
                                 f"{self.config.max_sample_age_s:.0f} s")
        store.add_samples(session, rows=[(node_id, f"gpu.{name}", s.at, float(getattr(s, name)))
                                         for s in samples for name in GPU_FIELDS])
        with self._lock:
            for sample in sorted(samples, key=lambda s: s.at):
                self.book.record_gpu(node_id, sample)

    def issue_probe(self, session: Session, *, node_id: str, now: float) -> bytes:
        """A ping nonce; its RTT is what the orchestrator measures until the echo."""
        nonce = secrets.token_bytes(16)
        with self._lock:
            self._expire_probes(session, now, [node_id])
            self._probes[node_id][nonce] = now
        return nonce

    def echo_probe(self, session: Session, *, node_id: str, nonce: bytes, now: float) -> float:
        """The node echoed a probe: record the RTT; a stale or unknown nonce is refused."""
        with self._lock:
            self._expire_probes(session, now, [node_id])
            sent = self._probes[node_id].pop(nonce, None)
            if sent is None:
                raise KeyError("unknown or expired probe")
            rtt_ms = max(now - sent, 0.0) * 1000.0
            self._record_probe(node_id, ProbeSample(sent, rtt_ms))
        store.add_samples(session, rows=[(node_id, "rtt_ms", sent, rtt_ms)])
        return rtt_ms

    def _record_probe(self, node_id: str, sample: ProbeSample) -> None:
        self.book.record_probe(node_id, sample)
        self._recent_rtts[node_id].append((sample.at, sample.rtt_ms))

    def _expire_probes(self, session: Session, now: float, node_ids: Sequence[str]) -> None:
        rows: list[tuple[str, str, float, float]] = []
        for node_id in node_ids:
            pending = self._probes.get(node_id)
            if not pending or node_id not in self._providers:
                continue
            for nonce, sent in list(pending.items()):
                if now - sent > self.config.probe_timeout_s:
                    del pending[nonce]
                    self._record_probe(node_id, ProbeSample(sent, None))
                    rows.append((node_id, "probe_lost", sent, 1.0))
        store.add_samples(session, rows=rows)

    def observe_checkpoint_cost(self, node_id: str, seconds: float) -> None:
        with self._lock:
            self._checkpoint_cost[node_id].observe(seconds)

    def task_outcome(self, session: Session, *, node_id: str, task_id: int,
                     outcome: TaskOutcome, now: float) -> None:
        store.add_outcome(session, node_id=node_id, task_id=task_id, outcome=outcome.value,
                          at=now)
        with self._lock:
            if node_id not in self._providers:
                return
            self.book.record_task_outcome(node_id, outcome)
            if outcome is TaskOutcome.FAILED_VERIFICATION:
                lock = store.latest_lock(session, task_id=task_id, node_id=node_id)
                self.policy.verification_failed(node_id, str(task_id),
                                                0 if lock is None else lock.amount, now,
                                                self._digest(node_id, now))

    # ----- PoPW handshake --------------------------------------------------------------
    def issue_challenge(self, session: Session, *, node_id: str, gpu_class: str,
                        now: float) -> Challenge:
        # Not under `_popw_lock`: `issue` computes nothing and only adds its own fresh nonce.
        challenge = self.challenges.issue(node_id, gpu_class, secrets.token_bytes(32), now)
        store.add_challenge(session, nonce=challenge.nonce, node_id=node_id,
                            gpu_class=gpu_class, issued_at=now, deadline=challenge.deadline)
        return challenge

    def judge_answer(self, session: Session, *, node_id: str, nonce: bytes, answer: PopwAnswer,
                     signature_valid: bool, gpu_under_load: Sequence[GpuSample],
                     now: float) -> PopwVerdict:
        """Judge one answer against the challenge in the DB (single use across restarts and
        replicas); a verdict that consumed the nonce is stored and given to the policy."""
        record = store.get_challenge(session, nonce=nonce)
        if record is not None and record.consumed_at is not None:
            return self._refused(node_id, PopwReason.REPLAYED, now)
        if record is not None:
            # issued by another replica or before a restart: rebuild it as issued (`issue`
            # refuses a nonce it already holds)
            with contextlib.suppress(ValueError):
                self.challenges.issue(record.node_id, record.gpu_class, nonce, record.issued_at)
        with self._popw_lock:
            rtts = self._handshake_rtts(node_id, since=record.issued_at if record else now)
            verdict = self.challenges.judge(PopwFacts(
                nonce, node_id, answer, now, signature_valid, rtts, tuple(gpu_under_load)), now)
        if set(verdict.reasons) & NOT_THE_NODES:
            self.metrics.handshakes.labels("failed", verdict.reasons[0].value).inc()
            return verdict
        if not store.consume_challenge(session, nonce=nonce, at=now):
            return self._refused(node_id, PopwReason.REPLAYED, now)
        store.add_verdict(session, node_id=node_id, nonce=nonce, passed=verdict.passed,
                          tier=int(verdict.tier), decided_at=verdict.decided_at,
                          expires_at=verdict.expires_at,
                          reasons=[r.value for r in verdict.reasons])
        with self._lock:
            self._verdicts[node_id] = verdict
            if node_id in self._providers:
                self.policy.handshake(verdict)
        self.metrics.handshakes.labels(
            "passed" if verdict.passed else "failed",
            verdict.reasons[0].value if verdict.reasons else "none").inc()
        return verdict

    def _refused(self, node_id: str, reason: PopwReason, now: float) -> PopwVerdict:
        self.metrics.handshakes.labels("failed", reason.value).inc()
        return PopwVerdict(node_id, False, Tier.BACKGROUND, now, now, (reason,))

    def _handshake_rtts(self, node_id: str, since: float) -> list[float | None]:
        """The orchestrator-timed probes of this node since the challenge, newest
        `ping_rounds` of them; rounds never echoed count as lost."""
        wanted = self.config.popw.ping_rounds
        with self._lock:
            measured = [rtt for at, rtt in self._recent_rtts.get(node_id, ()) if at >= since]
        measured = measured[-wanted:]
        return measured + [None] * (wanted - len(measured))

    # ----- placement gates -------------------------------------------------------------
    def effective_spec(self, spec: NodeSpec, now: float) -> NodeSpec:
        """The node with the tier work may use now: the policy's tier (demotions count at
        once), and HIGH only while a passing HIGH handshake is fresh."""
        with self._lock:
            tier = (self.policy.tier(spec.node_id) if spec.node_id in self._providers
                    else spec.tier)
            verdict = self._verdicts.get(spec.node_id)
        fresh_high = (verdict is not None and verdict.fresh(now) and verdict.tier is Tier.HIGH)
        if fresh_high and tier >= Tier.STANDARD:
            tier = Tier.HIGH
        elif tier is Tier.HIGH:
            tier = Tier.STANDARD
        return replace(spec, tier=tier)

    def components(self, node_id: str, now: float, duration_s: float) -> RsComponents | None:
        """The node's RS over `duration_s` and its factors, as placement sees them (None: a
        node this service does not know)."""
        with self._lock:
            if node_id not in self._providers:
                return None
            return self.book.components(node_id, now, duration_s)

    def admit(self, spec: NodeSpec, needs: TaskNeeds, now: float) -> Admission | None:
        """RS over the task's duration at least `min_rs`, and free stake covering the
        risk-priced collateral; None refuses (the chain being unreadable refuses too)."""
        with self._lock:
            if spec.node_id not in self._providers:
                return None
            rs = self.book.score(spec.node_id, now, needs.expected_duration_s)
        if rs < self.config.min_rs:
            return None
        amount = self.config.collateral.required(needs.value, 1.0 - rs,
                                                 needs.expected_duration_s)
        try:
            if self.stake.free(spec.provider, now) < amount:
                return None
        except StakeUnavailable as exc:
            log.warning("placement refused: %s", exc)
            return None
        return Admission(rs, amount)

    def score_fn(self, now: float) -> ScoreFn:
        """The PLS placement score (minus expected cost) for `matching.rank`; nodes this
        service has never seen rank last."""
        inner = self.placement.score_fn(now)

        def score(spec: NodeSpec, needs: TaskNeeds) -> float:
            with self._lock:
                if spec.node_id not in self._providers:
                    return -math.inf
                return inner(spec, needs)

        return score

    def reserved(self, session: Session, *, task_id: int, job_id: str, node_id: str,
                 provider: str, admission: Admission, now: float) -> None:
        """Lock the collateral of a placement, in the placement's transaction."""
        attempt = int(session.scalar(select(Task.attempts).where(Task.id == task_id)) or 0)
        store.add_lock(session, task_id=task_id, attempt=attempt, job_id=job_id,
                       node_id=node_id, provider=provider, amount=admission.collateral, at=now)
        crud.enqueue_chain_action(
            session, kind="lock", idempotency_key=f"lock:{task_id}:{attempt}", now=now,
            payload={"job_id": job_id, "providers": [provider],
                     "amounts": [str(admission.collateral)], "task_id": task_id})
        self.stake.reserve(provider, admission.collateral)

    def checkpoint_interval_s(self, node_id: str, now: float, duration_s: float) -> float:
        """Young/Daly interval from the node's predicted MTBF over the task and its measured
        checkpoint cost, within the policy's bounds."""
        policy = self.config.checkpoints
        with self._lock:
            if node_id not in self._providers:
                return policy.min_s
            mtbf = self.book.predicted_mtbf_s(node_id, now, max(duration_s, 1.0))
            cost = self._checkpoint_cost[node_id].value
        return policy.min_s if mtbf <= 0 else policy.interval(cost, mtbf)

    # ----- slashing, demotion and epochs ------------------------------------------------
    def _digest(self, node_id: str, now: float) -> bytes:
        return telemetry_digest(self.book.summary(node_id, now))

    def _readings(self, now: float) -> dict[str, tuple[float, bytes]]:
        horizon = self.config.score_horizon_s
        return {node_id: (self.book.score(node_id, now, horizon), self._digest(node_id, now))
                for node_id in sorted(self._providers)
                if self.book.uptime(node_id, now) is not None}

    def decide(self, session: Session, *, now: float) -> DecideResult:
        """Observe every online node's RS, let the policy decide, and queue the results:
        `slash` (collateral of an abandoned or wrongly verified task) and `tier` actions.
        A LOW_SCORE slash is only recorded: its score goes into the next epoch root, and
        anyone proves it on chain with `slashForScore`."""
        with self._lock:
            readings = self._readings(now)
            for node_id, (rs, digest) in readings.items():
                self.policy.observe_score(node_id, rs, now, digest)
                self.metrics.reliability_score.observe(rs)
            providers = {self._providers[n] for n in readings}
        bonded: dict[str, int] = {}
        for provider in sorted(providers):
            try:
                bonded[provider] = self.stake.stake(provider, now).bonded
            except StakeUnavailable:
                bonded[provider] = 0  # the record only; slashForScore computes its own amount
        with self._lock:
            actions = self.policy.decide(now, bonded)
        for decision in actions.slashes:
            self._queue_slash(session, decision, now)
        tiers: list[tuple[str, Tier]] = []
        for change in actions.tier_changes:
            node = session.get(Node, change.node_id)
            if node is None:
                continue
            node.tier = int(change.new)
            crud.enqueue_chain_action(
                session, kind="tier", now=now,
                idempotency_key=f"tier:{change.node_id}:{round(change.at * 1000)}:{change.new}",
                payload={"provider": node.provider, "tier": int(change.new),
                         "node_id": change.node_id, "detail": change.detail})
            tiers.append((change.node_id, change.new))
        return DecideResult(actions.slashes, tuple(tiers))

    def _queue_slash(self, session: Session, decision: SlashDecision, now: float) -> None:
        task_id = None if decision.task_id is None else int(decision.task_id)
        stored = store.add_slash(session, record=SlashRecord(
            slash_id=store.hex32(decision.slash_id), node_id=decision.node_id,
            provider=decision.provider, reason=int(decision.reason), amount=decision.amount,
            evidence=store.hex32(decision.evidence), task_id=task_id,
            decided_at=decision.decided_at, detail=decision.detail))
        if not stored:
            return
        self.metrics.slashes.labels(decision.reason.name.lower()).inc()
        if decision.reason is SlashReason.LOW_SCORE or task_id is None:
            return
        lock = store.latest_lock(session, task_id=task_id, node_id=decision.node_id)
        if lock is None or min(decision.amount, lock.amount) == 0:
            return
        crud.enqueue_chain_action(
            session, kind="slash", idempotency_key=f"slash:{store.hex32(decision.slash_id)}",
            now=now, payload={"job_id": lock.job_id, "provider": decision.provider,
                              "amount": str(min(decision.amount, lock.amount)),
                              "reason": int(decision.reason),
                              "evidence": store.hex32(decision.evidence)})

    def epoch_of(self, now: float) -> int:
        return int(now // self.config.epoch_s)

    def close_epoch(self, session: Session, *, epoch: int, now: float) -> bytes | None:
        """Commit `epoch`: one leaf per provider (lowest node, floored at the threshold unless
        the policy slashed it for a low score), stored with its root, and `commit` queued.
        None when it is already closed or no node is online."""
        if store.get_epoch(session, epoch=epoch) is not None:
            return None
        low = store.unassigned_low_score_slashes(session, reason=int(SlashReason.LOW_SCORE))
        decisions = [SlashDecision(r.node_id, r.provider, SlashReason(r.reason), r.amount,
                                   store.unhex(r.evidence), r.decided_at, r.decided_at, None,
                                   r.detail) for r in low]
        with self._lock:
            readings = self._readings(now)
            if not readings:
                return None
            entries = self.policy.epoch_entries(readings, decisions)
        node_of = {(self._providers[n], digest): n for n, (_, digest) in readings.items()}
        commitment = commit_epoch(entries)
        store.add_epoch(session, epoch=epoch, root=commitment.root, closed_at=now, leaves=[
            store.LeafRow(e.provider, node_of[(e.provider, e.telemetry_digest)], e.score_bps,
                          e.telemetry_digest) for e in entries])
        for record in low:
            record.epoch = epoch
        crud.enqueue_chain_action(session, kind="commit", idempotency_key=f"commit:{epoch}",
                                  now=now, payload={"epoch": epoch,
                                                    "root": store.hex32(commitment.root)})
        return commitment.root

    @staticmethod
    def score_proof(session: Session, *, provider: str, epoch: int) -> ScoreProof | None:
        """The committed leaf of `provider` in `epoch` and its Merkle proof."""
        stored = store.get_epoch(session, epoch=epoch)
        if stored is None:
            return None
        leaves = store.epoch_leaves(session, epoch=epoch)
        mine = next((leaf for leaf in leaves if leaf.provider == provider), None)
        if mine is None:
            return None
        commitment = commit_epoch([EpochEntry(leaf.provider, leaf.score_bps,
                                              leaf.telemetry_digest) for leaf in leaves])
        proof = commitment.tree.proof(commitment.leaf_of[provider])
        return ScoreProof(epoch, commitment.root, provider, mine.score_bps,
                          mine.telemetry_digest, proof)

    # ----- restart -----------------------------------------------------------------------
    def rebuild(self, session: Session, *, now: float) -> None:
        """Replay the DB into a fresh book and policy: nodes (tier as stored), sessions,
        the last day of telemetry, task outcomes and each node's latest handshake."""
        with self._lock:
            for node in store.all_nodes(session):
                self._know(node)
            for row in store.all_sessions(session):
                if row.node_id not in self._providers:
                    continue
                if self.book.uptime(row.node_id, row.started_at) is None:
                    self.book.session_started(row.node_id, row.started_at)
                if row.ended_at is not None:
                    self.book.session_ended(row.node_id, row.ended_at, bool(row.abrupt))
            gpu: dict[tuple[str, float], dict[str, float]] = defaultdict(dict)
            since = now - self.book.config.long_window_s
            for sample in store.samples_since(session, since=since):
                node_id = sample.node_id
                if node_id not in self._providers:
                    continue
                if sample.metric == "rtt_ms":
                    self._record_probe(node_id, ProbeSample(sample.at, sample.value))
                elif sample.metric == "probe_lost":
                    self._record_probe(node_id, ProbeSample(sample.at, None))
                elif sample.metric == "hb_gap_s":
                    self.book.record_heartbeat(node_id, sample.at - sample.value)
                    self.book.record_heartbeat(node_id, sample.at)
                elif sample.metric.startswith("gpu."):
                    gpu[(node_id, sample.at)][sample.metric[4:]] = sample.value
            for (node_id, at), values in sorted(gpu.items(), key=lambda item: item[0][1]):
                if set(values) == set(GPU_FIELDS):
                    values["throttle_reasons"] = int(values["throttle_reasons"])
                    self.book.record_gpu(node_id, GpuSample(at=at, **values))  # type: ignore[arg-type]
            for outcome in store.all_outcomes(session):
                if outcome.node_id in self._providers:
                    self.book.record_task_outcome(outcome.node_id, TaskOutcome(outcome.outcome))
            for record in store.latest_verdicts(session):
                verdict = PopwVerdict(record.node_id, record.passed, Tier(record.tier),
                                      record.decided_at, record.expires_at,
                                      tuple(PopwReason(r) for r in record.reasons))
                self._verdicts[record.node_id] = verdict
                if record.node_id in self._providers:
                    self.policy.handshake(verdict)
