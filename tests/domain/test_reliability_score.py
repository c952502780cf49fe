"""Reliability Score: range, monotonicity, the shape<1 uptime effect, telemetry factors and
evidence digests."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.domain.calibration import PlattCalibrator
from orchestrator.domain.reliability import (
    GpuSample,
    PopulationPrior,
    ProbeSample,
    ReliabilityBook,
    RsConfig,
    TaskOutcome,
    UploadSample,
    fit_population_prior,
)
from orchestrator.domain.score_commitment import WindowSummary, telemetry_digest
from tests.conftest import examples

PRIOR = PopulationPrior.from_weibull(shape=0.4, scale_s=3 * 3600.0, strength=2.0)
HOUR = 3600.0

sessions_strategy = st.lists(
    st.tuples(st.floats(1.0, 30 * 86_400.0), st.booleans()), max_size=12)


def book_with(sessions: list[tuple[float, bool]], uptime: float, now: float = 1e8,
              config: RsConfig | None = None) -> ReliabilityBook:
    book = ReliabilityBook(PRIOR, config)
    t = 0.0
    for length, abrupt in sessions:
        book.session_started("n", t)
        t += length
        book.session_ended("n", t, abrupt)
    book.session_started("n", now - uptime)
    return book


def gpu(at: float, temperature_c: float = 60.0, throttle: int = 0) -> GpuSample:
    return GpuSample(at, temperature_c, 1800.0, 1900.0, throttle, 90.0, 8000.0, 24000.0,
                     300.0, 350.0)


@settings(max_examples=examples(60), deadline=None)
@given(sessions_strategy, st.floats(0.0, 10 * 86_400.0), st.floats(0.0, 7 * 86_400.0))
def test_rs_always_lies_in_unit_interval(sessions: list[tuple[float, bool]], uptime: float,
                                         duration: float) -> None:
    rs = book_with(sessions, uptime).score("n", 1e8, duration)
    assert 0.0 <= rs <= 1.0


@settings(max_examples=examples(60), deadline=None)
@given(sessions_strategy.filter(lambda s: any(not abrupt for _, abrupt in s)),
       st.floats(0.0, 86_400.0), st.floats(1.0, 86_400.0))
def test_rs_falls_when_a_clean_session_turns_out_a_failure(
        sessions: list[tuple[float, bool]], uptime: float, duration: float) -> None:
    graceful_index = next(i for i, (_, abrupt) in enumerate(sessions) if not abrupt)
    as_failure = list(sessions)
    as_failure[graceful_index] = (sessions[graceful_index][0], True)
    before = book_with(sessions, uptime).score("n", 1e8, duration)
    after = book_with(as_failure, uptime).score("n", 1e8, duration)
    assert after < before  # one more departure in the posterior: strictly less likely to finish


@settings(max_examples=examples(40), deadline=None)
@given(sessions_strategy, st.sampled_from([TaskOutcome.ABANDONED,
                                           TaskOutcome.FAILED_VERIFICATION]))
def test_rs_never_rises_when_a_task_failure_is_added(sessions: list[tuple[float, bool]],
                                                     failure: TaskOutcome) -> None:
    book = book_with(sessions, 3600.0)
    before = book.score("n", 1e8, HOUR)
    book.record_task_outcome("n", failure)
    assert book.score("n", 1e8, HOUR) <= before


@settings(max_examples=examples(60), deadline=None)
@given(sessions_strategy, st.floats(0.0, 5 * 86_400.0), st.floats(1.0, 5 * 86_400.0),
       st.floats(1.0, 86_400.0))
def test_conditional_survival_rises_with_uptime_when_shape_below_one(
        sessions: list[tuple[float, bool]], uptime: float, extra: float, duration: float) -> None:
    young = book_with(sessions, uptime).score("n", 1e8, duration)
    older = book_with(sessions, uptime + extra).score("n", 1e8, duration)
    assert older >= young - 1e-12


def test_longer_tasks_are_less_likely_to_finish() -> None:
    book = book_with([(HOUR, True)] * 3, uptime=HOUR)
    scores = [book.score("n", 1e8, d) for d in (60.0, HOUR, 10 * HOUR, 100 * HOUR)]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] > scores[-1]


def test_offline_node_scores_zero() -> None:
    book = book_with([(HOUR, True)], uptime=HOUR)
    book.session_ended("n", 1e8, abrupt=False)
    assert book.score("n", 1e8 + 1, 60.0) == 0.0
    assert book.uptime("n", 1e8 + 1) is None


def test_new_node_scores_at_population_prior() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("new", 0.0)
    survival = book.components("new", 1800.0, HOUR).survival
    k, a, b = PRIOR.shape, PRIOR.rate_a, PRIOR.rate_b
    assert survival == pytest.approx(((b + 1800.0**k) / (b + 5400.0**k)) ** a)


@pytest.mark.parametrize(("abrupt", "departures"), [(False, 0), (True, 1)])
def test_a_finished_session_adds_its_exposure_and_a_departure_only_when_abrupt(
        abrupt: bool, departures: int) -> None:
    """The posterior by hand: Gamma(a + d, b + L**k) after one session of length L."""
    length, uptime = 5 * HOUR, 2 * HOUR
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    book.session_ended("n", length, abrupt=abrupt)
    book.session_started("n", length)
    now = length + uptime
    k, a, b = PRIOR.shape, PRIOR.rate_a, PRIOR.rate_b + length**PRIOR.shape
    expected = ((b + uptime**k) / (b + (uptime + HOUR) ** k)) ** (a + departures)
    assert book.components("n", now, HOUR).survival == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("abrupt", "departures"), [(False, 0), (True, 1)])
def test_the_recent_departure_term_counts_only_abrupt_session_ends(
        abrupt: bool, departures: int) -> None:
    """R(T) by hand: (beta / (beta + T)) ** alpha, alpha = prior rate * beta0 + departures,
    beta = beta0 + the session's online seconds weighted over the window."""
    config = RsConfig()
    length = 5 * HOUR
    book = ReliabilityBook(PRIOR, config)
    book.session_started("n", 0.0)
    book.session_ended("n", length, abrupt=abrupt)
    book.session_started("n", length)
    tau, beta0 = config.departure_window_s, config.departure_prior_exposure_s
    alpha = config.departure_prior_rate_per_day / 86_400.0 * beta0 + departures
    beta = beta0 + tau * (1.0 - math.exp(-length / tau))
    (survival,) = book.departure_survival_many(None, length, HOUR)
    assert survival == pytest.approx((beta / (beta + HOUR)) ** alpha, rel=1e-12)


