"""Reliability Score, edges and bookkeeping: the prior fit's maximum, the pooled factor and
MTBF by hand, censoring a departure, rows past the first 1,024, empty row sets, refusals and
the window summary of sparse telemetry. Every expectation is worked out from the documented
formulas (module docstring of `orchestrator.domain.reliability`), not read off the code."""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy.optimize import minimize
from scipy.special import gammaln

from orchestrator.domain.reliability import (
    GpuSample,
    PopulationPrior,
    ProbeSample,
    ReliabilityBook,
    RsConfig,
    TaskOutcome,
    UploadSample,
    fit_population_prior,
    link_jitter_ms,
)
from orchestrator.domain.score_commitment import WindowSummary
from tests.domain.test_reliability_score import HOUR, PRIOR

DAY = 86_400.0
K, A, B = PRIOR.shape, PRIOR.rate_a, PRIOR.rate_b

History = tuple[list[float], list[bool]]


def gpu(at: float, temperature_c: float = 60.0, throttle: int = 0, clock: float = 1800.0,
        max_clock: float = 1900.0) -> GpuSample:
    return GpuSample(at, temperature_c, clock, max_clock, throttle, 90.0, 8000.0, 24000.0,
                     300.0, 350.0)


def session_survival(a: float, b: float, uptime: float, duration: float) -> float:
    """S(u + T | u) = ((b + u**k) / (b + (u + T)**k)) ** a under PRIOR's shape."""
    return ((b + uptime**K) / (b + (uptime + duration) ** K)) ** a


# ----- the population prior fit ---------------------------------------------------------
def log_marginal(prior: PopulationPrior, histories: list[History]) -> float:
    """Marginal log-likelihood of every node's sessions, theta ~ Gamma(a, b) integrated out,
    written out per node: d log k + (k-1) sum log t_event + a log b - lgamma(a)
    + lgamma(a + d) - (a + d) log(b + sum t**k)."""
    k, a, b = prior.shape, prior.rate_a, prior.rate_b
    total = 0.0
    for lengths, abrupt in histories:
        t = np.array(lengths)
        events = np.array(abrupt, dtype=bool)
        d = int(events.sum())
        total += (d * math.log(k) + (k - 1) * float(np.log(t[events]).sum())
                  + a * math.log(b) - float(gammaln(a)) + float(gammaln(a + d))
                  - (a + d) * math.log(b + float((t**k).sum())))
    return total


def heterogeneous_population() -> list[History]:
    """300 nodes, Weibull shape 0.5 sessions whose rates theta vary from node to node as
    Gamma(0.6, 36): a population prior worth well under one departure."""
    rng = np.random.default_rng(5)
    histories: list[History] = []
    for _ in range(300):
        theta = rng.gamma(0.6, 1.0 / 36.0)
        lengths = (rng.exponential(size=6) / theta) ** 2.0  # t**0.5 ~ Exp(theta)
        histories.append((lengths.tolist(), (rng.random(6) < 0.8).tolist()))
    return histories


def test_the_prior_fit_reaches_the_maximum_of_the_marginal_likelihood() -> None:
    histories = heterogeneous_population()
    fitted = fit_population_prior(histories)

    def negative(params: NDArray[np.float64]) -> float:
        k, a, b = np.exp(params)
        return -log_marginal(PopulationPrior(float(k), float(a), float(b)), histories)

    reference = minimize(negative, np.log([0.5, 0.6, 36.0]), method="Nelder-Mead",
                         options={"xatol": 1e-9, "fatol": 1e-9, "maxiter": 20_000})
    assert log_marginal(fitted, histories) >= -reference.fun - 1e-3
    assert fitted.rate_a < 1.0  # the rates really are spread: a weak prior, as simulated
    assert fitted.shape == pytest.approx(0.5, abs=0.05)


