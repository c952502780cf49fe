"""Is the Reliability Score a probability? Brier score, ECE, reliability diagrams, recalibration.

RS is sold as P(node finishes the task and passes verification), and the
collateral and expected-cost ranking multiply it into money; a score that says
0.9 where 0.7 of nodes finish prices risk wrong. These functions measure that
gap on observed outcomes, and the recalibrators map the raw score onto observed
frequencies when the raw product of factors is off (the latency and thermal
factors are heuristics, not fitted probabilities).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import minimize

Recalibrator = Callable[[NDArray[np.float64]], NDArray[np.float64]]
"""Maps raw scores in [0, 1] to calibrated probabilities, elementwise and monotone."""


def _validated(predicted: ArrayLike, observed: ArrayLike) -> tuple[NDArray[np.float64],
                                                                  NDArray[np.float64]]:
    p = np.asarray(predicted, dtype=np.float64)
    y = np.asarray(observed, dtype=np.float64)
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError(f"predicted {p.shape} and observed {y.shape} must be equal 1-d shapes")
    if p.size == 0:
        raise ValueError("calibration needs at least one outcome")
    if np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
        raise ValueError("predicted probabilities must lie in [0, 1]")
    if np.any((y != 0) & (y != 1)):
        raise ValueError("observed outcomes must be 0 or 1")
    return p, y


def brier_score(predicted: ArrayLike, observed: ArrayLike) -> float:
    """Mean squared error of the probabilities: 0 is perfect, 0.25 is a coin flip at 0.5."""
    p, y = _validated(predicted, observed)
    return float(np.mean((p - y) ** 2))


@dataclass(frozen=True)
class ReliabilityDiagram:
    """Per equal-width bin of predicted probability: what was predicted and what happened."""

    lower: NDArray[np.float64]
    upper: NDArray[np.float64]
    mean_predicted: NDArray[np.float64]  # NaN where the bin is empty
    observed_rate: NDArray[np.float64]  # NaN where the bin is empty
    count: NDArray[np.int64]


def reliability_diagram(predicted: ArrayLike, observed: ArrayLike, bins: int = 10
                        ) -> ReliabilityDiagram:
    p, y = _validated(predicted, observed)
    if bins < 1:
        raise ValueError("bins must be >= 1")
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, bins - 1)
    count = np.bincount(index, minlength=bins).astype(np.int64)
    sum_p = np.bincount(index, weights=p, minlength=bins)
    sum_y = np.bincount(index, weights=y, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.where(count > 0, sum_p / np.maximum(count, 1), np.nan)
        rate = np.where(count > 0, sum_y / np.maximum(count, 1), np.nan)
    return ReliabilityDiagram(edges[:-1], edges[1:], mean_p, rate, count)


def expected_calibration_error(predicted: ArrayLike, observed: ArrayLike, bins: int = 10
                               ) -> float:
    """Count-weighted mean |predicted - observed| over equal-width bins (Guo et al. 2017)."""
    diagram = reliability_diagram(predicted, observed, bins)
    filled = diagram.count > 0
    gaps = np.abs(diagram.mean_predicted[filled] - diagram.observed_rate[filled])
    return float(np.sum(gaps * diagram.count[filled]) / np.sum(diagram.count))


@dataclass(frozen=True)
class IsotonicCalibrator:
    """Monotone step map fitted by pool-adjacent-violators; makes no shape assumption,
    so it suits the product of heuristic factors. Interpolates linearly between steps."""

    knots_x: NDArray[np.float64]
    knots_y: NDArray[np.float64]

    @classmethod
    def fit(cls, predicted: ArrayLike, observed: ArrayLike) -> IsotonicCalibrator:
        p, y = _validated(predicted, observed)
        order = np.argsort(p, kind="stable")
        xs, ys = p[order], y[order]
        # Pool-adjacent-violators over blocks (sum of y, weight, mean of x).
        block_y: list[float] = []
        block_w: list[float] = []
        block_x: list[float] = []
        for x_value, y_value in zip(xs.tolist(), ys.tolist(), strict=True):
            block_y.append(y_value)
            block_w.append(1.0)
            block_x.append(x_value)
            while len(block_y) > 1 and block_y[-2] / block_w[-2] >= block_y[-1] / block_w[-1]:
                y_last, w_last, x_last = block_y.pop(), block_w.pop(), block_x.pop()
                total_w = block_w[-1] + w_last
                block_x[-1] = (block_x[-1] * block_w[-1] + x_last * w_last) / total_w
                block_y[-1] += y_last
                block_w[-1] = total_w
        knots_x = np.asarray(block_x)
        knots_y = np.asarray(block_y) / np.asarray(block_w)
        return cls(knots_x, knots_y)

    def __call__(self, raw: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.interp(raw, self.knots_x, self.knots_y)


@dataclass(frozen=True)
class PlattCalibrator:
    """sigmoid(slope * logit(p) + intercept): two parameters, so it needs far fewer outcomes
    than isotonic regression and cannot overfit a small sample."""

    slope: float
    intercept: float

    @classmethod
    def fit(cls, predicted: ArrayLike, observed: ArrayLike) -> PlattCalibrator:
        p, y = _validated(predicted, observed)
        logits = _logit(p)

        def negative_log_likelihood(params: NDArray[np.float64]) -> float:
            z = params[0] * logits + params[1]
            # log(1 + e^z) - y z, written stably
            return float(np.sum(np.logaddexp(0.0, z) - y * z))

        result = minimize(negative_log_likelihood, np.array([1.0, 0.0]), method="BFGS")
        return cls(float(result.x[0]), float(result.x[1]))

    def __call__(self, raw: NDArray[np.float64]) -> NDArray[np.float64]:
        z = self.slope * _logit(np.asarray(raw, dtype=np.float64)) + self.intercept
        return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)


def _logit(p: NDArray[np.float64]) -> NDArray[np.float64]:
    clipped = np.clip(p, 1e-6, 1 - 1e-6)
    return np.asarray(np.log(clipped) - np.log1p(-clipped), dtype=np.float64)


class OnlineRecalibrator:
    """Learns raw RS -> observed completion rate from outcomes as they arrive, so the
    heuristic factors are corrected by the grid's own history. The identity until
    `min_outcomes` are seen, then a Platt map refitted every `refit_every` outcomes on
    the latest `window`. Pass it to `ReliabilityBook.set_recalibrator` once; call
    `observe(raw_rs_at_placement, finished)` when each attempt ends."""

    def __init__(self, min_outcomes: int = 500, refit_every: int = 1_000, window: int = 20_000
                 ) -> None:
        if not 0 < min_outcomes <= window or refit_every < 1:
            raise ValueError("need 0 < min_outcomes <= window and refit_every >= 1")
        self.min_outcomes = min_outcomes
        self.refit_every = refit_every
        self._raw: deque[float] = deque(maxlen=window)
        self._finished: deque[float] = deque(maxlen=window)
        self._since_fit = 0
        self._finished_in_window = 0.0
        self.fitted: PlattCalibrator | None = None

    def observe(self, raw: float, finished: bool) -> None:
        if not 0.0 <= raw <= 1.0:
            raise ValueError(f"raw score {raw} outside [0, 1]")
        if len(self._finished) == self._finished.maxlen:
            self._finished_in_window -= self._finished[0]  # about to fall out of the window
        self._raw.append(raw)
        self._finished.append(1.0 if finished else 0.0)
        self._finished_in_window += 1.0 if finished else 0.0
        self._since_fit += 1
        enough = len(self._raw) >= self.min_outcomes
        outcomes_vary = 0.0 < self._finished_in_window < len(self._finished)
        due = self.fitted is None or self._since_fit >= self.refit_every
        if enough and outcomes_vary and due:
            self.fitted = PlattCalibrator.fit(np.fromiter(self._raw, float),
                                              np.fromiter(self._finished, float))
            self._since_fit = 0

    def __call__(self, raw: NDArray[np.float64]) -> NDArray[np.float64]:
        return raw if self.fitted is None else self.fitted(raw)
