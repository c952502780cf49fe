"""The PLS driver's bookkeeping of DEAD verdicts: a silence the node's peers share keeps its
lease and stays out of its record, a lone one counts as the node's own departure."""

from __future__ import annotations

import numpy as np

from orchestrator.simulation.pls_driver import PlsDriver
from tests.simulation.test_sim_engine import profile, spec


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