def test_clockwork_sessions_are_fitted_at_the_top_of_the_shape_range() -> None:
    """Sessions of almost exactly one hour want a shape far above any volunteer grid's; the
    search keeps it within its range, whose top is 5. With the shape there, the likelihood
    is a long flat ridge in (a, b) (every node has the same rate); the fit still climbs it
    to within 0.05 nats of its top, found here by a separate search over (a, b)."""
    histories: list[History] = [([HOUR * (1 + 0.01 * i) for i in range(20)], [True] * 20)
                                for _ in range(5)]
    fitted = fit_population_prior(histories)
    assert fitted.shape == pytest.approx(5.0)

    def negative(params: NDArray[np.float64]) -> float:
        a, b = np.exp(params)
        return -log_marginal(PopulationPrior(5.0, float(a), float(b)), histories)

    reference = minimize(negative, [0.0, 5 * math.log(HOUR)], method="Nelder-Mead",
                         options={"xatol": 1e-10, "fatol": 1e-10, "maxiter": 40_000})
    assert log_marginal(fitted, histories) >= -reference.fun - 0.05


# ----- the pooled factor and the checkpoint MTBF ------------------------------------------
def test_pooled_factor_and_mtbf_are_the_weighted_geometric_mean_by_hand() -> None:
    """One abrupt 5 h session, back at 6 h, scored at 8 h for 1 h with departure_weight 0.5:
    S from the posterior (a+1, b+(5h)**k), R from the window-weighted departure and online
    time, w' = 0.5 x finished / (beta0 + finished), pooled = S**(1-w') * R**w'."""
    config = RsConfig(departure_weight=0.5)
    book = ReliabilityBook(PRIOR, config)
    book.session_started("n", 0.0)
    book.session_ended("n", 5 * HOUR, abrupt=True)
    book.session_started("n", 6 * HOUR)
    now = 8 * HOUR

    tau, beta0 = config.departure_window_s, config.departure_prior_exposure_s
    survival = session_survival(A + 1, B + (5 * HOUR) ** K, 2 * HOUR, HOUR)
    aged = math.exp(-3 * HOUR / tau)  # from the departure at 5 h to now
    finished = tau * (1 - math.exp(-5 * HOUR / tau)) * aged
    running = tau * (1 - math.exp(-2 * HOUR / tau))
    alpha = config.departure_prior_rate_per_day / DAY * beta0 + aged
    beta = beta0 + finished + running
    departures = (beta / (beta + HOUR)) ** alpha
    weight = 0.5 * finished / (beta0 + finished)
    pooled = survival ** (1 - weight) * departures**weight

    parts = book.components("n", now, HOUR)
    assert parts.survival == pytest.approx(survival, rel=1e-12)
    assert parts.departures == pytest.approx(departures, rel=1e-12)
    assert parts.pooled == pytest.approx(pooled, rel=1e-12)
    assert book.predicted_mtbf_s("n", now, HOUR) == pytest.approx(HOUR / -math.log(pooled),
                                                                  rel=1e-9)


def test_an_offline_node_has_no_time_between_failures() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    book.session_ended("n", HOUR, abrupt=False)
    assert book.predicted_mtbf_s("n", 2 * HOUR, HOUR) == 0.0


def test_a_node_whose_survival_no_horizon_dents_has_an_infinite_mtbf() -> None:
    """Up for 1e20 s, one more second changes (u + T)**k not at all: S is exactly 1."""
    book = ReliabilityBook(PRIOR)
    book.session_started("n", -1e20)
    assert book.predicted_mtbf_s("n", 0.0, 1.0) == math.inf


def test_raw_is_the_product_of_all_four_factors_when_each_costs_something() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    for second in range(100):  # a third of the probes lost: stability below 1
        book.record_probe("n", ProbeSample(float(second), None if second % 3 == 0 else 20.0))
    book.record_gpu("n", gpu(99.0, temperature_c=88.0))  # thermal below 1
    book.record_task_outcome("n", TaskOutcome.FAILED_VERIFICATION)  # pass rate below 1
    parts = book.components("n", 100.0, HOUR)
    assert max(parts.pooled, parts.pass_rate, parts.stability, parts.thermal) < 1.0
    product = parts.pooled * parts.pass_rate * parts.stability * parts.thermal
    assert parts.raw == pytest.approx(product, rel=1e-12)
    assert book.raw_score_many(None, 100.0, HOUR)[0] == pytest.approx(product, rel=1e-12)


