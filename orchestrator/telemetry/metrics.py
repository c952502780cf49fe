"""Prometheus metrics, one registry per app so tests and replicas never share counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)


class MeshMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.time_to_assignment = Histogram(
            "mesh_time_to_assignment_seconds", "Task creation to its first lease",
            buckets=LATENCY_BUCKETS, registry=r)
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