def test_many_abrupt_departures_outweigh_the_prior() -> None:
    flaky = book_with([(600.0, True)] * 30, uptime=600.0)
    stable = book_with([(2 * 86_400.0, True)] * 30, uptime=600.0)
    assert flaky.score("n", 1e8, HOUR) < 0.5 < stable.score("n", 1e8, HOUR)


def test_score_many_matches_score_and_grows_storage() -> None:
    book = ReliabilityBook(PRIOR)
    for i in range(1500):  # beyond the initial capacity of 1024 rows
        book.session_started(f"n{i}", float(-i))
    scores = book.score_many(None, 10.0, HOUR)
    assert scores.shape == (1500,)
    assert scores[1234] == pytest.approx(book.score("n1234", 10.0, HOUR))
    assert np.all(np.diff(scores) >= -1e-12)  # older sessions survive better


def test_session_misuse_is_refused_and_changes_nothing() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 10.0)
    with pytest.raises(ValueError, match="already has a running session"):
        book.session_started("n", 20.0)
    with pytest.raises(ValueError, match="before it started"):
        book.session_ended("n", 5.0, abrupt=True)
    assert book.sessions_observed("n") == 0
    with pytest.raises(KeyError):
        book.score("ghost", 0.0, 1.0)


def test_rising_jitter_lowers_latency_stability() -> None:
    steady, degrading = ReliabilityBook(PRIOR), ReliabilityBook(PRIOR)
    rng = np.random.default_rng(3)
    for book in (steady, degrading):
        book.session_started("n", 0.0)
    for second in range(0, 3600, 10):
        late = second > 3300
        steady.record_probe("n", ProbeSample(second, abs(30.0 + rng.normal(0, 2))))
        spread = 80.0 if late else 2.0
        degrading.record_probe("n", ProbeSample(second, abs(30.0 + rng.normal(0, spread))))
    assert steady.components("n", 3600.0, HOUR).stability == pytest.approx(1.0)
    assert degrading.components("n", 3600.0, HOUR).stability < 0.5
    short = degrading.components("n", 3600.0, 60.0).stability
    assert short > degrading.components("n", 3600.0, HOUR).stability  # trend projected ahead


