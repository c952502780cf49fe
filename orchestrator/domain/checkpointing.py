"""Adaptive checkpoint intervals (Young 1974; Daly 2006).

Checkpointing every tau seconds costs C each time; a failure loses on average
tau/2 of work. Minimising the expected waste for a mean time between failures M
gives Young's tau = sqrt(2 C M); Daly's higher-order correction is better when
C is not small against M. M comes from the node's own predicted hazard
(`ReliabilityBook.predicted_mtbf_s`), C from its measured checkpoint times, so a
flaky node checkpoints often and a stable one wastes little time on it. The
interval is bounded: below `min_s` checkpoint overhead dominates whatever the
hazard says, above `max_s` one unexpected failure loses too much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


def _check(cost_s: float, mtbf_s: float) -> None:
    if not cost_s > 0:
        raise ValueError("checkpoint cost must be > 0 seconds")
    if not mtbf_s > 0:
        raise ValueError("MTBF must be > 0 seconds")


def young_interval(cost_s: float, mtbf_s: float) -> float:
    _check(cost_s, mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s)


def daly_interval(cost_s: float, mtbf_s: float) -> float:
    """Daly's (2006) higher-order estimate; tends to Young's when cost << MTBF."""
    _check(cost_s, mtbf_s)
    if cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = cost_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - cost_s


@dataclass(frozen=True, slots=True)
class CheckpointPolicy:
    min_s: float = 30.0
    max_s: float = 3600.0
    method: Literal["young", "daly"] = "young"

    def __post_init__(self) -> None:
        if not 0 < self.min_s <= self.max_s:
            raise ValueError("checkpoint bounds need 0 < min_s <= max_s")

    def interval(self, cost_s: float, mtbf_s: float) -> float:
        """Seconds between checkpoints; an infinite MTBF (no predicted failure) gives max_s."""
        if math.isinf(mtbf_s):
            _check(cost_s, 1.0)
            return self.max_s
        formula = young_interval if self.method == "young" else daly_interval
        return min(self.max_s, max(self.min_s, formula(cost_s, mtbf_s)))


@dataclass(slots=True)
class CheckpointCost:
    """EWMA of a node's measured checkpoint seconds; disks and uploads drift, so recent
    measurements weigh more. Starts at `initial_s` until the first measurement."""

    initial_s: float = 5.0
    alpha: float = 0.3
    observations: int = 0
    _value: float = 0.0

    @property
    def value(self) -> float:
        return self._value if self.observations else self.initial_s

    def observe(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError("a measured checkpoint takes > 0 seconds")
        self._value = seconds if self.observations == 0 else (
            self.alpha * seconds + (1.0 - self.alpha) * self._value)
        self.observations += 1


def plan_chunks(samples: int, chunk_samples: int) -> list[tuple[int, int]]:
    """(offset, length) of each chunk; the last one takes the remainder (Cycles clamps an
    offset + length past the total silently, so never ask for more)."""
    if samples < 1 or chunk_samples < 1:
        raise ValueError("samples and chunk_samples must be at least 1")
    return [(offset, min(chunk_samples, samples - offset))
            for offset in range(0, samples, chunk_samples)]