@pytest.mark.parametrize(("pass_prior_mean", "clipped"), [(1.5, 1.0), (-0.5, 0.0)])
def test_the_raw_score_stays_in_the_unit_interval_under_a_prior_outside_it(
        pass_prior_mean: float, clipped: float) -> None:
    """A pass-rate prior outside [0, 1] (a misconfiguration) pushes the product past an end
    of the interval; RS is a probability and is clipped there."""
    book = ReliabilityBook(PRIOR, RsConfig(pass_prior_mean=pass_prior_mean))
    book.session_started("n", -1e9)  # long up: the session factor is within 1e-3 of 1
    assert book.raw_score_many(None, 0.0, 1.0)[0] == clipped
    assert book.components("n", 0.0, 1.0).raw == clipped


@pytest.mark.parametrize(("shift", "clipped"), [(5.0, 1.0), (-5.0, 0.0)])
def test_a_recalibrators_output_outside_the_unit_interval_is_clipped(shift: float,
                                                                     clipped: float) -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    book.set_recalibrator(lambda raw: raw + shift)
    assert book.score("n", HOUR, HOUR) == clipped


# ----- one row among several, no rows at all ---------------------------------------------
def test_one_nodes_figures_are_its_own_among_several() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("a", 0.0)  # row 0: no history, up 3 h
    book.session_started("b", 0.0)  # row 1: one abrupt hour, up 1 h
    book.session_ended("b", HOUR, abrupt=True)
    book.session_started("b", 2 * HOUR)
    now = 3 * HOUR
    assert book.components("b", now, HOUR).survival == pytest.approx(
        session_survival(A + 1, B + HOUR**K, HOUR, HOUR), rel=1e-12)
    every = book.departure_survival_many(None, now, HOUR)
    assert every[1] < every[0]  # b's departure counts against b only
    assert book.departure_survival_many(np.array([1]), now, HOUR).tolist() == [every[1]]


def test_no_rows_give_no_figures() -> None:
    """An empty candidate list, as numpy builds it from `[]` (float64), scores nothing."""
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    none = np.array([])
    assert book.score_many(none, HOUR, HOUR).shape == (0,)
    assert book.departure_survival_many(none, HOUR, HOUR).shape == (0,)
    assert book.record_survival_many(none, HOUR, HOUR).shape == (0,)
    passes, fails = book.verified_many(none)
    assert passes.shape == fails.shape == (0,)
    counts = book.sessions_observed_many(none)
    assert counts.shape == (0,) and counts.dtype == np.int64


def test_a_node_past_the_first_1024_rows_scores_as_if_it_were_alone() -> None:
    """The arrays grow past their first 1,024 rows; a node in the grown part starts from the
    same blank record (no passes, no exposure, no jitter, no recent departures) as any."""
    config = RsConfig(jitter_ok_ms=0.0)  # any phantom jitter at all would cost stability

    def history(book: ReliabilityBook) -> None:
        book.session_started("late", 0.0)
        book.session_ended("late", HOUR, abrupt=True)
        book.session_started("late", 2 * HOUR)

    crowded = ReliabilityBook(PRIOR, config)
    for i in range(1500):
        crowded.add_node(f"n{i}")
    history(crowded)
    alone = ReliabilityBook(PRIOR, config)
    history(alone)
    assert crowded.index_of("late") == 1500
    row = np.array([1500])
    assert dataclasses.astuple(crowded.components("late", 3 * HOUR, HOUR)) == pytest.approx(
        dataclasses.astuple(alone.components("late", 3 * HOUR, HOUR)), rel=1e-12)
    assert crowded.recent_departure_rate_many(row, 3 * HOUR)[0] == pytest.approx(
        alone.recent_departure_rate_many(None, 3 * HOUR)[0], rel=1e-12)


# ----- sessions --------------------------------------------------------------------------
def test_a_zero_length_session_counts_a_millisecond_of_exposure() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 10.0)
    book.session_ended("n", 10.0, abrupt=True)  # ends the instant it started: allowed
    book.session_started("n", 10.0)
    assert book.histories() == [([1e-3], [True])]
    assert book.components("n", 10.0 + HOUR, HOUR).survival == pytest.approx(
        session_survival(A + 1, B + 1e-3**K, HOUR, HOUR), rel=1e-12)


def test_histories_list_every_nodes_sessions_and_how_they_ended() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("a", 0.0)
    book.session_ended("a", 100.0, abrupt=True)
    book.session_started("a", 200.0)
    book.session_ended("a", 500.0, abrupt=False)
    book.session_started("b", 0.0)  # running: not a finished session
    assert book.histories() == [([100.0, 300.0], [True, False]), ([], [])]


