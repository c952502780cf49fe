"""Slashing, demotion and promotion: when a provider loses stake or tier, and when it
earns the tier back.

Rules (every slash carries a reason code matching the contract enum, the digest of
the telemetry window as evidence, and a dispute deadline; `dispute_upheld` undoes
the demotion of a slash the arbiter overturned):
* **Low score.** RS below `demote_below` on every observation for `low_score_window_s`
  (at least `min_low_observations` of them) demotes to BACKGROUND and slashes
  `low_score_share_bps` of the provider's bonded stake, once per demotion: a
  BACKGROUND node is not slashed again for a low score (it already posts
  risk-priced collateral for every task; repeated slashes would only drain an
  honest but flaky volunteer). It must earn its tier back first. On chain this is `slashForScore`
  against the epoch's score root, and `epoch_entries` commits a sub-threshold
  score only for nodes slashed here (the chain cannot tell a dip from a trend).
* **Abandonment.** A task lost because its node departed abruptly slashes what the
  departure cost the customer: the value of the work lost since the last checkpoint plus
  `abandonment_base_bps` of the task's value (finding, moving and restarting it), never
  more than the collateral locked for it (`abandonment_damage`). The collateral is a bond
  sized by the predicted risk; charging all of it for every departure made an honest host
  whose sessions are short by nature pay to take part (`docs/churn.md`). A departure the
  node announced (a drain that hands its checkpoint back) is never slashed.
* **Failed verification.** Slashes the task's collateral and demotes at once:
  a wrong result is the node's own doing, no outage explains it.

No false slashes. The policy only hears of a departure once the failure detector
calls the node DEAD (a missed heartbeat or two is only SUSPECT and never reaches
it). Abandonments and low-score observations mature for `decision_delay_s` before
they count, so that by then we know whether (a) the node came back within
`reconnect_grace_s` (a short partition: its task moved, nobody pays) or (b) many
nodes of the same region or network left together (a correlated outage: the
fault is upstream, nobody pays). Observations while a node is away or inside an
outage of its groups are ignored, neither extending nor breaking a streak.

Hysteresis. Promotion needs RS at or above `promote_above` (well over
`demote_below`) for `promote_window_s`, a fresh passing PoPW handshake for the
target tier, and `min_dwell_s` since the last tier change; so a score wobbling
around one threshold cannot flap the tier. HIGH is kept only while its handshake
is fresh, judged while the node is online (it handshakes again on its return).
A failed handshake never demotes by itself: replays and forgeries can be sent by
anyone, and a slow link is not misconduct.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from eth_abi import encode
from eth_utils import keccak

from orchestrator.domain.continuity import ProgressProof
from orchestrator.domain.merkle import SCORE_SCALE
from orchestrator.domain.popw import PopwVerdict
from orchestrator.domain.score_commitment import EpochEntry, score_bps
from orchestrator.domain.types import SlashReason, Tier

BPS = 10_000


@dataclass(frozen=True, slots=True)
class SlashDecision:
    node_id: str
    provider: str
    reason: SlashReason
    amount: int  # token units
    evidence: bytes  # 32-byte telemetry digest of the window the decision rests on
    decided_at: float
    dispute_until: float  # the provider may dispute until then
    task_id: str | None  # the task whose collateral is slashed; None for LOW_SCORE
    detail: str

    @property
    def slash_id(self) -> bytes:
        """Stable id, so the chain outbox can send each decision exactly once."""
        return keccak(encode(["string", "uint8", "string", "bytes32", "uint64"],
                             [self.node_id, int(self.reason), self.task_id or "",
                              self.evidence, round(self.decided_at * 1000)]))


@dataclass(frozen=True, slots=True)
class TierChange:
    node_id: str
    old: Tier
    new: Tier
    at: float
    detail: str


@dataclass(frozen=True, slots=True)
class PolicyActions:
    slashes: tuple[SlashDecision, ...]
    tier_changes: tuple[TierChange, ...]


class ProgressVerdict(Enum):
    """How `StakingPolicy.progress_shown` judged a reconnecting node's proof of progress."""

    WITHDRAWN = "withdrawn"  # the pending abandonment is dropped: nobody pays
    FORGED = "forged"  # the signature is malformed (one by another key: WRONG_SESSION)
    WRONG_SESSION = "wrong_session"  # not the session key bound when the task was abandoned
    NOT_PENDING = "not_pending"  # no abandonment of this task by this node is waiting
    NO_PROGRESS = "no_progress"  # no chunk new since the verdict, rendered after it


