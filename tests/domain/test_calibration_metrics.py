"""Brier, ECE, reliability diagrams and the recalibration hooks."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.domain.calibration import (
    IsotonicCalibrator,
    OnlineRecalibrator,
    PlattCalibrator,
    brier_score,
    expected_calibration_error,
    reliability_diagram,
)


def test_brier_score_of_known_cases() -> None:
    assert brier_score([1.0, 0.0], [1, 0]) == 0.0
    assert brier_score([0.5, 0.5], [1, 0]) == 0.25
    assert brier_score([0.0], [1]) == 1.0


def test_ece_is_zero_when_each_bin_matches_its_frequency() -> None:
    predicted = np.array([0.25] * 4 + [0.75] * 4)
    observed = np.array([1, 0, 0, 0, 1, 1, 1, 0])
    assert expected_calibration_error(predicted, observed) == pytest.approx(0.0)


def test_ece_measures_overconfidence() -> None:
    assert expected_calibration_error([0.9] * 10, [1] * 5 + [0] * 5) == pytest.approx(0.4)


def test_reliability_diagram_bins_counts_and_empty_bins() -> None:
    diagram = reliability_diagram([0.05, 0.15, 0.15, 1.0], [0, 1, 0, 1], bins=10)
    assert diagram.count.tolist() == [1, 2, 0, 0, 0, 0, 0, 0, 0, 1]
    assert diagram.observed_rate[1] == 0.5
    assert np.isnan(diagram.mean_predicted[2])


@pytest.mark.parametrize(("predicted", "observed"), [
    ([0.5], [2]), ([1.5], [1]), ([0.5, 0.5], [1]), ([], []),
])
def test_bad_inputs_are_refused(predicted: list[float], observed: list[int]) -> None:
    with pytest.raises(ValueError):
        brier_score(predicted, observed)


def miscalibrated_sample(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = rng.random(20_000)
    outcomes = (rng.random(truth.size) < truth).astype(float)
    return truth**0.3, outcomes  # raw scores far too optimistic


@pytest.mark.parametrize("calibrator", [IsotonicCalibrator, PlattCalibrator])
def test_recalibration_repairs_a_distorted_score(calibrator: type) -> None:
    raw, outcomes = miscalibrated_sample(1)
    assert expected_calibration_error(raw, outcomes) > 0.1
    fitted = calibrator.fit(raw, outcomes)
    fresh_raw, fresh_outcomes = miscalibrated_sample(2)
    assert expected_calibration_error(fitted(fresh_raw), fresh_outcomes) < 0.03


def test_isotonic_map_is_monotone() -> None:
    raw, outcomes = miscalibrated_sample(3)
    fitted = IsotonicCalibrator.fit(raw, outcomes)
    mapped = fitted(np.linspace(0, 1, 101))
    assert np.all(np.diff(mapped) >= 0)
    assert np.all((mapped >= 0) & (mapped <= 1))


def test_online_recalibrator_is_identity_until_enough_outcomes() -> None:
    online = OnlineRecalibrator(min_outcomes=100, refit_every=50, window=1000)
    raw = np.array([0.2, 0.5, 0.9])
    for i in range(99):
        online.observe(0.5, i % 2 == 0)
    assert online.fitted is None
    assert np.array_equal(online(raw), raw)


def test_online_recalibrator_learns_an_underconfident_score() -> None:
    rng = np.random.default_rng(4)
    online = OnlineRecalibrator(min_outcomes=500, refit_every=500, window=5000)
    for _ in range(5000):
        truth = rng.uniform(0.5, 1.0)
        online.observe(truth - 0.2, bool(rng.random() < truth))  # raw says 0.2 too little
    fresh_truth = rng.uniform(0.5, 1.0, 20_000)
    fresh_outcomes = (rng.random(fresh_truth.size) < fresh_truth).astype(float)
    raw = fresh_truth - 0.2
    assert expected_calibration_error(raw, fresh_outcomes) > 0.15
    assert expected_calibration_error(online(raw), fresh_outcomes) < 0.03


def test_online_recalibrator_refuses_bad_input() -> None:
    with pytest.raises(ValueError):
        OnlineRecalibrator(min_outcomes=10, window=5)
    with pytest.raises(ValueError):
        OnlineRecalibrator().observe(1.2, True)


def fits_after_each(online: OnlineRecalibrator, outcomes: list[tuple[float, bool]]
                    ) -> list[bool]:
    """For each outcome observed in turn: whether a (re)fit happened on it."""
    refits = []
    for raw, finished in outcomes:
        before = online.fitted
        online.observe(raw, finished)
        refits.append(online.fitted is not before)
    return refits


def test_online_recalibrator_fits_at_min_outcomes_then_every_refit_every() -> None:
    online = OnlineRecalibrator(min_outcomes=4, refit_every=3, window=6)
    outcomes = [(0.9, True), (0.2, False), (0.8, True), (0.3, False)] * 3
    # First fit on the 4th outcome; then on the 7th and the 10th.
    assert fits_after_each(online, outcomes) == [
        False, False, False, True, False, False, True, False, False, True, False, False]


def test_online_recalibrator_fits_only_while_the_window_holds_both_outcomes() -> None:
    online = OnlineRecalibrator(min_outcomes=2, refit_every=1, window=3)
    # The 4th outcome pushes the only success out of the window: nothing to fit on.
    assert fits_after_each(online, [(0.9, True), (0.2, False), (0.3, False), (0.1, False)]
                           ) == [False, True, True, False]
    assert fits_after_each(OnlineRecalibrator(min_outcomes=2, refit_every=1, window=3),
                           [(0.9, True)] * 4) == [False] * 4


def test_online_recalibrator_defaults_wait_for_500_outcomes() -> None:
    online = OnlineRecalibrator()
    assert fits_after_each(online, [(0.8, i % 2 == 0) for i in range(500)])[-2:] == [
        False, True]


def test_online_recalibrator_bounds() -> None:
    OnlineRecalibrator(min_outcomes=5, refit_every=1, window=5)  # the edges are allowed
    OnlineRecalibrator(min_outcomes=1, refit_every=1, window=1)
    for bad in ({"min_outcomes": 0}, {"min_outcomes": 6, "window": 5}, {"refit_every": 0}):
        with pytest.raises(ValueError, match="need 0 < min_outcomes <= window and refit_every"):
            OnlineRecalibrator(**bad)
    with pytest.raises(ValueError, match=r"raw score 1.2 outside \[0, 1\]"):
        OnlineRecalibrator().observe(1.2, True)


def test_platt_handles_scores_of_exactly_zero_and_one() -> None:
    raw = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    observed = np.array([0, 1, 1, 1, 1, 0, 0, 1])
    platt = PlattCalibrator.fit(raw, observed)
    mapped = platt(np.array([0.0, 1.0]))
    assert np.all(np.isfinite(mapped)) and 0.0 < mapped[0] < mapped[1] < 1.0


def test_brier_score_averages_the_squared_gaps() -> None:
    assert brier_score([0.8, 0.3], [1, 0]) == pytest.approx((0.2**2 + 0.3**2) / 2)
    assert brier_score(np.array([0.0, 1.0, 0.6]), np.array([0.0, 1.0, 1.0])) == pytest.approx(
        0.16 / 3)


@pytest.mark.parametrize(("predicted", "observed", "message"), [
    ([0.5, 0.5], [1], r"predicted \(2,\) and observed \(1,\) must be equal 1-d shapes"),
    ([[0.5], [0.5]], [[1], [0]],
     r"predicted \(2, 1\) and observed \(2, 1\) must be equal 1-d shapes"),
    ([], [], "calibration needs at least one outcome"),
    ([-0.01], [1], r"predicted probabilities must lie in \[0, 1\]"),
    ([1.01], [1], r"predicted probabilities must lie in \[0, 1\]"),
    ([float("nan")], [1], r"predicted probabilities must lie in \[0, 1\]"),
    ([0.5], [0.5], "observed outcomes must be 0 or 1"),
    ([0.5, 0.5], [1, -1], "observed outcomes must be 0 or 1"),
])
def test_bad_inputs_are_refused_with_what_is_wrong(predicted: list[float], observed: list[int],
                                                   message: str) -> None:
    for measure in (brier_score, expected_calibration_error, reliability_diagram):
        with pytest.raises(ValueError, match=f"^{message}$"):
            measure(predicted, observed)


def test_probabilities_of_exactly_zero_and_one_are_accepted() -> None:
    assert brier_score([0.0, 1.0], [0, 1]) == 0.0


def test_ece_weights_each_bin_by_its_count() -> None:
    predicted = [0.1, 0.1, 0.9, 0.9, 0.9, 0.9]
    observed = [0, 1, 1, 1, 1, 0]
    # Bin of 0.1: rate 1/2, gap 0.4, two outcomes; bin of 0.9: rate 3/4, gap 0.15, four.
    assert expected_calibration_error(predicted, observed) == pytest.approx(
        (2 * 0.4 + 4 * 0.15) / 6)
    assert expected_calibration_error(predicted, observed, bins=2) == pytest.approx(
        (2 * 0.4 + 4 * 0.15) / 6)
    # One bin: mean prediction 3.8 / 6 against a rate of 4 / 6.
    assert expected_calibration_error(predicted, observed, bins=1) == pytest.approx(0.2 / 6)


def test_reliability_diagram_edges_and_means() -> None:
    diagram = reliability_diagram([0.0, 0.2, 0.5, 0.7, 1.0], [0, 0, 1, 1, 1], bins=2)
    assert diagram.lower.tolist() == [0.0, 0.5] and diagram.upper.tolist() == [0.5, 1.0]
    # 0.5 sits on an edge and belongs to the upper bin; 1.0 to the last one.
    assert diagram.count.tolist() == [2, 3]
    assert diagram.mean_predicted.tolist() == pytest.approx([0.1, (0.5 + 0.7 + 1.0) / 3])
    assert diagram.observed_rate.tolist() == pytest.approx([0.0, 1.0])
    assert diagram.count.dtype == np.int64
    single = reliability_diagram([0.3, 0.9], [1, 0], bins=1)
    assert single.count.tolist() == [2] and single.mean_predicted.tolist() == pytest.approx(
        [0.6])
    with pytest.raises(ValueError, match=r"^bins must be >= 1$"):
        reliability_diagram([0.5], [1], bins=0)


def test_online_recalibrator_is_the_identity_until_its_first_fit() -> None:
    online = OnlineRecalibrator(min_outcomes=2, refit_every=5, window=10)
    raw = np.array([0.1, 0.6, 0.95])
    online.observe(0.9, True)
    assert online(raw) is raw and online.fitted is None
    online.observe(0.1, False)
    assert online.fitted is not None
    mapped = online(raw)
    assert mapped.tolist() == pytest.approx(online.fitted(raw).tolist())
    assert mapped[0] < 0.5 < mapped[2]  # failed at 0.1, finished at 0.9


def test_online_recalibrator_fits_on_the_latest_window_only() -> None:
    """A window of 4 after 4 finished-at-low, failed-at-high outcomes and then 4 of the
    opposite: the fit sees only the last four, so the map rises."""
    online = OnlineRecalibrator(min_outcomes=4, refit_every=4, window=4)
    for raw, finished in [(0.2, True), (0.8, False)] * 2 + [(0.2, False), (0.8, True)] * 2:
        online.observe(raw, finished)
    low, high = online(np.array([0.2, 0.8]))
    assert low < 0.5 < high


def test_ece_uses_ten_bins_by_default() -> None:
    # 0.095 and 0.105 fall into two of ten bins (gaps 0.095 and 0.895), into one of eleven.
    predicted, observed = [0.095, 0.105], [0, 1]
    assert expected_calibration_error(predicted, observed) == pytest.approx(0.495)
    assert expected_calibration_error(predicted, observed, bins=11) == pytest.approx(0.4)


def test_online_recalibrator_defaults_refit_every_thousand_outcomes() -> None:
    online = OnlineRecalibrator()
    refits = fits_after_each(online, [(0.8 if i % 2 else 0.3, i % 2 == 1)
                                      for i in range(1500)])
    assert [i + 1 for i, refit in enumerate(refits) if refit] == [500, 1500]


def test_online_recalibrator_defaults_to_a_window_of_twenty_thousand() -> None:
    online = OnlineRecalibrator(min_outcomes=2, refit_every=19_999)
    outcomes = [(0.9, True)] + [(0.2, False)] * 20_000
    refits = fits_after_each(online, outcomes)
    # Fitted on the 2nd; due again on the 20,001st, when the one success has just left the
    # window of 20,000: nothing to fit on.
    assert [i + 1 for i, refit in enumerate(refits) if refit] == [2]


def test_online_recalibrator_takes_raw_scores_of_exactly_zero_and_one() -> None:
    online = OnlineRecalibrator(min_outcomes=2, refit_every=1, window=10)
    online.observe(0.0, False)
    online.observe(1.0, True)
    assert online.fitted is not None


def test_online_recalibrator_bounds_message_is_whole() -> None:
    with pytest.raises(ValueError,
                       match=r"^need 0 < min_outcomes <= window and refit_every >= 1$"):
        OnlineRecalibrator(min_outcomes=0)


def test_a_bin_holding_one_outcome_counts_with_its_own_numbers() -> None:
    predicted, observed = [0.05, 0.95, 0.95], [0, 1, 1]
    diagram = reliability_diagram(predicted, observed)
    assert diagram.count[0] == 1
    assert diagram.mean_predicted[0] == pytest.approx(0.05)
    assert diagram.observed_rate[0] == 0.0 and diagram.observed_rate[9] == 1.0
    assert np.isnan(diagram.observed_rate[1]) and np.isnan(diagram.mean_predicted[1])
    # Both bins are 0.05 off: one outcome in the first, two in the last.
    assert expected_calibration_error(predicted, observed) == pytest.approx(0.05)