def test_recent_online_time_adds_up_over_sessions() -> None:
    """No decay (a window of 1e12 s): lambda_hat = (alpha0 + departures) / (beta0 + online s)
    over two finished sessions of 2 h and 3 h, one of them cut."""
    config = RsConfig(departure_window_s=1e12)
    book = ReliabilityBook(PRIOR, config)
    book.session_started("n", 0.0)
    book.session_ended("n", 2 * HOUR, abrupt=True)
    book.session_started("n", 3 * HOUR)
    book.session_ended("n", 6 * HOUR, abrupt=False)
    beta0 = config.departure_prior_exposure_s
    alpha0 = config.departure_prior_rate_per_day / DAY * beta0
    assert book.recent_departure_rate_many(None, 6 * HOUR)[0] == pytest.approx(
        (alpha0 + 1) / (beta0 + 5 * HOUR), rel=1e-9)


def test_a_departure_counts_in_full_the_instant_it_happens() -> None:
    """Within a 1 s window, a departure half a second after the session began: at that
    instant it weighs 1 and the half second weighs tau (1 - exp(-0.5 / tau))."""
    config = RsConfig(departure_window_s=1.0)
    book = ReliabilityBook(PRIOR, config)
    book.session_started("n", 0.0)
    book.session_ended("n", 0.5, abrupt=True)
    beta0 = config.departure_prior_exposure_s
    alpha0 = config.departure_prior_rate_per_day / DAY * beta0
    assert book.recent_departure_rate_many(None, 0.5)[0] == pytest.approx(
        (alpha0 + 1) / (beta0 + 1 - math.exp(-0.5)), rel=1e-12)


def test_an_offline_nodes_track_record_counts_only_its_finished_sessions() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    book.session_ended("n", HOUR, abrupt=True)
    b = B + HOUR**K
    assert book.record_survival_many(np.array([0]), 2 * HOUR, HOUR)[0] == pytest.approx(
        (b / (b + HOUR**K)) ** (A + 1), rel=1e-12)


def test_uptime_is_zero_at_the_instant_a_session_starts() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 5.0)
    assert book.uptime("n", 5.0) == 0.0
    assert book.summary("n", 5.0).uptime_s == 0


def test_failures_accumulate_in_the_pass_rate_and_the_record() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    book.record_task_outcome("n", TaskOutcome.ABANDONED)
    book.record_task_outcome("n", TaskOutcome.FAILED_VERIFICATION)
    assert book.summary("n", 1.0).tasks_failed == 2
    assert book.components("n", 1.0, HOUR).pass_rate == pytest.approx((0.99 * 20) / (20 + 2),
                                                                      rel=1e-12)


# ----- a departure censored after the fact -------------------------------------------------
CENSOR = RsConfig(departure_window_s=DAY, departure_weight=1.0)


def book_of(sessions: list[tuple[float, float, bool]]) -> ReliabilityBook:
    book = ReliabilityBook(PRIOR, CENSOR)
    for start, end, abrupt in sessions:
        book.session_started("n", start)
        book.session_ended("n", end, abrupt)
    return book


def same_record(one: ReliabilityBook, other: ReliabilityBook, now: float) -> None:
    assert one.histories() == other.histories()
    assert one.recent_departure_rate_many(None, now)[0] == pytest.approx(
        other.recent_departure_rate_many(None, now)[0], rel=1e-12)
    assert one.departure_survival_many(None, now, HOUR)[0] == pytest.approx(
        other.departure_survival_many(None, now, HOUR)[0], rel=1e-12)


def test_a_departure_censored_after_a_restart_leaves_the_record_a_drain_would() -> None:
    """Cut at 2 h and at 5 h, drained at 8 h, back at 9 h; then the 5 h cut is found to
    have been rendered through: the record is the one a drain at 5 h leaves, the weight
    of that departure decayed over the 4 h since it."""
    cut = book_of([(0.0, 2 * HOUR, True), (3 * HOUR, 5 * HOUR, True),
                   (6 * HOUR, 8 * HOUR, False)])
    drained = book_of([(0.0, 2 * HOUR, True), (3 * HOUR, 5 * HOUR, False),
                       (6 * HOUR, 8 * HOUR, False)])
    for book in (cut, drained):
        book.session_started("n", 9 * HOUR)
    assert cut.departure_censored("n", 5 * HOUR)
    same_record(cut, drained, 10 * HOUR)