def test_a_few_late_replies_on_a_steady_link_leave_stability_whole() -> None:
    """As in the demo: a healthy node rendering on a busy 2-core machine answers two probes
    late (828 and 190 ms against 6-7 ms); its link has not changed, so neither has RS. A
    link whose round trips really spread still loses stability."""
    steady, spread = ReliabilityBook(PRIOR), ReliabilityBook(PRIOR)
    for book in (steady, spread):
        book.session_started("n", 0.0)
    for second in range(0, 300, 10):
        steady.record_probe("n", ProbeSample(second, 6.0 + second % 20 / 10))
        spread.record_probe("n", ProbeSample(second, 6.0 + second % 40 * 10))
    for second, late_ms in ((300, 828.0), (310, 190.0)):
        steady.record_probe("n", ProbeSample(second, late_ms))
    assert steady.components("n", 310.0, HOUR).stability == 1.0
    assert spread.components("n", 310.0, HOUR).stability < 0.5


def test_probe_loss_lowers_stability() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    for second in range(100):
        book.record_probe("n", ProbeSample(float(second), None if second % 2 else 20.0))
    assert book.components("n", 100.0, 60.0).stability < 0.2


def test_gpu_near_slowdown_temperature_lowers_rs_and_cool_gpu_does_not() -> None:
    cool, hot = ReliabilityBook(PRIOR), ReliabilityBook(PRIOR)
    for book in (cool, hot):
        book.session_started("n", 0.0)
    for second in range(60):
        cool.record_gpu("n", gpu(second, 55.0))
        hot.record_gpu("n", gpu(second, 88.0))
    assert cool.components("n", 60.0, HOUR).thermal == 1.0
    assert hot.components("n", 60.0, HOUR).thermal == 0.5  # the configured floor
    assert hot.score("n", 60.0, HOUR) < cool.score("n", 60.0, HOUR)


def test_thermal_throttling_stretches_the_survival_horizon() -> None:
    steady, throttled = ReliabilityBook(PRIOR), ReliabilityBook(PRIOR)
    for book in (steady, throttled):
        book.session_started("n", 0.0)
    for second in range(60):
        steady.record_gpu("n", gpu(second, 60.0))
        clock = 950.0 if second % 2 else 1900.0
        throttled.record_gpu("n", GpuSample(second, 60.0, clock, 1900.0,
                                            0x20 if second % 2 else 0, 99.0, 8000.0, 24000.0,
                                            300.0, 350.0))
    slow = throttled.components("n", 60.0, HOUR)
    assert slow.slowdown == pytest.approx(1 / 0.75)  # half the samples at half clock
    assert slow.thermal == 1.0
    assert slow.survival == pytest.approx(steady.components("n", 60.0, HOUR / 0.75).survival)
    assert slow.survival < steady.components("n", 60.0, HOUR).survival


def test_idle_downclocking_is_not_a_slowdown() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    book.record_gpu("n", GpuSample(1.0, 40.0, 300.0, 1900.0, 0, 0.0, 100.0, 24000.0, 30.0, 350.0))
    assert book.components("n", 1.0, HOUR).slowdown == 1.0


def test_recalibrator_is_applied_to_the_raw_product() -> None:
    book = book_with([(HOUR, True)] * 3, uptime=HOUR)
    raw = book.score("n", 1e8, HOUR)
    book.set_recalibrator(PlattCalibrator(slope=1.0, intercept=-1.0))
    components = book.components("n", 1e8, HOUR)
    assert components.raw == pytest.approx(raw)
    assert components.calibrated == pytest.approx(1 / (1 + math.exp(-(math.log(raw / (1 - raw))
                                                                     - 1.0))))


def test_population_prior_fit_recovers_weibull_shape() -> None:
    rng = np.random.default_rng(7)
    histories = []
    for _ in range(400):
        lengths = 3 * HOUR * rng.weibull(0.4, size=10)
        histories.append((lengths.tolist(), (rng.random(10) < 0.9).tolist()))
    prior = fit_population_prior(histories)
    assert prior.shape == pytest.approx(0.4, abs=0.05)


