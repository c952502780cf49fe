"""The headline claims at a small, fixed scale (the churn benchmark measures them at full
scale): on one simulated world PLS wastes less GPU time than placing by `uptime` or at
`random`, slashes no honest node, and owes that to its ranking (the same PLS taking its
worst-ranked candidate instead loses)."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

import numpy as np
import pytest

from mesh.bench import churn
from orchestrator.domain.pls import PlsPolicy, RankedRows

# 300 nodes for two days and 60 jobs: many idle candidates per task, so the choice matters;
# about 3 s per seed for all four policies. A single day of 30 jobs is too small: there one
# unlucky job decides the waste ratio (seed 1: PLS 0.0091 against uptime 0.0077), while at two
# days PLS wastes less than both baselines on every seed from 1 to 5.
WORLD: dict[str, Any] = {"nodes": 300, "days": 2.0, "jobs": 60}
SEEDS = (1, 2, 3)


@cache
def policies(seed: int) -> dict[str, dict[str, Any]]:
    report: dict[str, dict[str, Any]] = churn.run(seed=seed, **WORLD)["policies"]
    return report


@pytest.mark.parametrize("seed", SEEDS)
def test_pls_wastes_less_than_uptime_and_random(seed: int) -> None:
    reports = policies(seed)
    waste = {name: reports[name]["waste_ratio"] for name in ("random", "uptime", "pls")}
    assert waste["pls"] < waste["uptime"], waste
    assert waste["pls"] < waste["random"], waste


@pytest.mark.parametrize("seed", SEEDS)
def test_pls_slashes_but_never_an_honest_node(seed: int) -> None:
    pls = policies(seed)["pls"]
    assert pls["slashes"] > 0  # the claim is not vacuous: it did slash
    assert pls["false_slash_rate"] == 0.0


def worst_first(ranked: RankedRows) -> RankedRows:
    """The same usable candidates in the opposite order."""
    return dataclasses.replace(ranked, **{
        f.name: value[::-1] for f in dataclasses.fields(ranked)
        if isinstance(value := getattr(ranked, f.name), np.ndarray)})


def test_pls_taking_its_worst_ranked_candidate_loses(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pooled over the seeds: on one world this small a few jobs can decide it (seed 1 alone:
    # 1.19x; seeds 2 and 3: 2.2x and 3.2x).
    best = sum(policies(seed)["pls"]["waste_ratio"] for seed in SEEDS)  # before the patch
    rank_rows = PlsPolicy.rank_rows

    def reversed_rank_rows(self: PlsPolicy, *args: Any, **kwargs: Any) -> RankedRows:
        return worst_first(rank_rows(self, *args, **kwargs))

    monkeypatch.setattr(PlsPolicy, "rank_rows", reversed_rank_rows)
    worst = sum(churn.run(seed=seed, **WORLD)["policies"]["pls"]["waste_ratio"]
                for seed in SEEDS)
    assert worst > 1.5 * best, (worst, best)
