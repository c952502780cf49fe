"""The operator's service figures, derived from the counters, and the same on `/metrics`."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from orchestrator.telemetry.metrics import RECENT_ASSIGNMENTS, MeshMetrics, RecentTimes


def scraped(metrics: MeshMetrics) -> dict[str, float]:
    return {line.split(" ")[0]: float(line.split(" ")[1])
            for line in generate_latest(metrics.registry).decode().splitlines()
            if line and not line.startswith("#")}


def test_figures_follow_the_counters_and_the_scrape_shows_them() -> None:
    metrics = MeshMetrics()
    empty = metrics.figures()
    assert (empty.rerun_share, empty.time_to_assignment_p50_s,
            empty.time_to_assignment_p99_s) == (None, None, None)
    assert "mesh_task_rerun_share" not in scraped(metrics)  # no placement yet: no ratio
    metrics.placements.inc(8)
    metrics.retries.labels("dead").inc()
    metrics.retries.labels("lapsed").inc()
    for seconds in [0.002] * 18 + [4.0, 20.0]:
        metrics.assigned(seconds)
    metrics.upload_errors.labels("blob_too_large").inc()
    metrics.upload_errors.labels("blob_hash_mismatch").inc(2)
    metrics.node_failures.inc(3)
    figures = metrics.figures()
    assert (figures.placements, figures.retries, figures.rerun_share) == (8, 2, 0.25)
    assert figures.time_to_assignment_mean_s == pytest.approx((18 * 0.002 + 24.0) / 20)
    # the recorded times themselves, not the bounds of the buckets they fall in (0.005, 30)
    assert (figures.time_to_assignment_p50_s, figures.time_to_assignment_p99_s) == (0.002, 20.0)
    assert (figures.upload_errors, figures.node_failures) == (3, 3)
    assert 0 < figures.node_failures_per_hour <= 3 * 3600  # over at least a second
    samples = scraped(metrics)
    assert samples["mesh_task_rerun_share"] == 0.25
    assert samples["mesh_time_to_assignment_p50_seconds"] == 0.002
    assert samples["mesh_time_to_assignment_p99_seconds"] == 20.0
    assert samples["mesh_time_to_assignment_seconds_count"] == 20
    assert samples["mesh_node_failures_per_hour"] > 0


def test_assignment_quantiles_are_over_the_latest_starts() -> None:
    metrics = MeshMetrics()
    for _ in range(RECENT_ASSIGNMENTS):
        metrics.assigned(60.0)  # a backlog
    for _ in range(100):
        metrics.assigned(0.5)  # drained since
    figures = metrics.figures()
    assert (figures.time_to_assignment_p50_s, figures.time_to_assignment_p99_s) == (60.0, 60.0)
    for _ in range(RECENT_ASSIGNMENTS - 100):
        metrics.assigned(0.5)
    figures = metrics.figures()
    assert (figures.time_to_assignment_p50_s, figures.time_to_assignment_p99_s) == (0.5, 0.5)
    assert figures.assignments == 2 * RECENT_ASSIGNMENTS  # the histogram keeps every one


def test_nearest_rank_quantiles() -> None:
    times = RecentTimes(10)
    assert times.quantile(0.5) is None
    for seconds in (3.0, 1.0, 2.0):
        times.record(seconds)
    assert [times.quantile(q) for q in (0.01, 0.5, 0.67, 0.99, 1.0)] == [1.0, 2.0, 3.0, 3.0, 3.0]
