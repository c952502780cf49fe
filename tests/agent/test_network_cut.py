"""A network cut longer than the reconnect grace, with real processes: the orchestrator under
uvicorn on loopback, a `mesh agent run` process talking to it through a TCP proxy that is
really stopped and restarted, collateral locked on anvil by the service's outbox, and the
slash (when there is one) sent there too. A process that rendered on through the cut shows its
chunks on reconnect and is not slashed; one that idled through it, or was restarted, is."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesh.cutproxy import CutProxy, signal_tree
from mesh.localgrid import STAKE, AgentProcess, Grid, wait_for

pytestmark = [pytest.mark.anvil, pytest.mark.slow]

GRACE_S = 3.0
DECISION_DELAY_S = 30.0  # at least the outage window, which is at least LeaseHold's 30 s
CUT_ENV = {"MESH_PLS_RECONNECT_GRACE_S": str(GRACE_S), "MESH_PLS_OUTAGE_WINDOW_S": "30",
           "MESH_PLS_DECISION_DELAY_S": str(DECISION_DELAY_S), "MESH_PLS_DECIDE_INTERVAL_S": "1",
           "MESH_LEASE_TTL_S": "60",  # the DEAD verdict (~6 s of silence) comes first
           "MESH_PLS_LONE_GRACE_S": "1"}  # the lone hold lapses before the node is back
# 200 chunks of 0.3-1 s: the frame renders on well past the DEAD verdict, which comes no
# sooner than the detector's 30 s grace after the agent's first heartbeat
FRAME = {"frames": {"start": 5, "end": 5}, "samples": 16000, "chunk_samples": 80,
         "resolution": [64, 48]}


@pytest.fixture(autouse=True)
def _started(grid: Grid) -> None:
    grid.start(**CUT_ENV)


@pytest.fixture
def proxy(grid: Grid) -> Iterator[CutProxy]:
    assert grid.port is not None
    proxy = CutProxy(grid.port).restore()
    yield proxy
    proxy.cut()


def service_log(grid: Grid) -> str:
    return (grid.data_dir / "service.log").read_text(errors="replace")


def cut_mid_frame(grid: Grid, proxy: CutProxy, scene: Path) -> tuple[AgentProcess, float]:
    """The agent renders the frame through the proxy; after its first checkpoint the cable is
    pulled until the detector calls the node DEAD. Returns the agent and when that was."""
    grid.submit(scene, **FRAME)
    agent = grid.agent("cutter").start(orchestrator=proxy.url)
    wait_for("a first checkpoint", lambda: "checkpoint 1/200" in agent.log(), timeout_s=180)
    assert [a["status"] for a in grid.outbox("assign")] != []  # collateral at stake on chain
    proxy.cut()
    wait_for("the DEAD verdict", lambda: "nodes declared dead: ['cutter']" in service_log(grid),
             timeout_s=90)
    return agent, time.monotonic()


def deferred(agent: AgentProcess) -> int:
    return agent.log().count("deferred (ConnectError)")


def wait_past_the_decision(grid: Grid, dead_at: float) -> None:
    """Until the abandonment has matured and a slash, if decided, has reached the chain."""
    time.sleep(max(dead_at + DECISION_DELAY_S + 3 - time.monotonic(), 0))
    wait_for("the outbox to settle", lambda: all(
        a["status"] == "confirmed" for a in grid.outbox("slash") + grid.outbox("assign")),
        timeout_s=30)


def test_a_cut_past_the_grace_with_rendering_going_on_ends_in_no_slash(
        grid: Grid, proxy: CutProxy, scene: Path) -> None:
    agent, dead_at = cut_mid_frame(grid, proxy, scene)
    offline = deferred(agent)
    wait_for("a chunk rendered after the verdict", lambda: deferred(agent) > offline,
             timeout_s=90)
    time.sleep(max(dead_at + GRACE_S + 1 - time.monotonic(), 0))  # back past the grace

    proxy.restore()

    wait_for("the proof of progress", lambda: "progress through the cut shown" in agent.log(),
             timeout_s=30)
    assert "progress through the cut shown: withdrawn" in agent.log()
    wait_past_the_decision(grid, dead_at)
    assert grid.outbox("slash") == []
    assert grid.chain.provider_stake(agent.address).bonded == STAKE


def test_the_same_cut_with_the_node_idle_ends_in_the_slash(
        grid: Grid, proxy: CutProxy, scene: Path) -> None:
    grid.submit(scene, **FRAME)
    agent = grid.agent("cutter").start(orchestrator=proxy.url)
    wait_for("a first checkpoint", lambda: "checkpoint 1/200" in agent.log(), timeout_s=180)
    assert agent.process is not None
    proxy.cut()
    signal_tree(agent.process.pid, signal.SIGSTOP)  # the node idles: nothing renders
    wait_for("the DEAD verdict", lambda: "nodes declared dead: ['cutter']" in service_log(grid),
             timeout_s=90)
    dead_at = time.monotonic()
    time.sleep(GRACE_S + 1)

    proxy.restore()
    signal_tree(agent.process.pid, signal.SIGCONT)

    wait_past_the_decision(grid, dead_at)
    assert "progress through the cut shown: withdrawn" not in agent.log()
    (slash,) = grid.outbox("slash")
    assert slash["payload"]["provider"] == agent.address
    assert grid.chain.provider_stake(agent.address).bonded == STAKE - int(
        slash["payload"]["amount"])


def test_the_same_cut_with_the_agent_restarted_ends_in_the_slash(
        grid: Grid, proxy: CutProxy, scene: Path) -> None:
    agent, dead_at = cut_mid_frame(grid, proxy, scene)
    offline = deferred(agent)
    wait_for("a chunk rendered after the verdict", lambda: deferred(agent) > offline,
             timeout_s=90)
    agent.kill()  # the process that rendered them is gone, its session key with it
    time.sleep(max(dead_at + GRACE_S + 1 - time.monotonic(), 0))
    proxy.restore()

    agent.start(orchestrator=proxy.url)  # a new process, the same spool

    wait_for("the refused proof", lambda: "progress through the cut refused" in agent.log(),
             timeout_s=60)
    assert "progress through the cut refused: progress_wrong_session" in agent.log()
    wait_past_the_decision(grid, dead_at)
    (slash,) = grid.outbox("slash")
    assert slash["payload"]["provider"] == agent.address
    assert grid.chain.provider_stake(agent.address).bonded < STAKE