@dataclass(frozen=True, slots=True)
class SlashingConfig:
    demote_below: float = 0.5
    low_score_window_s: float = 6 * 3600.0
    min_low_observations: int = 3
    low_score_share_bps: int = 1_000  # 10 % of bonded stake: StakeManager's default scoreSlashBps
    promote_above: float = 0.7
    high_above: float = 0.9
    promote_window_s: float = 12 * 3600.0
    min_dwell_s: float = 6 * 3600.0
    # Back within this after a departure: a partition. ISP partitions are heavy-tailed (the
    # churn benchmark's 10-12 minute ones slashed honest nodes under a 10-minute grace).
    reconnect_grace_s: float = 1800.0
    outage_window_s: float = 300.0  # departures this close together may be one outage
    outage_min_nodes: int = 3
    outage_min_share: float = 0.2  # of the region's or network's nodes not already away
    decision_delay_s: float = 2400.0
    dispute_window_s: float = 3 * 86_400.0
    abandonment_base_bps: int = 1_000  # of the task's value, on top of the work lost

    def abandonment_damage(self, value: int, rework_share: float) -> int:
        """Token units an abrupt departure cost the customer: `rework_share` of the task's
        `value` done again, plus the base share for re-placing it."""
        if value < 0 or not 0.0 <= rework_share <= 1.0:
            raise ValueError("value must be >= 0 and rework_share within [0, 1]")
        return -(-value * (self.abandonment_base_bps + math.ceil(rework_share * BPS)) // BPS)

    def __post_init__(self) -> None:
        if not 0.0 <= self.demote_below < self.promote_above <= self.high_above <= 1.0:
            raise ValueError("thresholds need demote_below < promote_above <= high_above")
        if self.decision_delay_s < max(self.reconnect_grace_s, self.outage_window_s):
            raise ValueError("decisions must wait out the reconnect grace and outage window")
        if not 0 <= self.low_score_share_bps <= BPS:
            raise ValueError("low_score_share_bps must be within 0..10000")
        if not 0 <= self.abandonment_base_bps <= BPS:
            raise ValueError("abandonment_base_bps must be within 0..10000")


@dataclass(slots=True)
class _Node:
    provider: str
    groups: tuple[str, ...]  # "region:eu-west", "network:AS3320"
    tier: Tier
    tier_since: float
    away_since: float | None = None
    absences: list[tuple[float, float]] = field(default_factory=list)  # (left, back)
    observations: deque[tuple[float, float, bytes]] = field(default_factory=deque)
    low_since: float | None = None  # first of an unbroken run of low observations
    low_last: float = 0.0  # latest of that run: the streak spans low_since..low_last
    low_count: int = 0
    low_evidence: bytes = b"\x00" * 32
    good_since: float | None = None
    high_since: float | None = None
    verdict: PopwVerdict | None = None
    session_key: str | None = None  # bound by the latest wallet-signed login



@dataclass(frozen=True, slots=True)
class _PendingAbandonment:
    node_id: str
    task_id: str
    collateral: int
    at: float
    evidence: bytes
    session_key: str | None  # the session that held the task when it was abandoned
    known_chunks: frozenset[bytes]  # chunk hashes of the task known at the verdict


class StakingPolicy:
    """Per-node tier state and pending slash evidence; `decide(now)` turns matured evidence
    into slash decisions and tier changes. Pure: every event carries its time."""

    def __init__(self, config: SlashingConfig | None = None) -> None:
        self.config = config or SlashingConfig()
        self._nodes: dict[str, _Node] = {}
        self._group_size: dict[str, int] = {}
        self._away_in_group: dict[str, int] = {}  # registered nodes away now, per group
        self._recent_departures: dict[str, deque[float]] = {}
        self._outages: dict[str, list[tuple[float, float]]] = {}
        self._pending: dict[str, _PendingAbandonment] = {}
        self._active: set[str] = set()  # nodes `decide` must look at; the rest cannot change
        self._tier_before: dict[bytes, Tier] = {}  # slash_id -> tier the slash demoted from
        self._settled_tasks: set[str] = set()
        self._failed_results: set[tuple[str, str]] = set()  # (task, node) slashed for a result
        self._credited_chunks: set[bytes] = set()  # chunks that already withdrew a slash
        self._immediate: list[SlashDecision] = []
        self._immediate_tiers: list[TierChange] = []

    # ----- events --------------------------------------------------------------------
    def register(self, node_id: str, provider: str, region: str, network: str, now: float,
                 tier: Tier = Tier.STANDARD) -> None:
        if node_id in self._nodes:
            raise ValueError(f"node {node_id!r} already registered")
        groups = (f"region:{region}", f"network:{network}")
        self._nodes[node_id] = _Node(provider, groups, tier, now)
        for group in groups:
            self._group_size[group] = self._group_size.get(group, 0) + 1

    def tier(self, node_id: str) -> Tier:
        return self._node(node_id).tier

    def _node(self, node_id: str) -> _Node:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KeyError(f"unknown node {node_id!r}") from None

    def observe_score(self, node_id: str, rs: float, at: float, evidence: bytes) -> None:
        """One RS reading of an online node (e.g. per epoch) with its telemetry digest."""
        if not 0.0 <= rs <= 1.0:
            raise ValueError(f"RS {rs} outside [0, 1]")
        if len(evidence) != 32:
            raise ValueError("evidence must be a 32-byte digest")
        node = self._node(node_id)
        if node.away_since is None:
            node.observations.append((at, rs, evidence))
            self._active.add(node_id)

    def node_departed(self, node_id: str, at: float) -> None:
        """The failure detector called the node DEAD (never call this for SUSPECT)."""
        node = self._node(node_id)
        if node.away_since is not None:
            return
        node.away_since = at
        window = self.config.outage_window_s
        for group in node.groups:
            recent = self._recent_departures.setdefault(group, deque())
            recent.append(at)
            while recent and recent[0] < at - window:
                recent.popleft()
            # The share counts the nodes that were there to go silent: those registered,
            # less those already away before this window. Counting every registered node
            # missed a 35-minute ISP outage on a grid where 40 % of hosts are online at a
            # time, and slashed two honest nodes (`docs/churn.md`).
            away = self._away_in_group.get(group, 0)
            present = self._group_size[group] - away + len(recent) - 1
            needed = max(self.config.outage_min_nodes, self.config.outage_min_share * present)
            if len(recent) >= needed:
                self._mark_outage(group, recent[0], at)
            self._away_in_group[group] = away + 1

    def departures_near(self, node_id: str, at: float, window_s: float
                        ) -> list[tuple[int, int]]:
        """For each of the node's groups: (DEAD verdicts in the `window_s` up to `at`, this
        node's included, nodes registered in the group). How widely a silence is shared, for
        deciding whether it looks like one upstream cut rather than a departure."""
        if not 0.0 < window_s <= self.config.outage_window_s:
            raise ValueError("window_s must lie in (0, outage_window_s]")
        counts: list[tuple[int, int]] = []
        for group in self._node(node_id).groups:
            recent = self._recent_departures.get(group, ())
            counts.append((sum(1 for t in recent if at - window_s <= t <= at),
                           self._group_size[group]))
        return counts

    def _mark_outage(self, group: str, start: float, end: float) -> None:
        spans = self._outages.setdefault(group, [])
        if spans and start <= spans[-1][1] + self.config.outage_window_s:
            spans[-1] = (min(spans[-1][0], start), max(spans[-1][1], end))
        else:
            spans.append((start, end))

    def node_returned(self, node_id: str, at: float) -> None:
        node = self._node(node_id)
        if node.away_since is None:
            return
        node.absences.append((node.away_since, at))
        node.away_since = None
        for group in node.groups:
            self._away_in_group[group] -= 1

    def pending_since(self, task_id: str) -> float | None:
        """When the node left that the task's pending abandonment is dated at (its DEAD
        verdict, also when a lone grace held the lease past it); None: none pending."""
        pending = self._pending.get(task_id)
        return None if pending is None else pending.at

    def session_bound(self, node_id: str, session_key: str) -> None:
        """The node's wallet-signed login named this ephemeral session key (its process's)."""
        self._node(node_id).session_key = session_key

    def task_abandoned(self, node_id: str, task_id: str, collateral: int, at: float,
                       evidence: bytes, known_chunks: Iterable[bytes] = (),
                       damage: int | None = None, announced: bool = False) -> None:
        """The task's lease was revoked because its node left; judged after the delay.
        `known_chunks`: the task's checkpoint chunks the orchestrator held at the verdict.
        `damage`: what the departure cost the customer (`SlashingConfig.abandonment_damage`);
        the slash is that, capped at `collateral` (None: the whole collateral). `announced`:
        the node drained and handed its checkpoint back, so nobody pays."""
        node = self._node(node_id)
        if collateral < 0 or (damage is not None and damage < 0):
            raise ValueError("collateral and damage must be >= 0")
        if task_id in self._pending or task_id in self._settled_tasks:
            return  # exactly once per task
        if announced:
            self._settled_tasks.add(task_id)
            return
        amount = collateral if damage is None else min(collateral, damage)
        self._pending[task_id] = _PendingAbandonment(
            node_id, task_id, amount, at, evidence, node.session_key,
            frozenset(known_chunks))

    def progress_shown(self, proof: ProgressProof, verified_chunks: Iterable[bytes],
                       at: float) -> ProgressVerdict:
        """A node back from a silence shows the chunks its process rendered meanwhile.
        `verified_chunks`: the hashes among `proof.chunks` whose content the orchestrator now
        holds as checkpoints of `proof.task_id` (a claim without content counts for nothing).

        The pending abandonment of the task is withdrawn only when the proof is signed by the
        session key bound when the task was abandoned (the same process: a restarted agent has
        a new key), and names at least one verified chunk that was not known at the verdict,
        has not withdrawn a slash before (no replay), and was rendered after the verdict and
        before now (the render went on through the silence; an idle node has none). A matured
        abandonment is already decided: disputes handle it from there."""
        self._node(proof.node_id)
        pending = self._pending.get(proof.task_id)
        if pending is None or pending.node_id != proof.node_id:
            return ProgressVerdict.NOT_PENDING
        signer = proof.signer()
        if signer is None:
            return ProgressVerdict.FORGED
        if pending.session_key is None or signer != pending.session_key:
            return ProgressVerdict.WRONG_SESSION
        verified = set(verified_chunks)
        new = {c.sha256 for c in proof.chunks
               if c.sha256 in verified and c.sha256 not in pending.known_chunks
               and c.sha256 not in self._credited_chunks and pending.at < c.rendered_at <= at}
        if not new:
            return ProgressVerdict.NO_PROGRESS
        del self._pending[proof.task_id]
        self._settled_tasks.add(proof.task_id)
        self._credited_chunks |= new
        return ProgressVerdict.WITHDRAWN

    def withdrawal_replayed(self, task_id: str, chunks: Iterable[bytes]) -> None:
        """A withdrawal stored before a restart: the task is settled and its chunks spent."""
        self._pending.pop(task_id, None)
        self._settled_tasks.add(task_id)
        self._credited_chunks |= set(chunks)

    def verification_failed(self, node_id: str, task_id: str, collateral: int, at: float,
                            evidence: bytes) -> None:
        """Once per node and task: a task redone elsewhere and failed again is another
        node's wrong result, slashed too."""
        node = self._node(node_id)
        if (task_id, node_id) in self._failed_results:
            return
        self._failed_results.add((task_id, node_id))
        self._settled_tasks.add(task_id)
        self._pending.pop(task_id, None)
        decision = SlashDecision(
            node_id, node.provider, SlashReason.FAILED_VERIFICATION, collateral, evidence, at,
            at + self.config.dispute_window_s, task_id, "result failed verification")
        self._immediate.append(decision)
        self._tier_before[decision.slash_id] = node.tier
        self._set_tier(node_id, node, Tier.BACKGROUND, at, "failed verification",
                       self._immediate_tiers)

    def adopt_tier(self, node_id: str, tier: Tier, at: float) -> None:
        """Take a tier another replica's policy decided (its `decide` ran there)."""
        self._set_tier(node_id, self._node(node_id), tier, at, "decided elsewhere", [])

    def handshake(self, verdict: PopwVerdict) -> None:
        self._node(verdict.node_id).verdict = verdict
        self._active.add(verdict.node_id)

    # ----- exemptions ----------------------------------------------------------------
    def _in_outage(self, node: _Node, at: float) -> bool:
        margin = self.config.outage_window_s
        return any(start - margin <= at <= end + margin
                   for group in node.groups for start, end in self._outages.get(group, ()))

    def _was_away(self, node: _Node, at: float) -> bool:
        if node.away_since is not None and at >= node.away_since:
            return True
        return any(left <= at <= back for left, back in node.absences)

    def _partition_only(self, node: _Node, departed_at: float) -> bool:
        grace = self.config.reconnect_grace_s
        return any(abs(left - departed_at) <= grace and back - left <= grace
                   for left, back in node.absences)

    # ----- decisions -----------------------------------------------------------------
    def decide(self, now: float, bonded: Mapping[str, int]) -> PolicyActions:
        """Matured slashes and tier changes since the last call. `bonded`: each provider's
        bonded stake on chain, for share-of-stake slashes."""
        cfg = self.config
        slashes, changes = self._immediate, self._immediate_tiers
        self._immediate, self._immediate_tiers = [], []
        matured_before = now - cfg.decision_delay_s
        for task_id, pending in list(self._pending.items()):
            if pending.at > matured_before:
                continue
            del self._pending[task_id]
            self._settled_tasks.add(task_id)
            node = self._nodes[pending.node_id]
            if self._in_outage(node, pending.at) or self._partition_only(node, pending.at):
                continue
            slashes.append(SlashDecision(
                pending.node_id, node.provider, SlashReason.ABANDONMENT, pending.collateral,
                pending.evidence, now, now + cfg.dispute_window_s, task_id,
                "departed holding the task"))
        for node_id in sorted(self._active):
            node = self._nodes[node_id]
            self._fold_observations(node, matured_before)
            low_for = node.low_last - node.low_since if node.low_since is not None else -1.0
            if (node.tier is not Tier.BACKGROUND and low_for >= cfg.low_score_window_s
                    and node.low_count >= cfg.min_low_observations):
                amount = bonded.get(node.provider, 0) * cfg.low_score_share_bps // BPS
                decision = SlashDecision(
                    node_id, node.provider, SlashReason.LOW_SCORE, amount, node.low_evidence,
                    now, now + cfg.dispute_window_s, None,
                    f"RS < {cfg.demote_below} for {low_for:.0f} s")
                slashes.append(decision)
                self._tier_before[decision.slash_id] = node.tier
                node.low_since, node.low_count = None, 0
                self._set_tier(node_id, node, Tier.BACKGROUND, now, "sustained low RS", changes)
            self._maybe_promote(node_id, node, now, changes)
            if not self._may_change(node, now):
                self._active.discard(node_id)
        return PolicyActions(tuple(slashes), tuple(changes))

    def dispute_upheld(self, decision: SlashDecision, now: float) -> TierChange | None:
        """The arbiter sided with the provider: restore the tier the slash took (the stake
        itself is refunded on chain). None when the slash demoted nobody or was undone."""
        previous = self._tier_before.pop(decision.slash_id, None)
        if previous is None:
            return None
        changes: list[TierChange] = []
        self._set_tier(decision.node_id, self._node(decision.node_id), previous, now,
                       "slash overturned on dispute", changes)
        return changes[0] if changes else None

    def epoch_entries(self, readings: Mapping[str, tuple[float, bytes]],
                      slashes: Sequence[SlashDecision]) -> list[EpochEntry]:
        """The epoch's Merkle leaves, one per provider, from each online node's (RS, digest).

        On chain, anyone holding a proof of a committed score under the threshold may call
        `slashForScore`. So a score goes on chain under `demote_below` only for a node this
        policy decided a LOW_SCORE slash for in `slashes` (sustained, not excused by an
        outage or a partition); every other reading is floored at the threshold, and a brief
        dip can never be turned into a slash by a third party. A provider's leaf is its
        lowest node, with that node's digest as evidence."""
        threshold_bps = math.ceil(self.config.demote_below * SCORE_SCALE)
        slashed = {d.node_id for d in slashes if d.reason is SlashReason.LOW_SCORE}
        lowest: dict[str, tuple[int, bytes]] = {}
        for node_id, (rs, digest) in sorted(readings.items()):
            bps = score_bps(rs)
            bps = min(bps, threshold_bps - 1) if node_id in slashed else max(bps, threshold_bps)
            provider = self._node(node_id).provider
            if provider not in lowest or bps < lowest[provider][0]:
                lowest[provider] = (bps, digest)
        return [EpochEntry(provider, bps, digest) for provider, (bps, digest) in lowest.items()]

    def _may_change(self, node: _Node, now: float) -> bool:
        """Whether a later `decide` could act on this node without a new event: pending
        observations, a low streak, a HIGH tier to expire, or a promotion in reach."""
        if node.observations or node.tier is Tier.HIGH:
            return True
        if node.low_since is not None and node.tier is not Tier.BACKGROUND:
            return True
        verdict = node.verdict
        return (verdict is not None and verdict.fresh(now) and verdict.tier > node.tier
                and (node.good_since is not None or node.high_since is not None))

    def _fold_observations(self, node: _Node, matured_before: float) -> None:
        cfg = self.config
        while node.observations and node.observations[0][0] <= matured_before:
            at, rs, evidence = node.observations.popleft()
            if self._in_outage(node, at) or self._was_away(node, at):
                continue
            if rs < cfg.demote_below:
                if node.low_since is None:
                    node.low_since, node.low_count = at, 0
                node.low_count += 1
                node.low_last, node.low_evidence = at, evidence
            else:
                node.low_since, node.low_count = None, 0
            if rs >= cfg.promote_above:
                node.good_since = at if node.good_since is None else node.good_since
            else:
                node.good_since = None
            if rs >= cfg.high_above:
                node.high_since = at if node.high_since is None else node.high_since
            else:
                node.high_since = None

    def _maybe_promote(self, node_id: str, node: _Node, now: float,
                       changes: list[TierChange]) -> None:
        cfg = self.config
        verdict = node.verdict
        fresh = verdict is not None and verdict.fresh(now)
        if node.tier is Tier.HIGH:
            # Judged while the node is online: one that is away can take no work anyway, and
            # it handshakes again when it returns. Demoting it while away cost every host
            # whose handshake lapsed offline its HIGH tier for good where sessions are too
            # short to show the 12-hour streak a promotion needs (`docs/churn.md`).
            if node.away_since is not None:
                return
            if not (fresh and verdict is not None and verdict.tier is Tier.HIGH):
                self._set_tier(node_id, node, Tier.STANDARD, now, "HIGH handshake expired",
                               changes)
            return
        if not fresh or verdict is None or now - node.tier_since < cfg.min_dwell_s:
            return
        target = Tier(node.tier + 1)
        streak_start = node.high_since if target is Tier.HIGH else node.good_since
        if (verdict.tier >= target and streak_start is not None
                and now - streak_start >= cfg.promote_window_s):
            self._set_tier(node_id, node, target, now, "sustained good RS and fresh handshake",
                           changes)

    def _set_tier(self, node_id: str, node: _Node, tier: Tier, at: float, detail: str,
                  changes: list[TierChange]) -> None:
        if node.tier is tier:
            return
        changes.append(TierChange(node_id, node.tier, tier, at, detail))
        node.tier, node.tier_since = tier, at
        node.good_since = node.high_since = None
