"""Risk-priced collateral: how much free stake a provider must lock to take one task.

    raw(V, p, D) = V * (base_bps + ceil(risk_bps * p)) / 10_000
                     * (1 + duration_weight * log2(1 + D / 3600))       (ceilinged to 1e-6)
    required     = min(cap, max(floor, ceil(raw)))        (integer arithmetic, exact)

V is the task's value (token units the customer pays), p the predicted
P(fail before done) = 1 - RS(node, D), D the expected duration in seconds.
Why this shape:
* The customer's loss when a node walks away is roughly the task's value
  (rework and delay), weighted by how likely that is, so the risk term is V * p.
  `base_bps` keeps even a near-certain node accountable (RS is an estimate).
* Longer tasks are more complex to reschedule and lose more partial work, but
  checkpoints bound that loss, hence the gentle log2 growth in hours.
* `floor` makes tiny tasks still worth disputing; `cap` keeps one task from
  swallowing a provider's whole stake, so honest large providers stay liquid.
Monotone: non-decreasing in V, p and D (every term is), and always within
[floor, cap]. The scheduler only places a task where the provider's free
on-chain stake (bonded - locked) covers `required`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

BPS = 10_000
PPM = 1_000_000


@dataclass(frozen=True, slots=True)
class CollateralPolicy:
    floor: int = 10**15  # token units; 0.001 of an 18-decimals token
    cap: int = 10**22  # token units; 10,000 tokens
    base_bps: int = 1_000  # 10 % of value locked even for a sure node
    risk_bps: int = 30_000  # plus 3x value times P(fail)
    duration_weight: float = 0.25  # extra share of raw per doubling of (1 + hours)

    def __post_init__(self) -> None:
        if not 0 <= self.floor <= self.cap:
            raise ValueError("collateral needs 0 <= floor <= cap")
        if self.base_bps < 0 or self.risk_bps < 0 or self.duration_weight < 0:
            raise ValueError("collateral rates must be >= 0")

    def _complexity_ppm(self, duration_s: float) -> int:
        if duration_s < 0 or math.isnan(duration_s):
            raise ValueError("duration_s must be >= 0")
        return math.ceil(PPM * (1.0 + self.duration_weight * math.log2(1.0 + duration_s / 3600.0)))

    def required(self, value: int, p_fail: float, duration_s: float) -> int:
        """Exact integer collateral: the amount to lock on chain."""
        if value < 0:
            raise ValueError("task value must be >= 0")
        if not 0.0 <= p_fail <= 1.0:
            raise ValueError(f"p_fail {p_fail} outside [0, 1]")
        rate_bps = self.base_bps + math.ceil(self.risk_bps * p_fail)
        numerator = value * rate_bps * self._complexity_ppm(duration_s)
        raw = -(-numerator // (BPS * PPM))  # ceiling division, exact for any token amount
        return min(self.cap, max(self.floor, raw))

    def required_many(self, value: int, p_fail: NDArray[np.float64], duration_s: float
                      ) -> NDArray[np.float64]:
        """The same formula over many candidates for one task, in float64: good for ranking
        and a first stake filter; lock `required(...)` (exact) for the node chosen."""
        if value < 0:
            raise ValueError("task value must be >= 0")
        p = np.asarray(p_fail, dtype=np.float64)
        if np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
            raise ValueError("p_fail must lie in [0, 1]")
        rate_bps = self.base_bps + np.ceil(self.risk_bps * p)
        raw = np.ceil(float(value) * rate_bps * (self._complexity_ppm(duration_s) / PPM) / BPS)
        return np.asarray(np.clip(raw, float(self.floor), float(self.cap)), dtype=np.float64)
