"""`domain.quotes.forecast`: tasks dealt to the best-ranked free slot as the placement pass
deals them, each slot held for the expected time with a re-run, and the chance of the deadline
from the number of attempts that fit."""

from __future__ import annotations

import pytest

from orchestrator.domain.quotes import Offer, forecast

STEADY = Offer("steady", slots=1, rs=0.9, wall_s=100.0, price=5.0, collateral=10)
FLAKY = Offer("flaky", slots=2, rs=0.5, wall_s=50.0, price=2.0, collateral=30)


def test_tasks_fill_the_best_ranked_slots_first_then_wait_for_the_first_freed() -> None:
    one = forecast([STEADY, FLAKY], tasks=1, horizon_s=1_000.0)
    assert one is not None and one.nodes == 1 and one.price_expected == 5
    assert one.completion_s == pytest.approx(110.0)  # 100 s, and again with p 0.1
    three = forecast([STEADY, FLAKY], tasks=3, horizon_s=1_000.0)
    assert three is not None and three.nodes == 2
    assert (three.price_min, three.price_expected, three.price_max) == (6, 9, 15)
    assert (three.collateral_min, three.collateral_max, three.collateral_total) == (10, 30, 70)
    # the fourth task takes the first slot freed: a flaky one at 75 s, done at 150 s
    four = forecast([STEADY, FLAKY], tasks=4, horizon_s=1_000.0)
    assert four is not None and four.completion_s == pytest.approx(150.0)


def test_the_chance_of_the_deadline_counts_the_attempts_that_fit() -> None:
    def p(horizon_s: float) -> float:
        found = forecast([STEADY], tasks=1, horizon_s=horizon_s)
        assert found is not None
        return found.p_deadline

    assert p(99.0) == 0.0  # not even one attempt
    assert p(150.0) == pytest.approx(0.9)
    assert p(250.0) == pytest.approx(1 - 0.1 ** 2)
    two = forecast([STEADY], tasks=2, horizon_s=150.0)  # the second waits for the first
    assert two is not None and two.p_deadline == 0.0


def test_no_offer_no_forecast() -> None:
    assert forecast([], tasks=3, horizon_s=1_000.0) is None
    with pytest.raises(ValueError, match="at least one task"):
        forecast([STEADY], tasks=0, horizon_s=1.0)


def test_a_deadline_already_past_has_no_chance() -> None:
    for horizon_s in (0.0, -60.0):
        late = forecast([STEADY], tasks=1, horizon_s=horizon_s)
        assert late is not None and late.p_deadline == 0.0
