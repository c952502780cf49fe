"""The operator's service figures, derived from the counters, and the same on `/metrics`."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from orchestrator.telemetry.metrics import MeshMetrics


def scraped(metrics: MeshMetrics) -> dict[str, float]:
    return {line.split(" ")[0]: float(line.split(" ")[1])
            for line in generate_latest(metrics.registry).decode().splitlines()
            if line and not line.startswith("#")}


def test_figures_follow_the_counters_and_the_scrape_shows_them() -> None:
    metrics = MeshMetrics()
    empty = metrics.figures()
    assert (empty.rerun_share, empty.time_to_assignment_p95_s) == (None, None)
    assert "mesh_task_rerun_share" not in scraped(metrics)  # no placement yet: no ratio
    metrics.placements.inc(8)
    metrics.retries.labels("dead").inc()
    metrics.retries.labels("lapsed").inc()
    for seconds in [0.002] * 18 + [4.0, 20.0]:
        metrics.time_to_assignment.observe(seconds)
    metrics.upload_errors.labels("blob_too_large").inc()
    metrics.upload_errors.labels("blob_hash_mismatch").inc(2)
    metrics.node_failures.inc(3)
    figures = metrics.figures()
    assert (figures.placements, figures.retries, figures.rerun_share) == (8, 2, 0.25)
    assert figures.time_to_assignment_mean_s == pytest.approx((18 * 0.002 + 24.0) / 20)
    assert figures.time_to_assignment_p95_s == 5  # 19 of 20 fall under the 5 s bucket
    assert (figures.upload_errors, figures.node_failures) == (3, 3)
    assert 0 < figures.node_failures_per_hour <= 3 * 3600  # over at least a second
    samples = scraped(metrics)
    assert samples["mesh_task_rerun_share"] == 0.25
    assert samples["mesh_time_to_assignment_p95_seconds"] == 5
    assert samples["mesh_node_failures_per_hour"] > 0
