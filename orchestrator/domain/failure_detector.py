"""Adaptive phi-accrual failure detector (Hayashibara et al.; Akka/Cassandra style).

phi = -log10(P(a heartbeat arrives later than `now - last`)) under a normal
model of each node's recent inter-arrival times. A fixed timeout would mark a
node on a jittery link dead on every hiccup; phi scales with what that node's
link usually does. Pure and clock-free: every call takes `now` (seconds), so the
churn simulator can drive it with a virtual clock. O(1) per heartbeat.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from orchestrator.domain.types import NodeHealth


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    suspect_phi: float = 5.0  # ~1e-5 chance the node is fine: stop giving it new work
    dead_phi: float = 12.0  # a departure: revoke leases and move the work
    window: int = 100  # inter-arrival samples kept per node
    min_std_s: float = 0.5  # floor on the spread so a perfectly regular node is not hair-trigger
    acceptable_pause_s: float = 2.0  # a pause always tolerated (GC, Wi-Fi hiccup)
    first_interval_s: float = 5.0  # assumed interval before a node has any history
    grace_s: float = 30.0  # after registering or coming back, never called dead this soon


@dataclass(slots=True)
class _Arrivals:
    last: float
    since: float  # start of the current session (first heartbeat / after recovery)
    intervals: deque[float] = field(default_factory=deque)
    total: float = 0.0
    total_sq: float = 0.0


def _normal_tail_log10(x: float) -> float:
    """log10 of P(Z > x) for a standard normal, stable far into the tail."""
    if x < 5.0:
        return math.log10(max(0.5 * math.erfc(x / math.sqrt(2.0)), 1e-300))
    # Asymptotic Mills ratio: P(Z > x) ~ pdf(x) / x for large x.
    return (-(x * x) / 2.0 - math.log(x * math.sqrt(2.0 * math.pi))) / math.log(10.0)


class PhiAccrualDetector:
    """Per-node heartbeat history and health verdicts; `drain` marks graceful departures."""

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config or DetectorConfig()
        self._nodes: dict[str, _Arrivals] = {}
        self._draining: set[str] = set()

    def heartbeat(self, node_id: str, now: float) -> None:
        arrivals = self._nodes.get(node_id)
        if arrivals is None:
            self._nodes[node_id] = _Arrivals(last=now, since=now)
            return
        interval = now - arrivals.last
        if interval <= 0:
            return  # a duplicate or reordered heartbeat says nothing about the gap
        if self._phi_of(arrivals, now) >= self.config.dead_phi:
            # Back from the dead: a fresh session with a fresh grace period; the outage
            # itself is not an inter-arrival time and would blunt the detector if kept.
            self._nodes[node_id] = _Arrivals(last=now, since=now)
            return
        arrivals.last = now
        arrivals.intervals.append(interval)
        arrivals.total += interval
        arrivals.total_sq += interval * interval
        if len(arrivals.intervals) > self.config.window:
            dropped = arrivals.intervals.popleft()
            arrivals.total -= dropped
            arrivals.total_sq -= dropped * dropped

    def _phi_of(self, arrivals: _Arrivals, now: float) -> float:
        cfg = self.config
        count = len(arrivals.intervals)
        if count == 0:
            mean, std = cfg.first_interval_s, cfg.first_interval_s / 4.0
        else:
            mean = arrivals.total / count
            variance = max(arrivals.total_sq / count - mean * mean, 0.0)
            std = math.sqrt(variance)
        std = max(std, cfg.min_std_s)
        elapsed = now - arrivals.last - cfg.acceptable_pause_s
        return max(-_normal_tail_log10((elapsed - mean) / std), 0.0)

    def phi(self, node_id: str, now: float) -> float:
        arrivals = self._nodes.get(node_id)
        if arrivals is None:
            raise KeyError(node_id)
        return self._phi_of(arrivals, now)

    def health(self, node_id: str, now: float) -> NodeHealth:
        arrivals = self._nodes.get(node_id)
        if arrivals is None:
            raise KeyError(node_id)
        value = self._phi_of(arrivals, now)
        if value >= self.config.dead_phi and now - arrivals.since >= self.config.grace_s:
            return NodeHealth.DEAD
        if value >= self.config.suspect_phi:
            return NodeHealth.SUSPECT
        return NodeHealth.ALIVE

    def drain(self, node_id: str) -> None:
        """A graceful departure: no new work, running tasks checkpoint and move."""
        self._draining.add(node_id)

    def undrain(self, node_id: str) -> None:
        self._draining.discard(node_id)

    def is_draining(self, node_id: str) -> bool:
        return node_id in self._draining

    def accepts_work(self, node_id: str, now: float) -> bool:
        """Only alive, non-draining nodes get new leases."""
        return (
            node_id in self._nodes
            and node_id not in self._draining
            and self.health(node_id, now) is NodeHealth.ALIVE
        )

    def forget(self, node_id: str) -> None:
        """Drop a node that deregistered; its history must not follow a new node with its id."""
        self._nodes.pop(node_id, None)
        self._draining.discard(node_id)

    def sweep(self, now: float) -> dict[str, NodeHealth]:
        """Health of every node that is not alive, for one periodic pass."""
        verdicts: dict[str, NodeHealth] = {}
        for node_id in self._nodes:
            verdict = self.health(node_id, now)
            if verdict is not NodeHealth.ALIVE:
                verdicts[node_id] = verdict
        return verdicts

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)