def test_a_departure_censored_the_instant_it_ends_weighs_in_full() -> None:
    cut = book_of([(0.0, 2 * HOUR, True), (3 * HOUR, 5 * HOUR, True)])
    drained = book_of([(0.0, 2 * HOUR, True), (3 * HOUR, 5 * HOUR, False)])
    assert cut.departure_censored("n", 5 * HOUR)
    same_record(cut, drained, 5 * HOUR)


def test_a_node_without_sessions_has_no_departure_to_censor() -> None:
    book = ReliabilityBook(PRIOR)
    book.add_node("n")
    assert not book.departure_censored("n", 0.0)


# ----- refits ----------------------------------------------------------------------------
def test_refit_pools_even_a_fraction_of_a_second_of_online_time() -> None:
    book = ReliabilityBook(PRIOR, RsConfig(departure_window_s=1e12))  # no decay
    book.session_started("n", 0.0)
    book.session_ended("n", 0.5, abrupt=True)  # one DEAD verdict in half a second online
    assert book.refit_departure_rate(0.5) == pytest.approx(2.0, rel=1e-9)


def test_refit_at_the_instant_a_session_starts_leaves_that_session_out() -> None:
    lengths, abrupt = [HOUR, 3 * HOUR, 1800.0, 10 * HOUR], [True, True, False, True]
    book = ReliabilityBook(PRIOR)
    t = 0.0
    for length, cut in zip(lengths, abrupt, strict=True):
        book.session_started("old", t)
        t += length
        book.session_ended("old", t, cut)
    book.session_started("new", t)  # zero seconds old when the refit runs
    assert book.refit_prior(now=t) == fit_population_prior([(lengths, abrupt)])


def refitted_book() -> tuple[ReliabilityBook, float]:
    """"old": two abrupt sessions (1 h, 2 h) from t = 1,000 s; "up": online since 1.5 h
    later, so 1.5 h old at the refit, when "old" has just left."""
    book = ReliabilityBook(PRIOR)
    book.session_started("old", 1000.0)
    book.session_ended("old", 1000.0 + HOUR, abrupt=True)
    book.session_started("old", 1000.0 + HOUR)
    book.session_started("up", 1000.0 + 1.5 * HOUR)
    book.session_ended("old", 1000.0 + 3 * HOUR, abrupt=True)
    return book, 1000.0 + 3 * HOUR


def test_refit_censors_a_running_session_at_its_age() -> None:
    book, now = refitted_book()
    assert book.refit_prior(now=now) == fit_population_prior(
        [([HOUR, 2 * HOUR], [True, True]), ([1.5 * HOUR], [False])])


def test_after_a_refit_a_nodes_finished_sessions_count_under_the_new_shape() -> None:
    """S(u + T | u) = ((b' + u**k) / (b' + (u + T)**k)) ** a' with the refitted k, a' = a +
    departures and b' = b + the sum of t**k over the node's finished sessions."""
    book, now = refitted_book()
    prior = book.refit_prior(now=now)
    book.session_started("old", now)
    k, a, b = prior.shape, prior.rate_a + 2, prior.rate_b + HOUR**prior.shape + (
        2 * HOUR) ** prior.shape
    expected = ((b + HOUR**k) / (b + (2 * HOUR) ** k)) ** a
    assert book.components("old", now + HOUR, HOUR).survival == pytest.approx(expected,
                                                                               rel=1e-12)


# ----- the jitter trend -------------------------------------------------------------------
def robust_spread(rtts: list[float]) -> float:
    """1.4826 x the median absolute deviation, worked out with the standard library."""
    centre = statistics.median(rtts)
    return 1.4826 * statistics.median(abs(rtt - centre) for rtt in rtts)


