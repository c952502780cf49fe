"""Telemetry windows and the Reliability Score RS(node, T).

RS(node, T) estimates P(node finishes a task of expected duration T seconds AND
passes verification), as a product of four factors, the first a pool of two models of
the same event (no DEAD verdict during the task):

    RS = S(u + s*T | alive at u)**(1-w') * R(s*T)**w' * pass_rate * stability(T) * thermal

(s >= 1: the thermal-throttling slowdown below; w': below)

* **Session survival.** Each node's online sessions follow a Weibull law with a
  population shape k and a node rate theta = scale**-k. Every published fit of
  volunteer-host availability has k < 1 (SETI@home: gamma shape 0.34-0.36,
  ComBoS: Weibull 0.39): the longer a node has been up, the less likely it is to
  leave now, so a node's *current uptime u* is the strongest single predictor.
  theta gets a Gamma(a, b) population prior fitted by empirical Bayes
  (`fit_population_prior`: marginal likelihood over all nodes, with
  right-censoring). A node's posterior is Gamma(a + d, b + sum t_i**k) over its d
  abrupt departures and all its finished sessions (graceful ones are censored),
  so a new node sits at the population prior and its own history takes over as
  sessions accumulate. Integrating theta out and also censoring the running
  session at u gives a closed form:

      S(u + T | u) = ((b' + u**k) / (b' + (u + T)**k)) ** a'      (a', b' posterior)

  It is O(1) per node and vectorises: 10,000 nodes score in about 0.3 ms.
* **Recent departure rate.** With k < 1 the session model forgives a node quickly once
  it is up again, yet link cuts the failure detector calls DEAD (ISP partitions longer
  than its ~11 s threshold) arrive at a roughly constant rate per node, whatever its
  uptime; each one revokes the lease. R(T) = P(no DEAD verdict during T) under a
  constant hazard lambda whose Gamma(alpha0, beta0) prior sits at the population's
  pooled rate (refitted with the Weibull prior) and whose data are the node's abrupt
  departures and online time, exponentially weighted over a rolling window (recent
  behaviour counts, a fixed link is forgiven). lambda integrated out:

      R(T) = (beta / (beta + T)) ** alpha    (alpha = alpha0 + departures, beta = beta0 + online s)

  S and R predict the same DEAD verdicts, so they are pooled log-linearly (a weighted
  geometric mean: hazards averaged, not added) with weight w' = departure_weight x
  finished / (beta0 + finished), the share of R's evidence that the node's finished
  recent sessions bring: a node without recent history is scored by S alone, and the
  running session stays out of the weight so RS still rises with uptime. R is 1 for a
  node with no departures under a zero prior rate and never rises when a departure is
  added. The pool also enters `predicted_mtbf_s`, so Young/Daly intervals shorten where
  revocations are frequent.
* **Verification pass rate.** Beta posterior mean over completed vs failed
  (failed verification, or a task dropped while the node stayed online).
* **Latency stability.** Jitter (`link_jitter_ms`: the RTTs' robust spread) now, its trend from the
  1 h window to the 5 min window projected T ahead, and probe loss; 1 while
  within tolerance, decaying beyond it. The orchestrator times each probe from the moment
  its nonce leaves to the echo's arrival (`services.pls_ingest`, `api.arrival`), so its own
  queue under load is not the node's link. A spread is believed from `min_jitter_samples`
  round trips on: the median deviation of two is half their difference, set by one slow
  reply.
* **Thermal headroom.** A GPU near its slowdown temperature risks a crash (a
  factor below 1), and a thermally throttled GPU runs slower, so the task stays
  exposed to departure longer: the survival horizon T is stretched by
  max_clock / clock of the throttled samples (idle down-clocking does not count).

Self-reported numbers (GPU telemetry) can only *lower* RS (the thermal factor
is capped at 1, the slowdown floored at 1), so a node gains nothing by faking
them; the GPU class itself is checked by PoPW challenge timing (`popw.py`).
Cached factors are as of each node's latest sample. The heuristic factors are
not fitted probabilities: `set_recalibrator` maps the raw product onto observed
outcomes (isotonic, Platt, or `OnlineRecalibrator` learning as outcomes arrive;
see `calibration.py`).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import minimize
from scipy.special import gammaln

from orchestrator.domain.calibration import Recalibrator
from orchestrator.domain.score_commitment import WindowSummary

Durations = float | NDArray[np.float64]
"""Seconds: one task duration for every row, or one per row."""

# NVML clocks-throttle-reason bits that mean "too hot" (nvmlClocksThrottleReason*).
THERMAL_THROTTLE_MASK = 0x08 | 0x20 | 0x40  # HwSlowdown | SwThermalSlowdown | HwThermalSlowdown


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """One signed ping-pong probe the orchestrator timed itself."""

    at: float  # seconds, when the probe was sent
    rtt_ms: float | None  # round trip; None: the probe was lost


@dataclass(frozen=True, slots=True)
class UploadSample:
    """Upload throughput the orchestrator measured during an asset or result transfer."""

    at: float
    mbps: float


@dataclass(frozen=True, slots=True)
class GpuSample:
    """Agent-reported (signed) pynvml reading; self-reported, so it may only lower RS."""

    at: float
    temperature_c: float
    sm_clock_mhz: float
    max_sm_clock_mhz: float
    throttle_reasons: int  # nvmlDeviceGetCurrentClocksThrottleReasons bitmask
    utilization_pct: float
    memory_used_mb: float
    memory_total_mb: float
    power_w: float
    power_limit_w: float


class TaskOutcome(StrEnum):
    COMPLETED = "completed"  # finished and passed verification
    ABANDONED = "abandoned"  # dropped while the node stayed online (a departure is a session end)
    FAILED_VERIFICATION = "failed_verification"


@dataclass(frozen=True, slots=True)
class PopulationPrior:
    """Weibull shape shared by the population and a Gamma(rate_a, rate_b) prior on each node's
    Weibull rate theta = scale**-shape, with times in seconds."""

    shape: float
    rate_a: float  # prior strength, in pseudo-departures
    rate_b: float  # prior exposure, in pseudo sum of t**shape

    def __post_init__(self) -> None:
        if not (self.shape > 0 and self.rate_a > 0 and self.rate_b > 0):
            raise ValueError(f"prior parameters must be positive: {self}")

    @classmethod
    def from_weibull(cls, shape: float, scale_s: float, strength: float) -> PopulationPrior:
        """A prior centred on Weibull(shape, scale) worth `strength` observed departures."""
        return cls(shape, strength, strength * scale_s**shape)


DEFAULT_PRIOR = PopulationPrior.from_weibull(shape=0.39, scale_s=2.964 * 3600.0, strength=2.0)
"""ComBoS default availability fit (Weibull k=0.39, scale 2.964 h), weakly held: two
pseudo-departures, so a few real sessions dominate. Refit with `refit_prior` once the grid
has history."""


def fit_population_prior(histories: Iterable[tuple[Sequence[float], Sequence[bool]]]
                         ) -> PopulationPrior:
    """Empirical-Bayes fit of (shape, a, b) by maximising the marginal likelihood of every
    node's sessions, theta integrated out. Each history is (session lengths in seconds,
    ended abruptly?); graceful and still-running sessions are right-censored."""
    lengths: list[NDArray[np.float64]] = []
    events: list[NDArray[np.bool_]] = []
    for durations, abrupt in histories:
        d = np.asarray(durations, dtype=np.float64)
        e = np.asarray(abrupt, dtype=np.bool_)
        if d.shape != e.shape:
            raise ValueError("each history needs one abrupt flag per session")
        if np.any(d <= 0):
            raise ValueError("session lengths must be positive")
        if d.size:
            lengths.append(d)
            events.append(e)
    if not any(e.any() for e in events):
        raise ValueError("fitting a prior needs at least one abrupt departure")
    node_of = np.concatenate([np.full(d.size, i) for i, d in enumerate(lengths)])
    t = np.concatenate(lengths)
    is_event = np.concatenate(events)
    n_nodes = len(lengths)
    departures = np.bincount(node_of, weights=is_event, minlength=n_nodes)
    log_t_events = np.bincount(node_of, weights=np.where(is_event, np.log(t), 0.0),
                               minlength=n_nodes)
    log_t_max = float(np.log(t.max()))

    def negative_log_marginal(params: NDArray[np.float64]) -> float:
        k, a, log_b = math.exp(params[0]), math.exp(params[1]), params[2]
        # Work with b / t_max**k to keep t**k well scaled for any k.
        exposure = np.bincount(node_of, weights=np.exp(k * (np.log(t) - log_t_max)),
                               minlength=n_nodes)
        log_b_scaled = log_b - k * log_t_max
        b_scaled = math.exp(log_b_scaled)
        ll = (departures * math.log(k) + (k - 1.0) * log_t_events
              + a * log_b_scaled - gammaln(a) + gammaln(a + departures)
              - (a + departures) * np.log(b_scaled + exposure)
              - departures * k * log_t_max)
        return float(-np.sum(ll))

    start = np.array([math.log(0.5), math.log(2.0), 0.5 * float(np.mean(np.log(t))) + 0.7])
    result = minimize(negative_log_marginal, start, method="L-BFGS-B",
                      bounds=[(math.log(0.05), math.log(5.0)), (math.log(0.05), math.log(1e4)),
                              (-50.0, 50.0)])
    return PopulationPrior(math.exp(result.x[0]), math.exp(result.x[1]), math.exp(result.x[2]))


@dataclass(frozen=True, slots=True)
class RsConfig:
    short_window_s: float = 300.0  # "now" for jitter, loss, temperature
    medium_window_s: float = 3600.0  # baseline the jitter trend is measured against
    long_window_s: float = 86_400.0  # summaries committed per epoch
    min_trend_samples: int = 5  # per window before a jitter trend is believed
    min_jitter_samples: int = 3  # the fewest round trips whose MAD one slow reply does not set
    trend_horizon_cap_s: float = 3600.0  # never extrapolate jitter further than this
    jitter_ok_ms: float = 20.0  # jitter a render task does not notice
    jitter_scale_ms: float = 100.0  # e-folding of the penalty above jitter_ok_ms
    loss_ok: float = 0.02  # probe loss tolerated
    loss_scale: float = 0.2  # e-folding of the penalty above loss_ok
    slowdown_temp_c: float = 90.0  # where GPUs start thermal slowdown
    temp_margin_c: float = 10.0  # headroom below slowdown that counts as fully cool
    thermal_floor: float = 0.5  # a hot but working GPU still finishes most tasks
    max_slowdown: float = 3.0  # cap on how much thermal throttling may stretch a task
    departure_window_s: float = 7 * 86_400.0  # e-folding age of departures and online time
    departure_prior_rate_per_day: float = 0.5  # until refitted from the grid's own verdicts
    departure_prior_exposure_s: float = 2 * 86_400.0  # prior weight, in pseudo online seconds
    # Both survival models predict the same DEAD verdicts: RS pools them log-linearly,
    # S**(1-w') * R**w' (hazards averaged, not added), w' = departure_weight x the share of
    # R's evidence that finished recent sessions bring. 0 (default): the session model alone.
    # Measured with 1.0 (`mesh bench churn`, 1,000 nodes, 7 days, seeds 1-5 and a CSV trace):
    # Platt log-loss of placed attempts 0.1401/0.1432 -> 0.1400/0.1430 (seeds 1/2), PLS waste
    # +2.5 % on average (within run-to-run noise), stable-vs-flaky earnings lower in 6 of 6
    # runs (mean -0.11): poor links already show in the stability factor (jitter, loss), and
    # cuts are independent of how long a host's sessions last. Off until a grid shows cuts
    # that jitter does not predict.
    departure_weight: float = 0.0
    pass_prior_mean: float = 0.99  # Beta prior of the verification pass rate
    pass_prior_strength: float = 20.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.departure_weight <= 1.0:
            raise ValueError("departure_weight must lie in [0, 1]")
        if not (self.departure_window_s > 0 and self.departure_prior_exposure_s > 0
                and self.departure_prior_rate_per_day >= 0):
            raise ValueError("departure window and prior exposure must be > 0, the rate >= 0")


@dataclass(frozen=True, slots=True)
class RsComponents:
    survival: float
    pass_rate: float
    stability: float
    thermal: float
    raw: float  # pooled * pass_rate * stability * thermal
    calibrated: float  # after the recalibrator (== raw without one)
    slowdown: float  # >= 1: how much thermal throttling stretches the survival horizon
    departures: float = 1.0  # R: P(no DEAD verdict during the task) at the recent rate
    pooled: float = 1.0  # survival**(1-w') * departures**w', the factor RS uses


MAD_TO_SIGMA = 1.4826  # the median absolute deviation of normal noise is sigma / 1.4826


def link_jitter_ms(rtts_ms: Iterable[float]) -> float:
    """How much a link's round trips spread: 1.4826 x their median absolute deviation, the
    standard deviation where the spread is normal noise. A median, not a mean, so a minority
    of slow replies (a host busy rendering answers one probe late, one queueing spike) does
    not make a steady link look jittery, while a link whose round trips do spread shows it."""
    values = list(rtts_ms)
    if len(values) < 2:
        return 0.0
    centre = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median([abs(value - centre) for value in values])


class _Window:
    """Samples of one quantity over the last `span_s` seconds with an O(1) mean."""

    __slots__ = ("count", "samples", "span_s", "total")

    def __init__(self, span_s: float) -> None:
        self.span_s = span_s
        self.samples: deque[tuple[float, float]] = deque()
        self.total = 0.0
        self.count = 0

    def push(self, at: float, value: float) -> None:
        self.samples.append((at, value))
        self.total += value
        self.count += 1
        self.evict(at)

    def evict(self, now: float) -> None:
        horizon = now - self.span_s
        while self.samples and self.samples[0][0] < horizon:
            _, old = self.samples.popleft()
            self.total -= old
            self.count -= 1

    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def spread(self) -> float:
        return link_jitter_ms(v for _, v in self.samples)

    def maximum(self) -> float:
        return max((v for _, v in self.samples), default=math.nan)


@dataclass(slots=True)
class _Telemetry:
    rtt_short: _Window
    rtt_medium: _Window
    rtt_long: _Window
    loss_short: _Window
    loss_long: _Window
    upload_long: _Window
    temp_short: _Window
    temp_long: _Window
    clock_ratio_short: _Window  # SM clock / max clock of thermally throttled samples, else 1
    throttled_short: _Window
    throttled_long: _Window
    heartbeat_gaps: _Window
    last_heartbeat: float | None = None

    @classmethod
    def empty(cls, config: RsConfig) -> _Telemetry:
        s, m, lg = config.short_window_s, config.medium_window_s, config.long_window_s
        return cls(_Window(s), _Window(m), _Window(lg), _Window(s), _Window(lg), _Window(lg),
                   _Window(s), _Window(lg), _Window(s), _Window(s), _Window(lg), _Window(lg))


@dataclass(slots=True)
class _History:
    sessions: list[float] = field(default_factory=list)  # finished session lengths, seconds
    abrupt: list[bool] = field(default_factory=list)
    tasks_completed: int = 0
    tasks_failed: int = 0


class ReliabilityBook:
    """Every node's session history, telemetry windows and cached score factors.

    Per-node state lives in numpy rows (`add_node` gives the row) so that scoring all
    nodes for one placement is a handful of vector operations. Updates are incremental:
    a finished session adds to two sums, a probe updates its windows and one cached row."""

    def __init__(self, prior: PopulationPrior = DEFAULT_PRIOR, config: RsConfig | None = None
                 ) -> None:
        self.prior = prior
        self.config = config or RsConfig()
        self._rows: dict[str, int] = {}
        self._ids: list[str] = []
        self._history: list[_History] = []
        self._telemetry: dict[int, _Telemetry] = {}
        self._recalibrator: Recalibrator | None = None
        capacity = 1024
        self._departures = np.zeros(capacity)  # d: abrupt departures
        self._exposure = np.zeros(capacity)  # sum of t**k over finished sessions
        self._session_start = np.full(capacity, np.nan)  # NaN: offline
        self._passes = np.zeros(capacity)
        self._fails = np.zeros(capacity)
        self._jitter_now = np.zeros(capacity)  # ms, short window
        self._jitter_slope = np.zeros(capacity)  # ms per second, medium -> short window
        self._loss_now = np.zeros(capacity)
        self._thermal = np.ones(capacity)  # near-slowdown temperature penalty
        self._slowdown = np.ones(capacity)  # thermal-throttling stretch of the horizon
        # Exponentially weighted abrupt departures and online seconds of finished sessions,
        # as of `_recent_at` (decayed further at scoring time).
        self._recent_departures = np.zeros(capacity)
        self._recent_exposure = np.zeros(capacity)
        self._recent_at = np.full(capacity, -np.inf)
        self.departure_rate_prior = self.config.departure_prior_rate_per_day / 86_400.0
        """Population rate of DEAD verdicts per online second: the departure term's prior mean."""

    # ----- registration -------------------------------------------------------------
    def add_node(self, node_id: str) -> int:
        row = self._rows.get(node_id)
        if row is not None:
            return row
        row = len(self._ids)
        if row == self._departures.size:
            self._grow()
        self._rows[node_id] = row
        self._ids.append(node_id)
        self._history.append(_History())
        return row

    def _grow(self) -> None:
        for name, fill in (("_departures", 0.0), ("_exposure", 0.0), ("_session_start", np.nan),
                           ("_passes", 0.0), ("_fails", 0.0), ("_jitter_now", 0.0),
                           ("_jitter_slope", 0.0), ("_loss_now", 0.0), ("_thermal", 1.0),
                           ("_slowdown", 1.0), ("_recent_departures", 0.0),
                           ("_recent_exposure", 0.0), ("_recent_at", -np.inf)):
            old = getattr(self, name)
            new = np.full(old.size * 2, fill)
            new[: old.size] = old
            setattr(self, name, new)

    def index_of(self, node_id: str) -> int:
        try:
            return self._rows[node_id]
        except KeyError:
            raise KeyError(f"unknown node {node_id!r}") from None

    def __len__(self) -> int:
        return len(self._ids)

    # ----- sessions and outcomes -----------------------------------------------------
    def session_started(self, node_id: str, at: float) -> None:
        row = self.add_node(node_id)
        if not np.isnan(self._session_start[row]):
            raise ValueError(f"node {node_id!r} already has a running session")
        self._age_recent(row, at)
        self._session_start[row] = at

    def session_ended(self, node_id: str, at: float, abrupt: bool) -> None:
        """Close the running session; `abrupt` = a departure the failure detector called
        dead, not a graceful drain (which is censored: the node chose to stop cleanly)."""
        row = self.index_of(node_id)
        start = self._session_start[row]
        if np.isnan(start):
            raise ValueError(f"node {node_id!r} has no running session")
        if at < start:
            raise ValueError("a session cannot end before it started")
        length = max(at - start, 1e-3)  # zero-length sessions still count as exposure
        history = self._history[row]
        history.sessions.append(length)
        history.abrupt.append(abrupt)
        self._exposure[row] += length**self.prior.shape
        self._departures[row] += 1.0 if abrupt else 0.0
        self._age_recent(row, at)
        tau = self.config.departure_window_s
        self._recent_exposure[row] += tau * -math.expm1(-(at - start) / tau)
        self._recent_departures[row] += 1.0 if abrupt else 0.0
        self._session_start[row] = np.nan

    def departure_censored(self, node_id: str, ended_at: float) -> bool:
        """The node's latest abrupt departure (its session ended at `ended_at`) was a network
        cut its process rendered on through (`continuity`): count that session censored, like
        a drain. False when the node has no abrupt departure on record."""
        row = self.index_of(node_id)
        history = self._history[row]
        latest = next((i for i in range(len(history.abrupt) - 1, -1, -1) if history.abrupt[i]),
                      None)
        if latest is None:
            return False
        history.abrupt[latest] = False
        self._departures[row] -= 1.0
        weight = math.exp(-max(self._recent_at[row] - ended_at, 0.0)
                          / self.config.departure_window_s)
        self._recent_departures[row] = max(self._recent_departures[row] - weight, 0.0)
        return True

    def _age_recent(self, row: int, at: float) -> None:
        """Decay the node's weighted departures and online time to `at`."""
        elapsed = at - self._recent_at[row]
        if elapsed > 0:
            decay = math.exp(-elapsed / self.config.departure_window_s)
            self._recent_departures[row] *= decay
            self._recent_exposure[row] *= decay
            self._recent_at[row] = at

    def record_task_outcome(self, node_id: str, outcome: TaskOutcome) -> None:
        row = self.index_of(node_id)
        history = self._history[row]
        if outcome is TaskOutcome.COMPLETED:
            history.tasks_completed += 1
            self._passes[row] += 1.0
        else:
            history.tasks_failed += 1
            self._fails[row] += 1.0

    def verified_many(self, rows: NDArray[np.intp]) -> tuple[NDArray[np.float64],
                                                              NDArray[np.float64]]:
        """(results that passed verification, results that failed it) per row."""
        r = np.asarray(rows, dtype=np.intp)
        return self._passes[r].copy(), self._fails[r].copy()

    def sessions_observed(self, node_id: str) -> int:
        return len(self._history[self.index_of(node_id)].sessions)

    def sessions_observed_many(self, rows: NDArray[np.intp]) -> NDArray[np.int64]:
        return np.array([len(self._history[r].sessions) for r in rows.tolist()], dtype=np.int64)

    def online_rows(self) -> NDArray[np.intp]:
        """Rows of the nodes in a session now."""
        return np.flatnonzero(~np.isnan(self._session_start[:len(self._ids)]))

    def session_start(self, node_id: str) -> float | None:
        """When the node's running session started; None: it is in none."""
        start = self._session_start[self.index_of(node_id)]
        return None if np.isnan(start) else float(start)

    def uptime(self, node_id: str, now: float) -> float | None:
        start = self.session_start(node_id)
        return None if start is None else max(now - start, 0.0)

    def histories(self) -> list[tuple[list[float], list[bool]]]:
        return [(list(h.sessions), list(h.abrupt)) for h in self._history]

    def refit_prior(self, now: float) -> PopulationPrior:
        """Refit the population prior from every node's sessions, running ones censored at
        `now`, and rebuild the per-node sums under the new shape; also re-pool the
        population's recent departure rate (`refit_departure_rate`)."""
        histories: list[tuple[list[float], list[bool]]] = []
        for row, history in enumerate(self._history):
            sessions, abrupt = list(history.sessions), list(history.abrupt)
            start = self._session_start[row]
            if not np.isnan(start) and now > start:
                sessions.append(now - float(start))
                abrupt.append(False)
            histories.append((sessions, abrupt))
        self.prior = fit_population_prior(histories)
        for row, history in enumerate(self._history):
            self._exposure[row] = sum(t**self.prior.shape for t in history.sessions)
        self.refit_departure_rate(now)
        return self.prior

    # ----- telemetry -----------------------------------------------------------------
    def _windows(self, row: int) -> _Telemetry:
        telemetry = self._telemetry.get(row)
        if telemetry is None:
            telemetry = self._telemetry[row] = _Telemetry.empty(self.config)
        return telemetry

    def record_probe(self, node_id: str, sample: ProbeSample) -> None:
        if sample.rtt_ms is not None and not sample.rtt_ms >= 0:
            raise ValueError("rtt_ms must be >= 0")
        row = self.index_of(node_id)
        w = self._windows(row)
        lost = sample.rtt_ms is None
        for window in (w.loss_short, w.loss_long):
            window.push(sample.at, 1.0 if lost else 0.0)
        if sample.rtt_ms is not None:
            for window in (w.rtt_short, w.rtt_medium, w.rtt_long):
                window.push(sample.at, sample.rtt_ms)
        self._refresh_latency(row, w)

    def _jitter(self, window: _Window) -> float:
        """The spread of the node's round trips over `window`; 0 below `min_jitter_samples`."""
        if window.count < self.config.min_jitter_samples:
            return 0.0
        return window.spread()

    def _refresh_latency(self, row: int, w: _Telemetry) -> None:
        cfg = self.config
        short_jitter = self._jitter(w.rtt_short)
        medium_jitter = self._jitter(w.rtt_medium)
        self._jitter_now[row] = short_jitter
        trend_known = (w.rtt_short.count >= cfg.min_trend_samples
                       and w.rtt_medium.count >= cfg.min_trend_samples)
        # The two windows are centred half a window back; the slope joins those centres.
        centre_gap = (cfg.medium_window_s - cfg.short_window_s) / 2.0
        self._jitter_slope[row] = ((short_jitter - medium_jitter) / centre_gap
                                   if trend_known else 0.0)
        self._loss_now[row] = w.loss_short.mean()

    def record_upload(self, node_id: str, sample: UploadSample) -> None:
        if sample.mbps < 0:
            raise ValueError("mbps must be >= 0")
        self._windows(self.index_of(node_id)).upload_long.push(sample.at, sample.mbps)

    def record_heartbeat(self, node_id: str, at: float) -> None:
        w = self._windows(self.index_of(node_id))
        if w.last_heartbeat is not None and at > w.last_heartbeat:
            w.heartbeat_gaps.push(at, at - w.last_heartbeat)
        w.last_heartbeat = at if w.last_heartbeat is None else max(at, w.last_heartbeat)

    def record_gpu(self, node_id: str, sample: GpuSample) -> None:
        """Thermal throttling slows the task (a throttled clock stretches the time it stays
        exposed to departure); a temperature close to slowdown risks a crash (factor).
        Idle down-clocking without a thermal reason is not a slowdown."""
        if not (sample.max_sm_clock_mhz > 0 and sample.sm_clock_mhz >= 0):
            raise ValueError("GPU clocks must be positive")
        row = self.index_of(node_id)
        w = self._windows(row)
        cfg = self.config
        throttled = bool(sample.throttle_reasons & THERMAL_THROTTLE_MASK)
        ratio = min(1.0, max(1.0 / cfg.max_slowdown,
                             sample.sm_clock_mhz / sample.max_sm_clock_mhz)) if throttled else 1.0
        w.temp_short.push(sample.at, sample.temperature_c)
        w.temp_long.push(sample.at, sample.temperature_c)
        w.throttled_short.push(sample.at, 1.0 if throttled else 0.0)
        w.throttled_long.push(sample.at, 1.0 if throttled else 0.0)
        w.clock_ratio_short.push(sample.at, ratio)
        headroom = cfg.slowdown_temp_c - w.temp_short.mean()
        self._thermal[row] = min(1.0, max(cfg.thermal_floor, headroom / cfg.temp_margin_c))
        self._slowdown[row] = 1.0 / w.clock_ratio_short.mean()

    # ----- scoring -------------------------------------------------------------------
    def set_recalibrator(self, recalibrator: Recalibrator | None) -> None:
        self._recalibrator = recalibrator

    def _all_rows(self, rows: NDArray[np.intp] | None) -> NDArray[np.intp]:
        return np.arange(len(self._ids)) if rows is None else np.asarray(rows, dtype=np.intp)

    def _uptimes(self, r: NDArray[np.intp], now: float
                 ) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """(online?, seconds into the running session; 0 when offline) per row."""
        start = self._session_start[r]
        online = ~np.isnan(start)
        return online, np.where(online, np.maximum(now - np.where(online, start, now), 0.0), 0.0)

    def survival_many(self, rows: NDArray[np.intp] | None, now: float, duration_s: Durations
                      ) -> NDArray[np.float64]:
        """P(session lasts `duration_s` more | up for its current uptime); 0 when offline.
        `duration_s` is one duration for all rows or one per row (e.g. work / node speed)."""
        if np.any(np.asarray(duration_s) < 0) or np.any(np.isnan(duration_s)):
            raise ValueError("duration_s must be >= 0")
        r = self._all_rows(rows)
        k = self.prior.shape
        a = self.prior.rate_a + self._departures[r]
        b = self.prior.rate_b + self._exposure[r]
        online, uptime = self._uptimes(r, now)
        survival = ((b + uptime**k) / (b + (uptime + duration_s) ** k)) ** a
        return np.where(online, survival, 0.0)

    def record_survival_many(self, rows: NDArray[np.intp], now: float, duration_s: Durations
                             ) -> NDArray[np.float64]:
        """P(a fresh session lasts `duration_s`) under the node's posterior, the running
        session counted as censored: its track record, not where it stands in this session
        (the population prior for a new node)."""
        r = np.asarray(rows, dtype=np.intp)
        k = self.prior.shape
        _, uptime = self._uptimes(r, now)
        a = self.prior.rate_a + self._departures[r]
        b = self.prior.rate_b + self._exposure[r] + uptime**k
        return (b / (b + np.asarray(duration_s, dtype=np.float64) ** k)) ** a

    def _recent_rate_posterior(self, r: NDArray[np.intp], now: float
                               ) -> tuple[NDArray[np.float64], ...]:
        """(weighted abrupt departures, weighted online seconds with the running session,
        weighted online seconds of finished sessions) as of `now`."""
        tau = self.config.departure_window_s
        decay = np.exp(-np.maximum(now - self._recent_at[r], 0.0) / tau)
        _, running = self._uptimes(r, now)
        finished = self._recent_exposure[r] * decay
        return self._recent_departures[r] * decay, finished - tau * np.expm1(-running / tau), \
            finished

    def departure_survival_many(self, rows: NDArray[np.intp] | None, now: float,
                                duration_s: Durations) -> NDArray[np.float64]:
        """P(no DEAD verdict during `duration_s`) under the node's recent constant departure
        rate, Gamma-Poisson: (beta / (beta + T)) ** alpha. Online or not (offline nodes
        score 0 through the session factor)."""
        if np.any(np.asarray(duration_s) < 0) or np.any(np.isnan(duration_s)):
            raise ValueError("duration_s must be >= 0")
        return self._departure_terms(self._all_rows(rows), now, duration_s)[0]

    def _departure_terms(self, r: NDArray[np.intp], now: float, duration_s: Durations
                         ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(R(T), its pooling weight). The weight is departure_weight times the share of
        evidence behind R that finished sessions bring, finished / (prior + finished): with
        no recent history R only repeats its prior and the session model speaks alone. The
        running session is left out of the weight so that RS still rises with uptime."""
        departures, exposure, finished = self._recent_rate_posterior(r, now)
        beta0 = self.config.departure_prior_exposure_s
        alpha = self.departure_rate_prior * beta0 + departures
        survival = np.exp(-alpha * np.log1p(np.asarray(duration_s, dtype=np.float64)
                                            / (beta0 + exposure)))
        return survival, self.config.departure_weight * finished / (beta0 + finished)

    def recent_departure_rate_many(self, rows: NDArray[np.intp] | None, now: float
                                   ) -> NDArray[np.float64]:
        """Posterior mean departures per online second (lambda_hat) over the window."""
        r = self._all_rows(rows)
        departures, exposure, _ = self._recent_rate_posterior(r, now)
        beta0 = self.config.departure_prior_exposure_s
        return (self.departure_rate_prior * beta0 + departures) / (beta0 + exposure)

    def refit_departure_rate(self, now: float) -> float:
        """Pool every node's weighted departures and online time into the population rate
        that new and quiet nodes are shrunk to; returns it (per online second)."""
        departures, exposure, _ = self._recent_rate_posterior(self._all_rows(None), now)
        total_exposure = float(exposure.sum())
        if total_exposure > 0.0:
            self.departure_rate_prior = float(departures.sum()) / total_exposure
        return self.departure_rate_prior

    def _factors(self, r: NDArray[np.intp], now: float, duration_s: Durations
                 ) -> tuple[NDArray[np.float64], ...]:
        cfg = self.config
        stretched = np.asarray(duration_s, dtype=np.float64) * self._slowdown[r]
        survival = self.survival_many(r, now, stretched)
        departures, weight = self._departure_terms(r, now, stretched)
        alpha0 = cfg.pass_prior_mean * cfg.pass_prior_strength
        pass_rate = (alpha0 + self._passes[r]) / (cfg.pass_prior_strength + self._passes[r]
                                                  + self._fails[r])
        horizon = np.minimum(stretched, cfg.trend_horizon_cap_s)
        projected = np.maximum(self._jitter_now[r] + self._jitter_slope[r] * horizon, 0.0)
        loss = np.nan_to_num(self._loss_now[r], nan=0.0)
        stability = (np.exp(-np.maximum(projected - cfg.jitter_ok_ms, 0.0) / cfg.jitter_scale_ms)
                     * np.exp(-np.maximum(loss - cfg.loss_ok, 0.0) / cfg.loss_scale))
        return survival ** (1.0 - weight) * departures ** weight, departures, pass_rate, \
            stability, self._thermal[r]

    def raw_score_many(self, rows: NDArray[np.intp] | None, now: float, duration_s: Durations
                       ) -> NDArray[np.float64]:
        """The product of the factors, before recalibration: what a recalibrator
        learns from (record it with the outcome)."""
        r = self._all_rows(rows)
        pooled, _, pass_rate, stability, thermal = self._factors(r, now, duration_s)
        return np.clip(pooled * pass_rate * stability * thermal, 0.0, 1.0)

    def recalibrate(self, raw: NDArray[np.float64]) -> NDArray[np.float64]:
        if self._recalibrator is None:
            return raw
        return np.clip(self._recalibrator(raw), 0.0, 1.0)

    def score_many(self, rows: NDArray[np.intp] | None, now: float, duration_s: Durations
                   ) -> NDArray[np.float64]:
        """RS for many rows at once (None: every node); offline nodes score 0."""
        return self.recalibrate(self.raw_score_many(rows, now, duration_s))

    def score(self, node_id: str, now: float, duration_s: float) -> float:
        return float(self.score_many(np.array([self.index_of(node_id)]), now, duration_s)[0])

    def components(self, node_id: str, now: float, duration_s: float) -> RsComponents:
        r = np.array([self.index_of(node_id)])
        pooled, departures, pass_rate, stability, thermal = (
            float(x[0]) for x in self._factors(r, now, duration_s))
        raw = min(max(pooled * pass_rate * stability * thermal, 0.0), 1.0)
        calibrated = self.score(node_id, now, duration_s)
        survival = float(self.survival_many(r, now, duration_s * float(self._slowdown[r[0]]))[0])
        return RsComponents(survival, pass_rate, stability, thermal, raw, calibrated,
                            float(self._slowdown[r[0]]), departures, pooled)

    def predicted_mtbf_s(self, node_id: str, now: float, horizon_s: float) -> float:
        """Mean time between failures of the constant hazard that gives the same survival
        (session model adjusted by the recent departure rate) over `horizon_s`:
        horizon / -ln S. The input Young/Daly expects: any DEAD verdict, a revoked lease
        included, loses the work since the last checkpoint."""
        if horizon_s <= 0:
            raise ValueError("horizon_s must be > 0")
        row = np.array([self.index_of(node_id)])
        departures, weight = self._departure_terms(row, now, horizon_s)
        session = self.survival_many(row, now, horizon_s)
        survival = float((session ** (1.0 - weight) * departures ** weight)[0])
        if survival <= 0.0:
            return 0.0
        if survival >= 1.0:
            return math.inf
        return horizon_s / -math.log(survival)

    # ----- evidence ------------------------------------------------------------------
    def summary(self, node_id: str, now: float) -> WindowSummary:
        """The node's long-window evidence as of `now`, whose digest is committed with its
        epoch score (`score_commitment`)."""
        row = self.index_of(node_id)
        history = self._history[row]
        w = self._telemetry.get(row)
        if w is not None:
            for window in (w.rtt_long, w.loss_long, w.upload_long, w.temp_long,
                           w.throttled_long, w.heartbeat_gaps):
                window.evict(now)

        def scaled(value: float, factor: float) -> int:
            return 0 if math.isnan(value) else round(value * factor)

        uptime = self.uptime(node_id, now)
        return WindowSummary(
            node_id=node_id,
            window_end_s=max(round(now), 0),
            probes=w.loss_long.count if w else 0,
            probes_lost=round(w.loss_long.total) if w else 0,
            rtt_mean_us=scaled(w.rtt_long.mean(), 1000) if w else 0,
            jitter_us=scaled(w.rtt_long.spread(), 1000) if w else 0,
            max_heartbeat_gap_ms=scaled(w.heartbeat_gaps.maximum(), 1000) if w else 0,
            upload_kbps=scaled(w.upload_long.mean(), 1000) if w else 0,
            temperature_mc=scaled(w.temp_long.mean(), 1000) if w else 0,
            throttled_bps=scaled(w.throttled_long.mean(), 10_000) if w else 0,
            sessions=len(history.sessions),
            abrupt_departures=sum(history.abrupt),
            uptime_s=0 if uptime is None else round(uptime),
            tasks_completed=history.tasks_completed,
            tasks_failed=history.tasks_failed,
        )
