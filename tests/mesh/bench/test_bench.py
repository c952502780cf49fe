"""Smoke runs of the benchmarks at toy scale: they produce the documented JSON and really
place / ingest (the full-scale numbers come from `mesh bench schedule|ingest`)."""

from __future__ import annotations

import pytest

from agent.sandbox import isolation
from mesh.bench import ingest, sandbox, schedule


def test_schedule_bench_places_every_placeable_task_on_sqlite() -> None:
    result = schedule.run(nodes=40, tasks=200, backends=["sqlite"])["sqlite"]
    assert result["placements"] + result["unplaced"] == 200
    assert result["placements"] >= 150
    assert result["placements_per_s"] > 0 and result["p99_ms"] >= result["p50_ms"] >= 0


def test_schedule_bench_through_the_pls_gate_places_as_many_and_locks_each() -> None:
    plain = schedule.run(nodes=40, tasks=200, backends=["sqlite"])["sqlite"]
    gated = schedule.run(nodes=40, tasks=200, backends=["sqlite"], pls=True)
    assert gated["pls"] is True
    assert gated["sqlite"]["placements"] == plain["placements"]
    assert gated["sqlite"]["locks"] == gated["sqlite"]["placements"]


@pytest.mark.postgres
def test_schedule_bench_runs_on_postgresql(postgres_url: str) -> None:
    result = schedule.run(nodes=40, tasks=200, backends=["postgresql"])["postgresql"]
    assert result["placements"] >= 150 and result["conflicts"] == 0


@pytest.mark.slow
def test_ingest_bench_lands_every_nodes_heartbeat_in_the_db() -> None:
    result = ingest.run(nodes=50, seconds=1.0)
    assert result["errors"] == 0
    assert result["nodes_with_heartbeat_in_db"] == 50
    assert result["heartbeats_per_s"] > 0


@pytest.mark.slow
def test_sandbox_bench_times_the_same_render_on_both_sides() -> None:
    """One tiny pair: both renders ran (the sandboxed one in the agent's own isolation) and
    their CPU times, which the overhead is read from on a loaded machine, are the render's."""
    result = sandbox.run(pairs=1, frames=1, samples=4, resolution=(32, 24), threads=1)

    assert result["isolation"] == isolation()
    direct, boxed = result["direct_cpu_s"][0], result["sandboxed_cpu_s"][0]
    assert direct > 0.2 and boxed > 0.2  # bpy's import and a render
    assert 0.5 < boxed / direct < 2.0
    assert result["sandbox_cpu_overhead"] == pytest.approx(boxed / direct, rel=0.01)
    assert result["sandbox_overhead"] == result["pair_ratios"][0] > 0
