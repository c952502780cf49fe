"""Verification end to end: `mesh agent run` processes (honest ones on both CPU kernels, and
cheaters: the real agent with a dishonest renderer, `python -m mesh.bench.cheating_agent`)
against the orchestrator under uvicorn and the contracts on anvil; real Cycles renders, tiny
(32x24, two shared cores). Every cheat is caught, no honest node is ever rejected, and the jobs
settle on their own, paying only for results that passed."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from mesh.localgrid import AgentProcess, Grid, wait_for
from orchestrator.domain.merkle import verify
from orchestrator.domain.verification import Leaf
from protocol.client import expect

pytestmark = [pytest.mark.anvil, pytest.mark.slow]
ADMIN = {"x-admin-key": "test-admin"}
TINY = {"samples": 8, "chunk_samples": 4, "resolution": [32, 24]}
SLOWER = {"samples": 64, "chunk_samples": 32, "resolution": [32, 24]}


def cheater(cheat: str) -> list[str]:
    return [sys.executable, "-m", "mesh.bench.cheating_agent", cheat]


def admin(grid: Grid, path: str) -> Any:
    assert grid.customer is not None
    return expect(grid.customer.http.get(f"/v1/admin{path}", headers=ADMIN))


def delivered(agent: AgentProcess) -> bool:
    return "acknowledged" in agent.log()


def settled(grid: Grid, job_id: str) -> bool:
    return grid.job(job_id)["status"] in ("settling", "settled")


def failed_evidence(grid: Grid, tasks: int) -> list[dict[str, Any]]:
    """Evidence of every failed result, each checked against its commitment's root."""
    found = []
    for task_id in range(1, tasks + 1):
        for row in admin(grid, f"/tasks/{task_id}/verification"):
            if row["status"] != "failed" or not row["evidence"]:
                continue
            evidence = row["evidence"][0]["evidence"]
            root = bytes.fromhex(evidence["root"][2:])
            for entry in evidence["proofs"]:
                leaf = Leaf.from_json(entry["leaf"])
                assert verify([bytes.fromhex(p[2:]) for p in entry["proof"]], root, leaf.hash)
            assert evidence["result_sha256"] and evidence["recipe"]["payload"]["blend_sha256"]
            assert len(evidence["checks"]) == 2  # the checker and the tie-breaker agreed
            found.append(evidence)
    return found


def test_lazyStaleAndTamperingNodes_areCaught_honestNodesOnBothKernelsNeverRejected(
        grid: Grid, scene: Path) -> None:
    grid.start(MESH_PLS_DECIDE_INTERVAL_S="1")  # slash decisions within the test
    cheats = {"lazy": "lazy", "stale": "stale", "tamper": "tamper:0.25"}
    cheaters = [grid.agent(name, launcher=cheater(cheat)) for name, cheat in cheats.items()]
    honest = [grid.agent("honest-avx2"), grid.agent("honest-sse42", "--cpu-kernel", "sse42"),
              grid.agent("honest-3")]
    for agent in cheaters:
        agent.start()
    grid.wait_logged_in(cheaters)
    # A frame each, in a job open only to that cheater and the honest providers, who start
    # once every cheater has delivered: no cheater can take another's frame (one that
    # polled late under load would otherwise go without a task and never be caught).
    blend = grid.upload(scene)
    jobs = [grid.submit_workload({"kind": "blender", "blend_sha256": blend,
                                  "frames": {"start": frame, "end": frame}, **SLOWER},
                                 needs={"providers": [agent.address,
                                                      *(h.address for h in honest)]})
            for frame, agent in enumerate(cheaters, start=1)]
    for agent in cheaters:
        wait_for(f"{agent.name} to deliver", partial(delivered, agent), timeout_s=240)
    for agent in honest:
        agent.start()

    for job_id in jobs:
        wait_for("the job to settle on its own", partial(settled, grid, job_id), timeout_s=480)
    counts = admin(grid, "/verification")
    by_node = counts["by_node"]
    for name in cheats:
        assert by_node[name].get("failed", 0) >= 1, (name, by_node, grid.agents[0].log()[-2000:])
        assert set(by_node[name]) == {"failed"}, by_node  # no cheated result ever passed
    for agent in honest:
        assert "failed" not in by_node.get(agent.name, {}), by_node  # no false rejection
    frames = len(jobs)  # a task each: task ids 1..frames
    evidence = failed_evidence(grid, frames)
    assert {e["node_id"] for e in evidence} == set(cheats)
    def evidence_digests() -> set[str]:
        return {row["evidence"][0]["digest"] for task_id in range(1, frames + 1)
                for row in admin(grid, f"/tasks/{task_id}/verification") if row["evidence"]}

    def slashed_with_evidence() -> tuple[list[dict[str, Any]], set[str]] | None:
        """Each failed result's slash (the staking decision queues them) is in the outbox."""
        found, digests = grid.outbox("slash"), evidence_digests()
        carried = {a["payload"]["evidence"] for a in found}
        return (found, digests) if len(found) >= len(cheats) and carried == digests else None

    slashes, digests = wait_for("a slash with its evidence for every failed result",
                                slashed_with_evidence, timeout_s=120)
    assert {a["payload"]["evidence"] for a in slashes} == digests  # each carries its evidence
    assert {a["payload"]["provider"] for a in slashes} == {a.address for a in cheaters}
    outbox = admin(grid, "/outbox")
    settle = {a["idempotency_key"]: a for a in outbox if a["kind"] == "settle"}
    assert sorted(settle) == sorted(f"settle:{job_id}" for job_id in jobs)  # once each
    for action in settle.values():
        assert not {a.address for a in cheaters} & set(action["payload"]["providers"])
    kernels = {c.get("exact") for row in range(1, frames + 1)
               for commitment in admin(grid, f"/tasks/{row}/verification")
               for check in commitment["checks"] if check["comparison"]
               for c in check["comparison"].values()}
    assert kernels == {True, False}  # exact within a kernel, the tolerance across kernels


def test_sleeperBehavesUntilTrustedThenCheats_isCaught(grid: Grid, scene: Path) -> None:
    # floor 50 %: a trusted provider's windows are still drawn often enough for a short test
    grid.start(MESH_VERIFICATION_POLICY="adaptive-50%")
    frames = 8
    agents = [grid.agent(f"honest-{i}").start() for i in range(2)]
    sleeper = grid.agent("sleeper", launcher=cheater("sleeper:3")).start()
    grid.wait_logged_in([*agents, sleeper])
    job_id = grid.submit(scene, frames={"start": 1, "end": frames}, **TINY)

    wait_for("the job to settle on its own", lambda: settled(grid, job_id), timeout_s=480)
    counts = admin(grid, "/verification")
    by_node = counts["by_node"]
    assert by_node["sleeper"].get("passed", 0) >= 1, by_node  # it was honest at first
    caught = by_node["sleeper"].get("failed", 0) + counts["overturned"]
    assert caught >= 1, (by_node, sleeper.log()[-3000:])
    for agent in agents:
        assert "failed" not in by_node.get(agent.name, {}), by_node
