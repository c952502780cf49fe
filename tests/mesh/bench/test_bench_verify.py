"""`mesh bench verify` at toy scale: the documented keys, every cheater's windows flagged by
real pixel comparisons, no honest window flagged on either kernel (the full-scale numbers come
from `mesh bench verify --json`, docs/verification.md)."""

from __future__ import annotations

import pytest

from mesh.bench import verify

pytestmark = [pytest.mark.slow]


def test_bench_verify_catchesEveryCheater_andRejectsNoHonestWindow() -> None:
    result = verify.run(frames=1, samples=8, chunk_samples=4, resolution=(32, 24), tasks=100,
                        trials=200, policies=("fixed-5%", "adaptive"))

    assert set(result["policies"]) == {"fixed-5%", "adaptive"}
    for numbers in result["policies"].values():
        assert {"detection_rate", "overhead", "false_rejection_rate",
                "detection_by_cheater"} <= set(numbers)
        assert numbers["false_rejection_rate"] == 0.0
        assert set(numbers["detection_by_cheater"]) == {"lazy", "stale", "tamper_10pct",
                                                        "sleeper"}
        assert 0.0 < numbers["overhead"] < 1.0
    flagged = result["pool"]["windows_flagged"]
    assert flagged["honest"] == flagged["honest_sse42"] == 0.0
    assert flagged["lazy"] == flagged["tamper"] == 1.0 and flagged["stale"] > 0.5
    assert result["policies"]["adaptive"]["detection_by_cheater"]["lazy"] == 1.0
    assert result["pool"]["cross_kernel"]["share_over_0.016"] == 0.0
