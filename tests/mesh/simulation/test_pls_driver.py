"""The PLS driver's bookkeeping of DEAD verdicts: a silence the node's peers share keeps its
lease and stays out of its record, a lone one counts as the node's own departure; and the
faster node a task may wait for is one that could take it."""

from __future__ import annotations

import dataclasses

import numpy as np

from mesh.simulation.pls_driver import PlsDriver
from mesh.simulation.policies import TaskView
from orchestrator.domain.types import TaskNeeds
from orchestrator.scheduling.free_slots import FreeSlots
from tests.mesh.simulation.test_sim_engine import profile, spec


def driver_of(count: int) -> PlsDriver:
    """`count` nodes on one ISP network, all online since t=0."""
    profiles = [profile(f"node-{i}") for i in range(count)]
    driver = PlsDriver(profiles, [spec(p) for p in profiles], np.random.default_rng(0), seed=0)
    for node in range(count):
        driver.node_up(node, 0.0)
    return driver


def departures(driver: PlsDriver, node: int, now: float) -> int:
    return driver.book.summary(driver.profiles[node].node_id, now).abrupt_departures


def test_a_silence_shared_with_a_peer_is_held_and_kept_out_of_the_record() -> None:
    driver = driver_of(3)
    driver.node_down(0, 10_000.0)
    driver.node_down(1, 10_010.0)  # the same network, inside the window: one upstream cut
    assert driver.lease_hold_s(1, 10_010.0) == driver.lease_hold.hold_s
    assert departures(driver, 1, 10_010.0) == 0
    # The first to fall silent could not yet be told from a lone departure.
    assert driver.lease_hold_s(0, 10_000.0) == 0.0
    assert departures(driver, 0, 10_000.0) == 1


def test_a_lone_silence_is_revoked_and_counts_as_a_departure() -> None:
    driver = driver_of(3)
    driver.node_down(0, 10_000.0)
    driver.node_down(1, 10_000.0 + 2 * driver.lease_hold.window_s)  # too far apart
    assert driver.lease_hold_s(1, 10_060.0) == 0.0
    assert [departures(driver, node, 10_060.0) for node in (0, 1, 2)] == [1, 1, 0]


def test_a_task_waits_only_for_a_faster_busy_node_that_may_take_it() -> None:
    """An RTX 3060 is free, an RTX 4090 busy: a frame range that runs past its critical path
    on the 3060 waits for the 4090 when the 4090's tier and VRAM may take it, and starts at
    once when they may not (a node that could never run it frees nothing for it)."""
    profiles = [dataclasses.replace(profile("slow"), gpu="RTX 3060", vram_gb=12),
                dataclasses.replace(profile("fast"), gpu="RTX 4090")]
    driver = PlsDriver(profiles, [spec(p) for p in profiles], np.random.default_rng(0), seed=0)
    for node in range(2):
        driver.node_up(node, 0.0)  # each passes its handshake: its class's speed
    needs = TaskNeeds(min_vram_gb=8, expected_duration_s=3_600.0, critical_path_s=3_600.0)
    free = np.array([0], dtype=np.intp)

    def taken(able: list[bool]) -> tuple[int, int] | str | None:
        """What the service's rule makes of the driver's ranking and gate: (node, slot)."""
        task = TaskView(0, needs, 3_600.0, 60.0, 86_400.0, np.array(able), np.ones(2, bool))
        slots = FreeSlots({0: [0], 1: []}, lambda kind, now: driver.rank(task, free, now),
                          gate=driver, provider_of=driver.providers.__getitem__)
        result = slots.take(task, needs, 60.0)
        return result if result is None or isinstance(result, str) else result[:2]

    assert taken([True, True]) == "held"
    assert taken([True, False]) == (0, 0)