def test_population_prior_needs_a_departure() -> None:
    with pytest.raises(ValueError, match="abrupt departure"):
        fit_population_prior([([10.0, 20.0], [False, False])])


def test_refit_prior_uses_the_books_own_history() -> None:
    rng = np.random.default_rng(11)
    book = ReliabilityBook(PRIOR)
    for i in range(200):
        t = 0.0
        for length in 10 * HOUR * rng.weibull(0.6, size=8):
            book.session_started(f"n{i}", t)
            t += float(length)
            book.session_ended(f"n{i}", t, abrupt=True)
    prior = book.refit_prior(now=1e9)
    assert prior.shape == pytest.approx(0.6, abs=0.08)
    assert book.prior == prior


def test_telemetry_digest_is_deterministic_and_covers_every_field() -> None:
    book = book_with([(HOUR, True)], uptime=HOUR)
    book.record_probe("n", ProbeSample(1e8 - 10, 25.0))
    book.record_probe("n", ProbeSample(1e8 - 5, None))
    book.record_upload("n", UploadSample(1e8 - 5, 80.0))
    book.record_heartbeat("n", 1e8 - 20)
    book.record_heartbeat("n", 1e8 - 5)
    book.record_gpu("n", gpu(1e8 - 5))
    summary = book.summary("n", 1e8)
    assert (summary.probes, summary.probes_lost, summary.max_heartbeat_gap_ms) == (2, 1, 15_000)
    assert telemetry_digest(summary) == telemetry_digest(book.summary("n", 1e8))
    book.record_task_outcome("n", TaskOutcome.COMPLETED)
    assert telemetry_digest(book.summary("n", 1e8)) != telemetry_digest(summary)
    assert len(telemetry_digest(summary)) == 32


def test_node_up_longer_is_strictly_more_likely_to_stay() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("fresh", 1e6)
    book.session_started("veteran", 1e6 - 10 * HOUR)
    assert book.score("veteran", 1e6, HOUR) > book.score("fresh", 1e6, HOUR) + 0.05


def test_per_row_durations_match_scalar_scoring() -> None:
    book = ReliabilityBook(PRIOR)
    for i in range(3):
        book.session_started(f"n{i}", -HOUR * (i + 1))
    durations = np.array([60.0, HOUR, 10 * HOUR])
    per_row = book.score_many(None, 0.0, durations)
    assert per_row.tolist() == pytest.approx(
        [book.score(f"n{i}", 0.0, float(d)) for i, d in enumerate(durations)])
    with pytest.raises(ValueError):
        book.score_many(None, 0.0, np.array([60.0, -1.0, 5.0]))


def test_raw_score_is_what_the_recalibrator_maps() -> None:
    book = book_with([(HOUR, True)] * 3, uptime=HOUR)
    calibrator = PlattCalibrator(slope=2.0, intercept=0.5)
    book.set_recalibrator(calibrator)
    raw = book.raw_score_many(None, 1e8, HOUR)
    assert book.score_many(None, 1e8, HOUR) == pytest.approx(calibrator(raw))


# ----- recent departure rate (constant-hazard term) -------------------------------------
DAY = 86_400.0
NOW = 1e8
POOLED = RsConfig(departure_weight=1.0)  # the term at full weight (default: off)


def book_with_cuts(cut_times: list[float], up_since: float, config: RsConfig = POOLED,
                   gap_s: float = 60.0) -> ReliabilityBook:
    """One node online since `up_since`, cut off (DEAD verdict, back after `gap_s`) at each
    of `cut_times`."""
    book = ReliabilityBook(PRIOR, config)
    book.session_started("n", up_since)
    for cut in sorted(cut_times):
        book.session_ended("n", cut, abrupt=True)
        book.session_started("n", cut + gap_s)
    return book