def test_the_jitter_trend_joins_the_window_centres_from_the_minimum_sample_count() -> None:
    """Five steady probes early in the hour, then exactly min_trend_samples (5) spread ones in
    the last 5 min. Jitter now is the short window's robust spread; the trend is (short
    spread - medium spread) over the distance between the window centres, (3600 - 300) / 2 s,
    projected min(T, 3600 s) ahead; stability exp(-(projected - 20 ms) / 100 ms) beyond
    20 ms."""
    config = RsConfig()
    book = ReliabilityBook(PRIOR, config)
    book.session_started("n", 0.0)
    early = [(1000.0 + 100 * i, 40.0 + 5.0 * i) for i in range(5)]
    late = [(3400.0 + 50 * i, 50.0 * i) for i in range(5)]
    for at, rtt in early + late:
        book.record_probe("n", ProbeSample(at, rtt))
    short = robust_spread([rtt for _, rtt in late])
    medium = robust_spread([rtt for _, rtt in early + late])
    assert (short, medium) == (pytest.approx(74.13), pytest.approx(14.826))
    slope = (short - medium) / ((3600.0 - 300.0) / 2)
    for duration in (60.0, HOUR, 3 * HOUR):
        projected = short + slope * min(duration, 3600.0)
        assert book.components("n", 3600.0, duration).stability == pytest.approx(
            math.exp(-(projected - 20.0) / 100.0), rel=1e-9)


def test_no_trend_is_read_until_the_short_window_has_its_minimum_samples() -> None:
    """Six steady probes early in the hour, then four (one short of min_trend_samples) that
    spread in the last 5 min: jitter now counts, its trend not, so the horizon changes
    nothing."""
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    for at, rtt in [(1000.0 + 100 * i, 50.0) for i in range(6)] + [
            (3400.0 + 50 * i, 60.0 * i) for i in range(4)]:
        book.record_probe("n", ProbeSample(at, rtt))
    now_only = book.components("n", 3600.0, 60.0).stability
    assert now_only < 1.0
    assert book.components("n", 3600.0, 3 * HOUR).stability == now_only


def test_one_nodes_jitter_is_its_own() -> None:
    """A jittery link's probes, recorded last, leave a steady node's stability whole."""
    book = ReliabilityBook(PRIOR)
    for node in ("steady", "jittery"):
        book.session_started(node, 0.0)
    for at in range(0, 300, 10):
        book.record_probe("steady", ProbeSample(at, 20.0))
        book.record_probe("jittery", ProbeSample(at, 20.0 + at % 40 * 10))
    assert book.components("jittery", 300.0, HOUR).stability < 0.5
    assert book.components("steady", 300.0, HOUR).stability == 1.0


@pytest.mark.parametrize("rtts", [[1220.0, 279.0], [279.0, 1220.0]])
def test_two_round_trips_are_one_slow_reply_not_a_jittery_link(rtts: list[float]) -> None:
    """The median deviation of two round trips is half their difference: one slow reply
    (a busy moment) would read as jitter. From min_jitter_samples (3) on it counts: 1220,
    279 and 20 ms lie 941, 0 and 259 ms from their median."""
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    for i, rtt in enumerate(rtts):
        book.record_probe("n", ProbeSample(5.0 * i, rtt))
    assert book.components("n", 10.0, 60.0).stability == 1.0
    book.record_probe("n", ProbeSample(10.0, 20.0))
    assert book.components("n", 15.0, 60.0).stability == pytest.approx(
        math.exp(-(robust_spread([*rtts, 20.0]) - 20.0) / 100.0))
    assert robust_spread([*rtts, 20.0]) == pytest.approx(1.4826 * 259.0)


def test_a_lost_probe_stops_counting_once_it_leaves_the_short_window() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    book.record_probe("n", ProbeSample(0.0, None))
    assert book.components("n", 1.0, HOUR).stability < 1.0
    for at in (301.0, 302.0):  # the 5-minute window now holds these two alone
        book.record_probe("n", ProbeSample(at, 20.0))
    assert book.components("n", 302.0, HOUR).stability == 1.0


def test_a_throttled_gpu_stays_exposed_for_its_stretched_duration() -> None:
    """At half its clock a task takes twice as long: its survival over T is an unthrottled
    node's over 2T."""
    book = ReliabilityBook(PRIOR)
    for node in ("throttled", "cool"):
        book.session_started(node, 0.0)
    book.record_gpu("throttled", gpu(1.0, throttle=0x20, clock=950.0, max_clock=1900.0))
    for figure in ("survival", "pooled"):  # the factor RS is the product of, and its report
        assert getattr(book.components("throttled", HOUR, HOUR), figure) == pytest.approx(
            getattr(book.components("cool", HOUR, 2 * HOUR), figure), rel=1e-12)


