"""Risk-priced collateral: bounded, monotone, exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.domain.collateral import CollateralPolicy

POLICY = CollateralPolicy(floor=10**15, cap=10**22)
values = st.integers(0, 10**24)
risks = st.floats(0.0, 1.0)
durations = st.floats(0.0, 30 * 86_400.0)


@given(values, risks, durations)
def test_collateral_stays_within_floor_and_cap(value: int, p_fail: float, duration: float
                                               ) -> None:
    assert POLICY.floor <= POLICY.required(value, p_fail, duration) <= POLICY.cap


@given(values, values, risks, risks, durations)
def test_collateral_is_monotone_in_value_and_risk(v1: int, v2: int, p1: float, p2: float,
                                                  duration: float) -> None:
    low_v, high_v = sorted((v1, v2))
    low_p, high_p = sorted((p1, p2))
    assert POLICY.required(low_v, low_p, duration) <= POLICY.required(high_v, low_p, duration)
    assert POLICY.required(low_v, low_p, duration) <= POLICY.required(low_v, high_p, duration)


@given(values, risks, durations, durations)
def test_collateral_is_monotone_in_duration(value: int, p_fail: float, d1: float, d2: float
                                            ) -> None:
    short, long = sorted((d1, d2))
    assert POLICY.required(value, p_fail, short) <= POLICY.required(value, p_fail, long)


def test_collateral_formula_by_hand() -> None:
    policy = CollateralPolicy(floor=0, cap=10**30, base_bps=1_000, risk_bps=30_000,
                              duration_weight=0.25)
    # one hour: complexity 1 + 0.25 * log2(2) = 1.25; rate 0.1 + 3 * 0.2 = 0.7
    assert policy.required(10**18, 0.2, 3600.0) == 875 * 10**15


@pytest.mark.parametrize(("value", "p_fail", "expected"), [
    # 1 unit at 10 %: 0.1 of a unit, rounded UP to 1 (rounding down would lock nothing)
    (1, 0.0, 1),
    # 19 units at 10 %: 1.9 -> 2
    (19, 0.0, 2),
    # 20 units at 10 %: exactly 2, no rounding
    (20, 0.0, 2),
    # 10**18 + 1 at 0.1 + 3 * 0.2 = 0.7: 7 * 10**17 + 0.7 -> 7 * 10**17 + 1
    (10**18 + 1, 0.2, 7 * 10**17 + 1),
    # p_fail 1e-9: 30,000 bps * 1e-9 = 3e-5 bps, rounded up to a whole bps: rate 1,001 bps
    (10**4, 1e-9, 1_001),
])
def test_collateral_rounds_up_to_the_next_token_unit(value: int, p_fail: float, expected: int
                                                     ) -> None:
    # Zero duration: complexity exactly 1, so only the rate and the final division round.
    policy = CollateralPolicy(floor=0, cap=10**30)
    assert policy.required(value, p_fail, 0.0) == expected


def test_collateral_grows_with_log2_of_one_plus_hours() -> None:
    policy = CollateralPolicy(floor=0, cap=10**30, duration_weight=0.25)
    # 3 h: 1 + 0.25 * log2(4) = 1.5; 7 h: 1 + 0.25 * log2(8) = 1.75; 10 % of 10,000 = 1,000
    assert policy.required(10_000, 0.0, 3 * 3600.0) == 1_500
    assert policy.required(10_000, 0.0, 7 * 3600.0) == 1_750


def test_vector_collateral_rounds_up_like_the_exact_one() -> None:
    policy = CollateralPolicy(floor=0, cap=10**30)
    assert policy.required_many(19, np.array([0.0, 1e-9, 1.0]), 0.0).tolist() == [
        2.0, 2.0, 59.0]  # 1.9 -> 2; 1.9019 -> 2; 19 * 3.1 = 58.9 -> 59
    assert CollateralPolicy(floor=50, cap=1_000).required_many(
        10**6, np.array([0.0, 1.0]), 0.0).tolist() == [1_000.0, 1_000.0]
    assert CollateralPolicy(floor=50, cap=10**9).required_many(
        1, np.array([0.0]), 0.0).tolist() == [50.0]


def test_collateral_floor_and_cap_bind_exactly() -> None:
    policy = CollateralPolicy(floor=50, cap=1_000)
    assert policy.required(1, 0.0, 0.0) == 50  # 0.1 unit -> the floor
    assert policy.required(10**6, 1.0, 0.0) == 1_000  # 310,000 units -> the cap
    assert policy.required(5_000, 0.0, 0.0) == 500  # inside the bounds: 10 % of 5,000


@given(st.integers(0, 10**21), st.lists(risks, min_size=1, max_size=20), durations)
def test_vector_collateral_agrees_with_exact_within_float_precision(
        value: int, p_fail: list[float], duration: float) -> None:
    approx = POLICY.required_many(value, np.array(p_fail), duration)
    exact = [POLICY.required(value, p, duration) for p in p_fail]
    assert approx == pytest.approx(exact, rel=1e-12, abs=1.0)


@pytest.mark.parametrize("args", [(-1, 0.5, 60.0), (10, 1.5, 60.0), (10, 0.5, -1.0)])
def test_bad_collateral_inputs_are_refused(args: tuple[int, float, float]) -> None:
    with pytest.raises(ValueError):
        POLICY.required(*args)


def test_floor_above_cap_is_refused() -> None:
    with pytest.raises(ValueError):
        CollateralPolicy(floor=10, cap=5)
