"""Prometheus metrics, one registry per app so tests and replicas never share counters.

The service figures an operator reads to tell overload from a bad provider (`ServiceFigures`)
are derived here from the counters themselves, and exported on `/metrics` as gauges too, so the
dashboard and a Prometheus scrape show the same numbers. Quantiles are computed from the recorded
times themselves (`RecentTimes`), never read off a histogram's bucket bounds."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)
RECENT_ASSIGNMENTS = 4096  # the time-to-assignment quantiles are over this many latest starts


class RecentTimes:
    """The latest `size` durations recorded (thread-safe), for exact quantiles of recent
    behaviour: a queue that drains shows in them within `size` assignments."""

    def __init__(self, size: int) -> None:
        self._times: deque[float] = deque(maxlen=size)
        self._lock = threading.Lock()

    def record(self, seconds: float) -> None:
        with self._lock:
            self._times.append(seconds)

    def quantile(self, q: float) -> float | None:
        """The nearest-rank `q` quantile (0 < q <= 1) of the kept times: the smallest time
        that at least a share `q` of them do not exceed; None when none was recorded."""
        with self._lock:
            times = sorted(self._times)
        if not times:
            return None
        return times[max(math.ceil(q * len(times)), 1) - 1]


class MeshMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.time_to_assignment = Histogram(
            "mesh_time_to_assignment_seconds",
            "A task ready (new, or back in the queue) to its lease started on a node",
            buckets=LATENCY_BUCKETS, registry=r)
        self.recent_assignments = RecentTimes(RECENT_ASSIGNMENTS)
        self.placements = Counter("mesh_placements_total", "Leases granted", registry=r)
        self.retries = Counter("mesh_task_retries_total", "Tasks sent back to the queue",
                               ["reason"], registry=r)
        self.node_failures = Counter("mesh_node_failures_total",
                                     "Nodes the failure detector declared dead", registry=r)
        self.upload_errors = Counter("mesh_upload_errors_total", "Refused blob uploads",
                                     ["code"], registry=r)
        self.recovery_time = Histogram(
            "mesh_recovery_seconds", "Node death/drain to the task running elsewhere",
            buckets=LATENCY_BUCKETS, registry=r)
        self.rework = Histogram("mesh_rework_fraction", "Share of a task redone after recovery",
                                buckets=(0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0), registry=r)
        self.settlement_lag = Histogram(
            "mesh_settlement_lag_seconds", "Job completion to settlement queued/confirmed",
            buckets=LATENCY_BUCKETS, registry=r)
        self.divergence = Counter(
            "mesh_execution_settlement_divergence_total",
            "Jobs whose chain state disagrees with the orchestrator's", registry=r)
        self.heartbeats = Counter("mesh_heartbeats_total", "Heartbeats accepted", registry=r)
        self.chain_reorgs = Counter("mesh_chain_reorgs_total",
                                    "Reorgs the event indexer rolled back", registry=r)
        self.chain_events_dropped = Counter(
            "mesh_chain_events_dropped_total", "Indexed events a reorg took off the chain",
            ["finality"], registry=r)
        self.chain_events_applied = Counter(
            "mesh_chain_events_applied_total", "Final chain events handed to their handlers",
            registry=r)
        self.auth_failures = Counter("mesh_auth_failures_total", "Refused signatures/tokens",
                                     ["code"], registry=r)
        self.reliability_score = Histogram(
            "mesh_reliability_score", "RS of online nodes, observed at every staking decision",
            buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0), registry=r)
        self.handshakes = Counter("mesh_popw_handshakes_total", "PoPW answers judged",
                                  ["result", "reason"], registry=r)
        self.slashes = Counter("mesh_slashes_total", "Slashes the staking policy decided",
                               ["reason"], registry=r)
        self.slashes_withdrawn = Counter(
            "mesh_slashes_withdrawn_total", "Pending abandonments withdrawn because the node's "
            "process showed it rendered on through the network cut", registry=r)
        self.started_at = time.monotonic()
        r.register(_FiguresCollector(lambda: self.figures()))

    def assigned(self, waited_s: float) -> None:
        """A task's lease started `waited_s` after the task became ready."""
        waited_s = max(waited_s, 0.0)
        self.time_to_assignment.observe(waited_s)
        self.recent_assignments.record(waited_s)

    def figures(self) -> ServiceFigures:
        """The operator's figures of this process, from its counters since it started."""
        assignments, assignment_s = _histogram_sum(self.time_to_assignment)
        placements, retries = _total(self.placements), _total(self.retries)
        failures = _total(self.node_failures)
        settled, lag_s = _histogram_sum(self.settlement_lag)
        hours = max(time.monotonic() - self.started_at, 1.0) / 3600
        return ServiceFigures(
            assignments=int(assignments),
            time_to_assignment_mean_s=assignment_s / assignments if assignments else None,
            time_to_assignment_p50_s=self.recent_assignments.quantile(0.50),
            time_to_assignment_p99_s=self.recent_assignments.quantile(0.99),
            placements=int(placements), retries=int(retries),
            rerun_share=retries / placements if placements else None,
            node_failures=int(failures), node_failures_per_hour=failures / hours,
            upload_errors=int(_total(self.upload_errors)),
            divergence=int(_total(self.divergence)),
            settlement_lag_mean_s=lag_s / settled if settled else None)


@dataclass(frozen=True, slots=True)
class ServiceFigures:
    """Slow assignments with a low re-run share point at overload; re-runs, node failures and
    upload errors concentrated on some providers point at them; divergence at the chain."""

    assignments: int
    time_to_assignment_mean_s: float | None
    # of the latest `RECENT_ASSIGNMENTS` starts: task ready -> its lease started
    time_to_assignment_p50_s: float | None
    time_to_assignment_p99_s: float | None
    placements: int
    retries: int
    rerun_share: float | None  # tasks sent back to the queue per lease granted
    node_failures: int
    node_failures_per_hour: float
    upload_errors: int
    divergence: int  # jobs whose chain state disagreed with the orchestrator's
    settlement_lag_mean_s: float | None


# The derived figures as gauges (the counters they come from are exported as they are).
_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("mesh_time_to_assignment_p50_seconds", "time_to_assignment_p50_s",
     "Median time from a task ready to its lease started, over the latest starts"),
    ("mesh_time_to_assignment_p99_seconds", "time_to_assignment_p99_s",
     "99th percentile of the time from a task ready to its lease started, over the latest "
     "starts"),
    ("mesh_task_rerun_share", "rerun_share", "Tasks sent back to the queue per lease granted"),
    ("mesh_node_failures_per_hour", "node_failures_per_hour",
     "Nodes declared dead per hour since this process started"),
)


class _FiguresCollector(Collector):
    def __init__(self, figures: Callable[[], ServiceFigures]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self._figures()
        for name, field, documentation in _GAUGES:
            value = getattr(figures, field)
            if value is not None:
                yield GaugeMetricFamily(name, documentation, value=value)

    def describe(self) -> Iterator[Metric]:  # registration must not read the counters yet
        for name, _, documentation in _GAUGES:
            yield GaugeMetricFamily(name, documentation)


def _total(metric: Counter) -> float:
    return sum(sample.value for family in metric.collect() for sample in family.samples
               if sample.name.endswith("_total"))


def _histogram_sum(metric: Histogram) -> tuple[float, float]:
    """(count, sum) of an unlabelled histogram."""
    samples = {s.name: s.value for family in metric.collect() for s in family.samples}
    return samples.get(metric._name + "_count", 0.0), samples.get(metric._name + "_sum", 0.0)
