"""Held leases in the engine: a node the policy keeps its lease through a silence either
resumes it (nothing lost, nothing moved) or loses it later, with the same accounting as a
lease revoked at the verdict."""

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
WORK_S = 20_000.0


class LostLeases(PlacementObserver):
    def __init__(self) -> None:
        self.lost: list[tuple[int, float]] = []  # (node, when the lease was given up)

    def attempt_lost(self, sim: Simulation, attempt: Attempt, blameless: bool) -> None:
        self.lost.append((attempt.node, sim.now))


@pytest.fixture(autouse=True)
def quiet_world(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(world_module, "MISSED_HEARTBEAT_PER_DAY", 0.0)
    monkeypatch.setattr(world_module, "NETWORK_OUTAGES_PER_DAY", 0.0)
    monkeypatch.setattr(world_module, "REGION_OUTAGES_PER_DAY", 0.0)


def run(sessions: list[Session], cut: tuple[float, float] | None, hold_s: float,
        lone_grace_s: float = 0.0) -> tuple[Simulation, LostLeases]:
    """Node 0 takes one long task (node 1 is always there); its heartbeats stop for `cut`."""
    profiles = [profile("held"), profile("steady")]
    trace = {"held": sessions, "steady": [Session(0.0, math.inf)]}
    world = World(trace, {p.node_id: p for p in profiles}, 86_400.0, np.random.default_rng(0))
    if cut is not None:
        world.detector.forget("held")
        timeline = world.timelines["held"]
        timeline.up_at.clear()
        timeline.down_at.clear()
        timeline.partitions.clear()
        world._observe("held", world.profiles["held"], timeline, [cut], np.random.default_rng(1))
        timeline.index()
        assert timeline.partitions[0].dead_at is not None  # the detector calls it DEAD
    recorder = LostLeases()
    sim = Simulation(world, profiles, [spec(p) for p in profiles], [one_job(WORK_S)],
                     Prefer(0, hold_s=hold_s), np.random.default_rng(0), [recorder],
                     lone_grace_s=lone_grace_s)
    sim.run()
    return sim, recorder


def test_a_held_lease_rides_out_a_partition_and_finishes_on_the_same_node() -> None:
    sim, recorder = run([Session(0.0, math.inf)], (CUT_AT, CUT_AT + 300.0), hold_s=900.0)
    assert recorder.lost == []
    assert sim.result.reassignments == 0
    assert sim.result.waste_revoked_s == 0.0
    assert sim.result.useful_s == pytest.approx(WORK_S)
    assert sim.result.earnings[0] > 0.0 and sim.result.earnings[1] == 0.0


def test_without_a_hold_the_same_partition_revokes_the_lease() -> None:
    sim, recorder = run([Session(0.0, math.inf)], (CUT_AT, CUT_AT + 300.0), hold_s=0.0)
    assert [node for node, _ in recorder.lost] == [0]
    assert sim.result.reassignments == 1
    assert sim.result.waste_revoked_s > 0.0
    assert sim.result.useful_s == pytest.approx(WORK_S)


def test_a_hold_that_runs_out_revokes_then_with_the_work_lost_at_the_cut() -> None:
    held, held_log = run([Session(0.0, math.inf)], (CUT_AT, CUT_AT + 3_000.0), hold_s=900.0)
    now, now_log = run([Session(0.0, math.inf)], (CUT_AT, CUT_AT + 3_000.0), hold_s=0.0)
    (node, given_up_at), = held_log.lost
    (_, revoked_at), = now_log.lost
    assert node == 0 and given_up_at == pytest.approx(revoked_at + 900.0)
    # Checkpoints stop at the cut either way: holding loses no more work, it only waits.
    assert held.result.waste_revoked_s == pytest.approx(now.result.waste_revoked_s)
    assert held.result.useful_s == pytest.approx(WORK_S)


def test_a_node_that_comes_back_as_a_new_process_reports_its_held_lease_lost() -> None:
    sim, recorder = run([Session(0.0, CUT_AT), Session(CUT_AT + 200.0, math.inf)], None,
                        hold_s=900.0)
    (node, given_up_at), = recorder.lost
    assert node == 0 and CUT_AT + 200.0 <= given_up_at < CUT_AT + 300.0  # at reconnect
    assert sim.result.waste_lost_s > 0.0 and sim.result.reassignments == 1
    assert sim.result.useful_s == pytest.approx(WORK_S)


def test_the_lone_grace_keeps_a_lease_the_policy_would_revoke_through_a_short_cut() -> None:
    sim, recorder = run([Session(0.0, math.inf)], (CUT_AT, CUT_AT + 200.0), hold_s=0.0,
                        lone_grace_s=300.0)
    assert recorder.lost == [] and sim.result.reassignments == 0
    assert sim.result.useful_s == pytest.approx(WORK_S)


def test_a_lone_grace_that_runs_out_loses_the_lease_then_with_the_same_work_lost() -> None:
    graced, graced_log = run([Session(0.0, math.inf)], (CUT_AT, CUT_AT + 3_000.0), hold_s=0.0,
                             lone_grace_s=300.0)
    now, now_log = run([Session(0.0, math.inf)], (CUT_AT, CUT_AT + 3_000.0), hold_s=0.0)
    (_, given_up_at), = graced_log.lost
    (_, revoked_at), = now_log.lost
    assert given_up_at == pytest.approx(revoked_at + 300.0)
    assert graced.result.waste_revoked_s == pytest.approx(now.result.waste_revoked_s)