def test_departure_term_is_one_without_departures_under_a_zero_prior_rate() -> None:
    config = RsConfig(departure_prior_rate_per_day=0.0, departure_weight=1.0)
    book = book_with_cuts([], up_since=0.0, config=config)
    session_only = book_with_cuts([], up_since=0.0, config=RsConfig(departure_weight=0.0))
    components = book.components("n", 3 * DAY, 4 * HOUR)
    assert components.departures == 1.0
    assert book.score("n", 3 * DAY, 4 * HOUR) == session_only.score("n", 3 * DAY, 4 * HOUR)
    assert book.predicted_mtbf_s("n", 3 * DAY, 4 * HOUR) == session_only.predicted_mtbf_s(
        "n", 3 * DAY, 4 * HOUR)
    assert book.recent_departure_rate_many(None, 3 * DAY)[0] == 0.0


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.floats(0.0, 6 * DAY), max_size=10), st.floats(0.0, 6 * DAY),
       st.floats(1.0, 2 * DAY))
def test_departure_term_never_rises_when_a_revocation_is_added(
        cuts: list[float], extra_cut: float, duration: float) -> None:
    spaced = sorted({round(c / 600.0) * 600.0 for c in cuts})
    if any(abs(extra_cut - c) < 600.0 for c in spaced):
        return  # two cuts in one gap cannot happen
    now = 7 * DAY
    before = book_with_cuts(spaced, up_since=-HOUR)
    after = book_with_cuts([*spaced, extra_cut], up_since=-HOUR)
    assert (after.departure_survival_many(None, now, duration)[0]
            <= before.departure_survival_many(None, now, duration)[0] + 1e-12)
    assert (after.recent_departure_rate_many(None, now)[0]
            >= before.recent_departure_rate_many(None, now)[0] - 1e-15)


@settings(max_examples=examples(60), deadline=None)
@given(sessions_strategy.filter(lambda s: any(not abrupt for _, abrupt in s)),
       st.floats(0.0, DAY), st.floats(1.0, DAY))
def test_recent_rs_never_rises_when_a_clean_session_turns_out_a_revocation(
        sessions: list[tuple[float, bool]], uptime: float, duration: float) -> None:
    """As the session-model property above, but with the history recent (inside the
    departure window), so the departure term sees it too."""
    history_end = sum(length for length, _ in sessions)
    now = history_end + 600.0 + uptime
    graceful_index = next(i for i, (_, abrupt) in enumerate(sessions) if not abrupt)
    as_failure = list(sessions)
    as_failure[graceful_index] = (sessions[graceful_index][0], True)
    before = book_with(sessions, uptime, now=now, config=POOLED)
    after = book_with(as_failure, uptime, now=now, config=POOLED)
    assert after.components("n", now, duration).departures <= before.components(
        "n", now, duration).departures + 1e-12
    assert after.score("n", now, duration) <= before.score("n", now, duration) + 1e-12


@settings(max_examples=examples(60), deadline=None)
@given(sessions_strategy, st.floats(0.0, 5 * DAY), st.floats(1.0, 5 * DAY), st.floats(1.0, DAY))
def test_pooled_rs_still_rises_with_uptime(sessions: list[tuple[float, bool]], uptime: float,
                                           extra: float, duration: float) -> None:
    history_end = sum(length for length, _ in sessions)
    young = book_with(sessions, uptime, now=history_end + 10 * DAY, config=POOLED)
    older = book_with(sessions, uptime + extra, now=history_end + 10 * DAY, config=POOLED)
    now = history_end + 10 * DAY
    assert older.score("n", now, duration) >= young.score("n", now, duration) - 1e-12


def test_recent_cuts_lower_rs_and_shorten_the_checkpoint_mtbf() -> None:
    """Two nodes with the same sessions (twelve cut off after 6 h each, now up for 2 h): for
    one the cuts are this week's, for the other two months old. The session model alone
    cannot tell them apart; the recent-rate term can."""
    def node(cuts_from: float, config: RsConfig = POOLED) -> ReliabilityBook:
        book = book_with_cuts([cuts_from + (i + 1) * 6 * HOUR for i in range(12)],
                              up_since=cuts_from, config=config)
        book.session_ended("n", cuts_from + 13 * 6 * HOUR, abrupt=True)
        book.session_started("n", NOW - 2 * HOUR)
        return book

    recent, old = node(NOW - 4 * DAY), node(NOW - 64 * DAY)
    session_only = RsConfig(departure_weight=0.0)
    assert node(NOW - 4 * DAY, session_only).score("n", NOW, 4 * HOUR) == pytest.approx(
        node(NOW - 64 * DAY, session_only).score("n", NOW, 4 * HOUR))
    assert recent.score("n", NOW, 4 * HOUR) < old.score("n", NOW, 4 * HOUR)
    assert recent.predicted_mtbf_s("n", NOW, 4 * HOUR) < old.predicted_mtbf_s("n", NOW, 4 * HOUR)
    assert recent.components("n", NOW, 4 * HOUR).departures < old.components(
        "n", NOW, 4 * HOUR).departures
    assert recent.recent_departure_rate_many(None, NOW)[0] * DAY > 2 * 0.5  # prior: 0.5/day