@pytest.mark.parametrize("rtts", [[], [35.0]])
def test_fewer_than_two_round_trips_have_no_spread(rtts: list[float]) -> None:
    assert link_jitter_ms(rtts) == 0.0


# ----- refusals --------------------------------------------------------------------------
def test_refusals_say_exactly_why() -> None:
    book = ReliabilityBook(PRIOR)
    book.add_node("n")
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match=r"^duration_s must be >= 0$"):
            book.survival_many(None, 1.0, bad)
        with pytest.raises(ValueError, match=r"^duration_s must be >= 0$"):
            book.departure_survival_many(None, 1.0, bad)
    with pytest.raises(ValueError, match=r"^horizon_s must be > 0$"):
        book.predicted_mtbf_s("n", 1.0, 0.0)
    with pytest.raises(ValueError, match=r"^GPU clocks must be positive$"):
        book.record_gpu("n", gpu(1.0, max_clock=0.0))
    with pytest.raises(ValueError, match=r"^rtt_ms must be >= 0$"):
        book.record_probe("n", ProbeSample(1.0, -1.0))
    with pytest.raises(ValueError, match=r"^mbps must be >= 0$"):
        book.record_upload("n", UploadSample(1.0, -1.0))
    with pytest.raises(ValueError, match=r"^node 'n' has no running session$"):
        book.session_ended("n", 1.0, abrupt=True)
    book.session_started("n", 10.0)
    with pytest.raises(ValueError, match=r"^a session cannot end before it started$"):
        book.session_ended("n", 9.0, abrupt=True)
    with pytest.raises(KeyError) as unknown:
        book.index_of("ghost")
    assert unknown.value.args == ("unknown node 'ghost'",)


def test_a_throttled_clock_reading_above_its_max_does_not_speed_the_task_up() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    book.record_gpu("n", gpu(1.0, throttle=0x20, clock=2000.0, max_clock=1900.0))
    assert book.components("n", 1.0, HOUR).slowdown == 1.0


# ----- the window summary of sparse telemetry ---------------------------------------------
def test_the_summary_of_a_node_without_telemetry_or_session_is_all_zero() -> None:
    book = ReliabilityBook(PRIOR)
    book.add_node("n")
    assert book.summary("n", 0.0) == WindowSummary(
        node_id="n", window_end_s=0, probes=0, probes_lost=0, rtt_mean_us=0, jitter_us=0,
        max_heartbeat_gap_ms=0, upload_kbps=0, temperature_mc=0, throttled_bps=0,
        sessions=0, abrupt_departures=0, uptime_s=0, tasks_completed=0, tasks_failed=0)


def test_windows_that_saw_no_samples_read_zero_and_two_probes_have_a_jitter() -> None:
    book = ReliabilityBook(PRIOR)
    book.add_node("n")
    book.record_probe("n", ProbeSample(1.0, 10.0))
    book.record_probe("n", ProbeSample(2.0, 30.0))
    summary = book.summary("n", 3.0)
    # two probes 20 ms apart: each 10 ms from their median, so 1.4826 x 10 ms
    assert (summary.probes, summary.rtt_mean_us, summary.jitter_us) == (2, 20_000, 14_826)
    assert (summary.max_heartbeat_gap_ms, summary.upload_kbps, summary.temperature_mc,
            summary.throttled_bps) == (0, 0, 0, 0)


def test_a_steady_rtt_has_no_jitter() -> None:
    book = ReliabilityBook(PRIOR)
    book.add_node("n")
    for at in (1.0, 2.0, 3.0):
        book.record_probe("n", ProbeSample(at, 20.0))
    assert book.summary("n", 3.0).jitter_us == 0


def test_every_sample_throttled_reads_the_full_scale() -> None:
    book = ReliabilityBook(PRIOR)
    book.add_node("n")
    for at in (1.0, 2.0, 3.0):
        book.record_gpu("n", gpu(at, throttle=0x40))
    assert book.summary("n", 3.0).throttled_bps == 10_000
