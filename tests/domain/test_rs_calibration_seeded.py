"""Seeded end-to-end calibration: sessions drawn from the published availability models,
prior fitted, P(survive T | uptime u) predicted for many (node, u, T), outcomes sampled
from the true model; the predictions must be calibrated (ECE <= 0.05)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from orchestrator.domain.calibration import brier_score, expected_calibration_error
from orchestrator.domain.reliability import ReliabilityBook, fit_population_prior

HOUR = 3600.0
# /work/shared/churn/availability-models.json: SETI@home clusters (gamma) and ComBoS (Weibull)
PUBLISHED_AVAILABILITY = {
    "seti-cluster-2": stats.gamma(0.340, scale=152.216),
    "seti-cluster-6": stats.gamma(0.357, scale=43.652),
    "combos-default": stats.weibull_min(0.393, scale=2.964),
}


@pytest.mark.parametrize("model", sorted(PUBLISHED_AVAILABILITY))
def test_rs_survival_is_calibrated_on_published_churn(model: str) -> None:
    hours = PUBLISHED_AVAILABILITY[model]
    rng = np.random.default_rng(2026)
    nodes = 3000
    node_speed = rng.lognormal(0.0, 0.7, nodes)  # hosts differ: per-node scale multiplier
    histories = []
    for i in range(nodes):
        count = int(rng.integers(0, 9))
        lengths = hours.rvs(size=count, random_state=rng) * node_speed[i] * HOUR
        histories.append((lengths.tolist(), (rng.random(count) < 0.8).tolist()))
    book = ReliabilityBook(fit_population_prior(histories))
    now = 1e9
    durations = rng.exponential(2 * HOUR, nodes)
    outcomes = np.empty(nodes)
    for i, (lengths, abrupt) in enumerate(histories):
        node = f"n{i}"
        t = 0.0
        for length, ended_abruptly in zip(lengths, abrupt, strict=True):
            book.session_started(node, t)
            t += length
            book.session_ended(node, t, ended_abruptly)
        uptime = rng.exponential(5 * HOUR)
        book.session_started(node, now - uptime)
        # The true current session, conditioned on having lasted `uptime` already.
        alive_share = hours.sf(uptime / HOUR / node_speed[i])
        session = hours.isf(rng.random() * alive_share) * node_speed[i] * HOUR
        outcomes[i] = float(session > uptime + durations[i])
    predicted = np.array([book.score(f"n{i}", now, durations[i]) for i in range(nodes)])
    assert expected_calibration_error(predicted, outcomes) <= 0.05
    assert brier_score(predicted, outcomes) < np.var(outcomes)  # better than the base rate