def test_old_departures_are_forgotten() -> None:
    config = RsConfig(departure_window_s=DAY, departure_weight=1.0)
    recent = book_with_cuts([DAY + i * HOUR for i in range(10)], 0.0, config)
    prior_rate = recent.departure_rate_prior
    assert recent.recent_departure_rate_many(None, 2 * DAY)[0] > 3 * prior_rate
    never_cut = book_with_cuts([], DAY + 9 * HOUR + 60.0, config)  # same running session
    faded = recent.recent_departure_rate_many(None, 60 * DAY)[0]
    assert faded == pytest.approx(never_cut.recent_departure_rate_many(None, 60 * DAY)[0],
                                  rel=1e-3)


def test_refit_pools_the_population_rate_that_new_nodes_start_from() -> None:
    book = ReliabilityBook(PRIOR, RsConfig(departure_window_s=1e12))  # no decay: exact counts
    for i in range(4):
        book.session_started(f"n{i}", 0.0)
        book.session_ended(f"n{i}", DAY, abrupt=i < 2)  # two DEAD verdicts over 4 node-days
        book.session_started(f"n{i}", DAY + 60.0)
    rate = book.refit_departure_rate(DAY + 60.0)
    assert rate * DAY == pytest.approx(2 / 4, rel=1e-6)
    book.session_started("new", DAY + 60.0)
    assert book.recent_departure_rate_many(np.array([book.index_of("new")]), DAY + 60.0)[0] \
        == pytest.approx(rate)


def test_bad_departure_settings_are_refused() -> None:
    for bad in (dict(departure_weight=1.5), dict(departure_window_s=0.0),
                dict(departure_prior_rate_per_day=-1.0), dict(departure_prior_exposure_s=0.0)):
        with pytest.raises(ValueError):
            RsConfig(**bad)


def summary_book() -> ReliabilityBook:
    """One node with a known window: every figure of its summary can be worked out by hand."""
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    book.session_ended("n", 50.0, abrupt=True)
    book.session_started("n", 60.0)
    for rtt in (10.0, 20.0, None, 30.0):
        book.record_probe("n", ProbeSample(100.0, rtt))
    for mbps in (40.0, 60.0):
        book.record_upload("n", UploadSample(100.0, mbps))
    book.record_gpu("n", gpu(100.0, temperature_c=60.0))
    book.record_gpu("n", gpu(100.0, temperature_c=70.0, throttle=0x20))
    for beat in (100.0, 103.0, 103.0, 110.0):  # a duplicate is no gap
        book.record_heartbeat("n", beat)
    for outcome in (TaskOutcome.COMPLETED,) * 3 + (TaskOutcome.ABANDONED,):
        book.record_task_outcome("n", outcome)
    return book


def test_window_summary_by_hand() -> None:
    summary = summary_book().summary("n", 200.0)
    assert summary == WindowSummary(
        node_id="n", window_end_s=200, probes=4, probes_lost=1,
        rtt_mean_us=20_000,  # (10 + 20 + 30) / 3 ms
        jitter_us=14_826,  # 10, 20, 30 ms lie 10, 0, 10 ms from their median: 1.4826 x 10 ms
        max_heartbeat_gap_ms=7_000, upload_kbps=50_000, temperature_mc=65_000,
        throttled_bps=5_000,  # one GPU sample of two thermally throttled
        sessions=1, abrupt_departures=1, uptime_s=140, tasks_completed=3, tasks_failed=1)


def test_window_summary_keeps_samples_exactly_one_window_old_then_drops_them() -> None:
    day = RsConfig().long_window_s
    assert summary_book().summary("n", 100.0 + day).probes == 4
    assert summary_book().summary("n", 100.5 + day).probes == 0


