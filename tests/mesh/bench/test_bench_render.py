"""`mesh bench render` at toy scale: the documented keys, identical pixels, rework of at most
one chunk (the full-scale numbers come from `mesh bench render --json`)."""

from __future__ import annotations

import pytest

from mesh.bench import render

pytestmark = [pytest.mark.anvil, pytest.mark.slow]


def test_bench_render_gridFramesEqualDirectOnes_andAKillCostsAtMostOneChunk() -> None:
    result = render.run(frames=2, samples=48, chunk_samples=12, resolution=(48, 36))

    assert {"frames", "direct_s", "grid_s", "grid_overhead", "pixels_identical",
            "max_rework_s_after_kill", "chunk_s"} <= set(result)
    assert result["frames"] == 2 and result["pixels_identical"] is True
    assert result["direct_s"] > 0 and result["grid_s"] > 0
    kept = result["chunks_resumed_from_checkpoint"]
    assert kept >= 2 and result["chunks_redone_after_kill"] == result["chunks"] - kept
