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
