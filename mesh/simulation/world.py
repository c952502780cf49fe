"""The world as it is (ground truth) and as the orchestrator sees it (observation).

Ground truth per node: when its process runs (trace sessions minus power outages of its
region) and when its heartbeats cannot reach the orchestrator (single missed heartbeats, ISP
partitions, outages of its whole network). Observation: the REAL phi-accrual failure detector
fed those heartbeats, which yields when the orchestrator calls the node dead and when it sees
it back. Heartbeats are aggregated: only the bursts around each gap are fed (enough to fill
the detector's window), never one event per heartbeat of a long quiet stretch. The detector
depends only on heartbeats, never on placements, so one observation serves every policy.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np

from mesh.simulation.models import NETWORKS_PER_REGION, REGIONS, NodeProfile
from mesh.simulation.traces import Trace
from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.domain.types import NodeHealth

HEARTBEAT_S = 5.0  # agent heartbeat period
SWEEP_S = 1.0  # how often the orchestrator asks the detector for verdicts
HISTORY_BURST = 24  # heartbeats fed before each gap: refills the detector's recent window
HTTP_RETRANSMIT_S = 1.0  # heartbeats ride TCP: a lost packet delays, it does not drop
MISSED_HEARTBEAT_PER_DAY = 0.5  # agent hiccups that skip exactly one heartbeat
NETWORK_OUTAGES_PER_DAY = 0.25  # per ISP network: every node in it is partitioned at once
REGION_OUTAGES_PER_DAY = 0.08  # per region: power/datacentre loss, processes die
DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class Partition:
    """Heartbeats lost in [start, end) while the process keeps computing."""

    start: float
    end: float
    dead_at: float | None  # when the detector called it a departure, if it did


@dataclass(slots=True)
class NodeTimeline:
    """Everything time-dependent about one node, ground truth and observed."""

    alive: list[tuple[float, float]]  # process running, sorted, disjoint
    partitions: list[Partition]  # inside alive intervals, sorted
    up_at: list[float] = field(default_factory=list)  # orchestrator accepts the node again
    down_at: list[float] = field(default_factory=list)  # orchestrator calls it dead/restarted
    alive_starts: list[float] = field(default_factory=list)
    partition_starts: list[float] = field(default_factory=list)

    def index(self) -> None:
        self.alive_starts = [a for a, _ in self.alive]
        self.partition_starts = [p.start for p in self.partitions]

    def alive_interval(self, t: float) -> tuple[float, float] | None:
        i = bisect.bisect_right(self.alive_starts, t) - 1
        if i >= 0 and self.alive[i][1] > t:
            return self.alive[i]
        return None

    def partition_at(self, t: float) -> Partition | None:
        i = bisect.bisect_right(self.partition_starts, t) - 1
        if i >= 0 and self.partitions[i].end > t:
            return self.partitions[i]
        return None

    def next_revoking_partition(self, t: float, until: float) -> Partition | None:
        """First partition starting in (t, until) that the detector turned into a departure."""
        i = bisect.bisect_right(self.partition_starts, t)
        while i < len(self.partitions) and self.partitions[i].start < until:
            if self.partitions[i].dead_at is not None:
                return self.partitions[i]
            i += 1
        return None

    def reachable(self, t: float) -> bool:
        return self.alive_interval(t) is not None and self.partition_at(t) is None


@dataclass(frozen=True, slots=True)
class Outage:
    scope: str  # a region (processes die) or a network (partitioned)
    start: float
    end: float


def _poisson_intervals(
    rng: np.random.Generator, rate_per_day: float, horizon_s: float, median_s: float,
    sigma: float,
) -> list[tuple[float, float]]:
    count = int(rng.poisson(rate_per_day * horizon_s / DAY_S))
    starts = np.sort(rng.uniform(0.0, horizon_s, count))
    lengths = rng.lognormal(math.log(median_s), sigma, count)
    return [(float(s), float(s + d)) for s, d in zip(starts, lengths, strict=True)]


def generate_outages(rng: np.random.Generator, horizon_s: float) -> list[Outage]:
    """Correlated failures: a region loses power, or an ISP network drops, then returns."""
    outages: list[Outage] = []
    for region in REGIONS:
        outages += [Outage(region, s, e) for s, e in _poisson_intervals(
            rng, REGION_OUTAGES_PER_DAY, horizon_s, median_s=1800.0, sigma=0.8)]
        for isp in range(NETWORKS_PER_REGION):
            outages += [Outage(f"{region}/isp{isp}", s, e) for s, e in _poisson_intervals(
                rng, NETWORK_OUTAGES_PER_DAY, horizon_s,
                median_s=300.0, sigma=0.9)]
    return outages


def _subtract(intervals: list[tuple[float, float]], holes: list[tuple[float, float]]
              ) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    holes = sorted(holes)
    for start, end in intervals:
        cursor = start
        for h_start, h_end in holes:
            if h_end <= cursor or h_start >= end:
                continue
            if h_start > cursor:
                out.append((cursor, h_start))
            cursor = max(cursor, h_end)
            if cursor >= end:
                break
        if cursor < end:
            out.append((cursor, end))
    return out


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


class World:
    """Ground truth and the detector's view of it, built once per benchmark run."""

    def __init__(self, trace: Trace, profiles: dict[str, NodeProfile], horizon_s: float,
                 rng: np.random.Generator) -> None:
        self.horizon_s = horizon_s
        self.profiles = profiles
        self.outages = generate_outages(rng, horizon_s)
        self.detector = PhiAccrualDetector()
        by_scope: dict[str, list[tuple[float, float]]] = {}
        for outage in self.outages:
            by_scope.setdefault(outage.scope, []).append((outage.start, outage.end))
        self.timelines: dict[str, NodeTimeline] = {}
        self.false_departures = 0  # detector verdicts on nodes whose process never stopped
        for node_id in sorted(profiles):
            profile = profiles[node_id]
            sessions = [(s.online_at, min(s.offline_at, horizon_s))
                        for s in trace.get(node_id, []) if s.online_at < horizon_s]
            alive = _subtract(sessions, by_scope.get(profile.region, []))
            partitions = self._partitions(profile, alive, by_scope.get(profile.network, []), rng)
            timeline = NodeTimeline(alive=alive, partitions=[])
            self._observe(node_id, profile, timeline, partitions, rng)
            timeline.index()
            self.timelines[node_id] = timeline

    def region_dark(self, region: str, at: float) -> bool:
        """Whether `region` was in a power/datacentre outage at `at` (ground truth)."""
        return any(o.scope == region and o.start <= at <= o.end for o in self.outages)

    def _partitions(self, profile: NodeProfile, alive: list[tuple[float, float]],
                    network_outages: list[tuple[float, float]], rng: np.random.Generator,
                    ) -> list[tuple[float, float]]:
        blips = [(s, s + HEARTBEAT_S) for s, _ in _poisson_intervals(
            rng, MISSED_HEARTBEAT_PER_DAY, self.horizon_s, 1.0, 0.0)]
        isp = _poisson_intervals(rng, profile.partition_rate_per_day, self.horizon_s,
                                 median_s=40.0, sigma=0.9)
        raw = _merge(blips + isp + network_outages)
        inside: list[tuple[float, float]] = []
        for start, end in alive:
            for p_start, p_end in raw:
                lo, hi = max(start, p_start), min(end, p_end)
                if lo < hi:
                    inside.append((lo, hi))
        return inside

    def _heartbeats(self, profile: NodeProfile, phase: float, start: float, end: float,
                    count: int, from_end: bool, rng: np.random.Generator) -> np.ndarray:
        """Arrival times of up to `count` heartbeats sent in [start, end), the first or the
        last ones. The agent's timer keeps its phase through a partition, so a cut covering
        one send time loses exactly one heartbeat."""
        first = math.ceil((start - phase) / HEARTBEAT_S)
        last = math.ceil((end - phase) / HEARTBEAT_S) - 1
        n = min(last - first + 1, count)
        if n <= 0:
            return np.empty(0)
        lowest = last - n + 1 if from_end else first
        sent = phase + HEARTBEAT_S * (lowest + np.arange(n))
        delay = np.abs(rng.normal(0.0, profile.jitter_ms / 1000.0, n))
        delay += HTTP_RETRANSMIT_S * (rng.random(n) < profile.loss)
        return np.sort(sent + delay + profile.rtt_ms / 2000.0)

    def _observe(self, node_id: str, profile: NodeProfile, timeline: NodeTimeline,
                 partitions: list[tuple[float, float]], rng: np.random.Generator) -> None:
        """Feed the detector the heartbeats around every gap and record its verdicts."""
        reachable = _subtract(timeline.alive, partitions)
        partition_set = {p[0]: p for p in partitions}
        process_ends = {end for _, end in timeline.alive}
        detector = self.detector
        declared_down = True  # a node is unknown (hence not schedulable) until it heartbeats
        phase = float(rng.uniform(0.0, HEARTBEAT_S))
        # A reachable stretch too short to send a heartbeat (a process that dies within
        # seconds of starting) is invisible to the detector: the silence around it is one gap.
        heard: list[tuple[float, float, np.ndarray]] = []
        for r_start, r_end in reachable:
            head = self._heartbeats(profile, phase, r_start, r_end, HISTORY_BURST, False, rng)
            tail = self._heartbeats(profile, phase, r_start, r_end, HISTORY_BURST, True, rng)
            arrivals = np.unique(np.concatenate([head, tail]))
            if arrivals.size:
                heard.append((r_start, r_end, arrivals))
        for k, (_, r_end, arrivals) in enumerate(heard):
            for t in arrivals:
                detector.heartbeat(node_id, float(t))
            if declared_down:
                timeline.up_at.append(float(arrivals[0]))
            last = float(arrivals[-1])
            next_start = heard[k + 1][0] if k + 1 < len(heard) else math.inf
            gap_end = min(next_start, self.horizon_s)
            dead_at: float | None = None
            t = math.floor(last / SWEEP_S) * SWEEP_S + SWEEP_S
            while t < gap_end:
                if detector.health(node_id, t) is NodeHealth.DEAD:
                    dead_at = t
                    break
                t += SWEEP_S
            partition = partition_set.get(r_end)
            if partition is not None:
                timeline.partitions.append(Partition(partition[0], partition[1], dead_at))
                if dead_at is not None and partition[1] not in process_ends:
                    self.false_departures += 1  # the process was still running when it returned
            declared_down = dead_at is not None
            if dead_at is not None:
                timeline.down_at.append(dead_at)
            elif partition is None and next_start < math.inf:
                # The process restarted before the detector noticed: the agent reports
                # its lost leases when it reconnects.
                timeline.down_at.append(next_start)
                timeline.up_at.append(next_start)

