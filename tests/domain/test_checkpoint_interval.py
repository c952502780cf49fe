"""Young/Daly checkpoint intervals and their bounds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.domain.checkpointing import (
    CheckpointCost,
    CheckpointPolicy,
    daly_interval,
    young_interval,
)
from orchestrator.domain.reliability import PopulationPrior, ReliabilityBook


@given(st.floats(0.1, 600.0), st.floats(60.0, 1e7))
def test_young_interval_is_sqrt_two_c_m(cost: float, mtbf: float) -> None:
    assert young_interval(cost, mtbf) == pytest.approx(math.sqrt(2 * cost * mtbf))


def test_daly_tends_to_young_when_cost_is_small() -> None:
    assert daly_interval(1.0, 1e7) == pytest.approx(young_interval(1.0, 1e7), rel=1e-3)
    assert daly_interval(100.0, 30.0) == 30.0  # cost beyond 2 MTBF: checkpoint every MTBF


@given(st.floats(0.1, 600.0), st.floats(1.0, 1e8))
def test_policy_interval_stays_within_bounds(cost: float, mtbf: float) -> None:
    policy = CheckpointPolicy(min_s=30.0, max_s=3600.0)
    assert 30.0 <= policy.interval(cost, mtbf) <= 3600.0


@given(st.floats(0.1, 600.0), st.floats(1.0, 1e8), st.floats(1.0, 1e8))
def test_flakier_nodes_checkpoint_at_least_as_often(cost: float, m1: float, m2: float) -> None:
    policy = CheckpointPolicy(min_s=30.0, max_s=3600.0, method="daly")
    flaky, stable = sorted((m1, m2))
    assert policy.interval(cost, flaky) <= policy.interval(cost, stable) + 1e-9


def test_policy_follows_young_between_bounds_and_infinite_mtbf_gives_max() -> None:
    policy = CheckpointPolicy(min_s=30.0, max_s=3600.0)
    assert policy.interval(10.0, 20_000.0) == pytest.approx(math.sqrt(2 * 10.0 * 20_000.0))
    assert policy.interval(10.0, math.inf) == 3600.0
    assert policy.interval(10.0, 1.0) == 30.0


@pytest.mark.parametrize(("cost", "mtbf"), [(0.0, 10.0), (1.0, 0.0), (-1.0, 5.0)])
def test_nonpositive_inputs_are_refused(cost: float, mtbf: float) -> None:
    with pytest.raises(ValueError):
        young_interval(cost, mtbf)


def test_checkpoint_cost_tracks_recent_measurements() -> None:
    cost = CheckpointCost(initial_s=5.0, alpha=0.5)
    assert cost.value == 5.0
    cost.observe(10.0)
    assert cost.value == 10.0
    cost.observe(20.0)
    assert cost.value == 15.0
    with pytest.raises(ValueError):
        cost.observe(0.0)


def test_flaky_node_gets_a_shorter_interval_from_its_own_predicted_hazard() -> None:
    book = ReliabilityBook(PopulationPrior.from_weibull(0.4, 3 * 3600.0, 2.0))
    for node, length in (("flaky", 600.0), ("stable", 5 * 86_400.0)):
        t = 0.0
        for _ in range(20):
            book.session_started(node, t)
            t += length
            book.session_ended(node, t, abrupt=True)
        book.session_started(node, 1e8 - 3600.0)
    policy = CheckpointPolicy(min_s=30.0, max_s=3600.0)
    flaky_mtbf = book.predicted_mtbf_s("flaky", 1e8, 3600.0)
    stable_mtbf = book.predicted_mtbf_s("stable", 1e8, 3600.0)
    assert flaky_mtbf < stable_mtbf
    assert policy.interval(10.0, flaky_mtbf) < policy.interval(10.0, stable_mtbf)
    assert policy.interval(10.0, flaky_mtbf) == pytest.approx(math.sqrt(2 * 10.0 * flaky_mtbf))


@pytest.mark.parametrize(("cost_s", "mtbf_s", "expected"), [
    # C / 2M = 1/4: sqrt(2 * 8 * 16) = 16, times 1 + (1/2)/3 + (1/4)/9 = 43/36, minus 8
    (8.0, 16.0, 100.0 / 9.0),
    # C / 2M = 1/100: sqrt(100) = 10, times 1 + 0.1/3 + 0.01/9 = 931/900, minus 1
    (1.0, 50.0, 841.0 / 90.0),
    # C >= 2M: checkpointing cannot win; Daly's estimate is M itself
    (10.0, 5.0, 5.0),
    (12.0, 5.0, 5.0),
])
def test_daly_interval_by_hand(cost_s: float, mtbf_s: float, expected: float) -> None:
    assert daly_interval(cost_s, mtbf_s) == pytest.approx(expected, rel=1e-12)


def test_young_interval_by_hand_and_bad_inputs_are_refused() -> None:
    assert young_interval(8.0, 16.0) == pytest.approx(16.0, rel=1e-12)
    for formula in (young_interval, daly_interval):
        with pytest.raises(ValueError, match=r"^checkpoint cost must be > 0 seconds$"):
            formula(0.0, 10.0)
        with pytest.raises(ValueError, match=r"^MTBF must be > 0 seconds$"):
            formula(1.0, 0.0)