def test_pass_rate_is_the_beta_posterior_mean_by_hand() -> None:
    book = summary_book()  # 3 completed, 1 failed; prior mean 0.99 worth 20 outcomes
    assert book.components("n", 200.0, HOUR).pass_rate == pytest.approx(
        (0.99 * 20 + 3) / (20 + 4), rel=1e-12)


def test_telemetry_inputs_are_checked_at_the_edges() -> None:
    book = ReliabilityBook(PRIOR)
    book.session_started("n", 0.0)
    book.record_probe("n", ProbeSample(1.0, 0.0))  # a zero RTT is a measurement
    book.record_upload("n", UploadSample(1.0, 0.0))  # so is a stalled upload
    book.record_upload("n", UploadSample(1.0, 0.5))
    book.record_gpu("n", dataclasses.replace(gpu(1.0), sm_clock_mhz=0.0, max_sm_clock_mhz=0.5))
    with pytest.raises(ValueError, match="rtt_ms must be >= 0"):
        book.record_probe("n", ProbeSample(1.0, -1.0))
    with pytest.raises(ValueError, match="mbps must be >= 0"):
        book.record_upload("n", UploadSample(1.0, -0.1))
    for clocks in ({"max_sm_clock_mhz": 0.0}, {"sm_clock_mhz": -1.0}):
        with pytest.raises(ValueError, match="GPU clocks must be positive"):
            book.record_gpu("n", dataclasses.replace(gpu(1.0), **clocks))
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match="duration_s must be >= 0"):
            book.departure_survival_many(None, 1.0, bad)
    assert book.departure_survival_many(None, 1.0, 0.0)[0] == 1.0
    assert 0.0 < book.departure_survival_many(None, 1.0, 0.5)[0] < 1.0
    with pytest.raises(ValueError, match="horizon_s must be > 0"):
        book.predicted_mtbf_s("n", 1.0, 0.0)
    assert book.predicted_mtbf_s("n", 1.0, 0.5) > 0.0


def test_a_single_probe_has_no_jitter_yet() -> None:
    book = ReliabilityBook(PRIOR, RsConfig(jitter_ok_ms=0.0))  # any jitter at all would count
    book.session_started("n", 0.0)
    book.record_probe("n", ProbeSample(1.0, 40.0))
    assert book.components("n", 1.0, HOUR).stability == 1.0


@pytest.mark.parametrize(("histories", "message"), [
    ([([10.0, 20.0], [True])], "each history needs one abrupt flag per session"),
    ([([10.0, 0.0], [True, True])], "session lengths must be positive"),
    ([([10.0, 20.0], [False, False])], "fitting a prior needs at least one abrupt departure"),
    ([([], [])], "fitting a prior needs at least one abrupt departure"),
])
def test_population_prior_refuses_bad_histories_saying_why(
        histories: list[tuple[list[float], list[bool]]], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        fit_population_prior(histories)


def test_rs_is_the_product_of_its_factors_for_a_hot_gpu() -> None:
    book = book_with([(HOUR, True)] * 5, uptime=HOUR)
    for i in range(5):
        book.record_gpu("n", gpu(1e8 - 600 + 60 * i, temperature_c=92.0))
    parts = book.components("n", 1e8, HOUR)
    assert 0.0 < parts.thermal < 1.0  # the heat costs something
    assert parts.raw == pytest.approx(
        parts.pooled * parts.pass_rate * parts.stability * parts.thermal, rel=1e-12)
def test_a_departure_censored_later_scores_as_if_it_had_ended_censored() -> None:
    """A withdrawn abandonment (the process rendered through the cut): the abrupt end of that
    session leaves the node's record, as if the detector had never called it a departure."""
    now = 2 * 86_400.0
    cut = book_with([(HOUR, False), (5 * HOUR, True)], uptime=600.0, now=now)
    censored = book_with([(HOUR, False), (5 * HOUR, False)], uptime=600.0, now=now)
    assert cut.score("n", now, HOUR) < censored.score("n", now, HOUR)

    assert cut.departure_censored("n", 6 * HOUR)

    assert cut.score("n", now, HOUR) == pytest.approx(censored.score("n", now, HOUR), rel=1e-9)
    assert cut.summary("n", now).abrupt_departures == 0
    assert not cut.departure_censored("n", 6 * HOUR)  # nothing abrupt is left to censor
