"""The story the demo's Reliability Scores tell (issue 34, item 8), on real `mesh agent run`
processes on one loaded 2-core host: the honest steady nodes stay above the placement floor
while busy loops and renders load every CPU, a node SIGKILLed and restarted within the failure
detector's threshold scores below them, and a cheater caught by verification scores below
the honest nodes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest

from mesh.localgrid import ADMIN_KEY, AgentProcess, Grid, wait_for
from orchestrator.domain.pls_engine import PlsConfig
from protocol.client import expect

pytestmark = [pytest.mark.anvil, pytest.mark.slow]
TINY = {"samples": 8, "chunk_samples": 4, "resolution": [32, 24]}
T_S = 60.0  # the demo's RS horizon (`mesh.demo.board.TASK_DURATION_S`)
FLOOR = PlsConfig().min_rs  # the service's default floor: this grid sets none of its own
SERVE_S = 30.0  # six probes a node (one per 10 heartbeats of 0.5 s) before the scores are read


@pytest.fixture
def cpu_load() -> Iterator[None]:
    """Two busy loops, one per core of the host, for as long as the test runs: every core is
    busy, as a provider's host is with its renders. Niced as the agent nices its renders
    (`agent.sandbox.Limits.niceness`): the load takes the CPU's idle time, not the services'
    turn (at nice 0 on a 2-core host shared with anvil, the orchestrator and four agents, the
    scheduler alone delays probe replies by tens of ms, which the stability factor reads as
    link jitter)."""
    loops = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"])
             for _ in range(2)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def scores(grid: Grid, agents: list[AgentProcess]) -> dict[str, dict[str, float]]:
    """Each node's RS over T and its factors, as `GET /v1/nodes/{id}/score` answers."""
    with httpx.Client(base_url=grid.url, timeout=10.0) as http:
        return {a.name: expect(http.get(f"/v1/nodes/{a.name}/score",
                                        params={"duration_s": T_S})) for a in agents}


def failed_checks(grid: Grid, name: str) -> int | None:
    by_node = expect(httpx.get(f"{grid.url}/v1/admin/verification", timeout=10.0,
                               headers={"x-admin-key": ADMIN_KEY}))["by_node"]
    return int(by_node.get(name, {}).get("failed", 0)) or None


def test_steadyNodesAboveTheFloorUnderLoad_aKilledAndRestartedNodeAndACheaterBelowThem(
        grid: Grid, scene: Path, cpu_load: None) -> None:
    grid.start(MESH_PLS_DECIDE_INTERVAL_S="1", MESH_VERIFICATION_WINDOWS="2")
    lazy = grid.agent("lazy-4", launcher=[sys.executable, "-m", "mesh.bench.cheating_agent",
                                          "lazy"])
    steady = [grid.agent("steady-1"), grid.agent("steady-2")]
    churn = grid.agent("churn-3")
    lazy.start()
    grid.wait_logged_in([lazy])
    # the cheater's frame first: a job only it and the steady nodes may take, started alone
    job = grid.submit_workload({"kind": "blender", "blend_sha256": grid.upload(scene),
                                "frames": {"start": 1, "end": 1}, **TINY},
                               needs={"providers": [lazy.address, *(s.address for s in steady)]})
    wait_for("lazy-4 to deliver", lambda: "acknowledged" in lazy.log() or None, timeout_s=180)
    for agent in (*steady, churn):
        agent.start()
    grid.wait_logged_in([*steady, churn])
    wait_for("verification to catch lazy-4", partial(failed_checks, grid, "lazy-4"),
             timeout_s=240)
    wait_for("the job to settle", lambda: grid.job(job)["status"] in ("settling", "settled")
             or None, timeout_s=120)
    time.sleep(SERVE_S)  # every node serves on under the load: its probes are read
    # SIGKILL, and a new process at once: back before the detector could call it DEAD
    churn.kill()
    churn.start()
    wait_for("churn-3's new process to log in",
             lambda: churn.log().count("logged in") == 2 or None, timeout_s=60)
    read = scores(grid, [*steady, churn, lazy])
    rs = {name: float(score["rs"]) for name, score in read.items()}
    honest = min(rs[s.name] for s in steady)
    assert honest >= FLOOR, read
    assert rs["churn-3"] < honest, read
    assert rs["lazy-4"] < honest, read
