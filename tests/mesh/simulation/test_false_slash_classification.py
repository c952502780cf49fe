"""Which lost leases the churn benchmark calls blameless: a slash for one of them counts as a
false slash, so a node that really left must never land there."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mesh.simulation import world as world_module
from mesh.simulation.engine import Attempt, PlacementObserver, Simulation
from mesh.simulation.traces import Session
from mesh.simulation.world import World
from tests.mesh.simulation.test_sim_engine import Prefer, one_job, profile, spec

CUT_AT = 5_000.0


class LostLeases(PlacementObserver):
    """Records every lost attempt with the engine's blame verdict."""

    def __init__(self) -> None:
        self.lost: list[tuple[int, bool]] = []

    def attempt_lost(self, sim: Simulation, attempt: Attempt, blameless: bool) -> None:
        self.lost.append((attempt.node, blameless))


def run_with_cut(session_end: float, cut_s: float) -> tuple[Simulation, LostLeases]:
    """Node 0 holds a long task; its heartbeats stop at CUT_AT for `cut_s` (an ISP partition
    clipped to its session, as `World` clips them) and its session ends at `session_end`."""
    profiles = [profile("cut"), profile("steady")]
    trace = {"cut": [Session(0.0, session_end)], "steady": [Session(0.0, math.inf)]}
    world = World(trace, {p.node_id: p for p in profiles}, 86_400.0, np.random.default_rng(0))
    world.detector.forget("cut")
    timeline = world.timelines["cut"]
    timeline.up_at.clear()
    timeline.down_at.clear()
    timeline.partitions.clear()
    cut = (CUT_AT, min(CUT_AT + cut_s, session_end))
    world._observe("cut", world.profiles["cut"], timeline, [cut], np.random.default_rng(1))
    timeline.index()
    assert timeline.partitions[0].dead_at is not None  # the detector called it DEAD mid-cut
    recorder = LostLeases()
    sim = Simulation(world, profiles, [spec(p) for p in profiles], [one_job(20_000.0)],
                     Prefer(0), np.random.default_rng(0), [recorder])
    sim.run()
    return sim, recorder


@pytest.fixture(autouse=True)
def quiet_world(monkeypatch: pytest.MonkeyPatch) -> None:
    """No background blips or outages: only the cut each test draws."""
    monkeypatch.setattr(world_module, "MISSED_HEARTBEAT_PER_DAY", 0.0)
    monkeypatch.setattr(world_module, "NETWORK_OUTAGES_PER_DAY", 0.0)
    monkeypatch.setattr(world_module, "REGION_OUTAGES_PER_DAY", 0.0)


def test_node_whose_session_ends_inside_a_partition_departed_and_is_not_blameless() -> None:
    # Seed 3 of the churn bench: heartbeats stopped 0.6-43 s before the trace's session end,
    # the detector fired inside that cut, and the abandonment slash counted as false.
    sim, recorder = run_with_cut(session_end=CUT_AT + 60.0, cut_s=600.0)
    assert recorder.lost == [(0, False)]
    assert sim.result.waste_lost_s > 0.0
    assert sim.result.waste_revoked_s == 0.0


def test_partition_the_process_outlives_is_a_blameless_revocation() -> None:
    sim, recorder = run_with_cut(session_end=math.inf, cut_s=600.0)
    assert recorder.lost == [(0, True)]
    assert sim.result.waste_revoked_s > 0.0
    assert sim.result.waste_lost_s == 0.0
