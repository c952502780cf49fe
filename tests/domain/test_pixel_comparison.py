"""The pure pixel comparison: the tolerance by render environment, a window's pixels against
the checker's, field by field, and a checked window's verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.domain.pixel_comparison import (
    CROSS_KERNEL,
    EXACT,
    Comparison,
    LeafPixels,
    RenderEnv,
    Tolerance,
    WindowVerdict,
    compare,
    compare_results,
    compare_window,
    tolerance_for,
)
from orchestrator.domain.verification import Leaf, LeafPart, pixel_digest


def test_comparison_exact_within_a_kernel_and_tolerant_across_kernels_only() -> None:
    avx = RenderEnv("5.0.1 abc", "avx2")
    assert tolerance_for(avx, RenderEnv("5.0.1 abc", "avx2")) is EXACT
    assert tolerance_for(avx, RenderEnv("5.0.1 abc", "sse42")) is CROSS_KERNEL
    assert tolerance_for(avx, RenderEnv("4.2.0 def", "avx2")) is None
    honest = np.random.default_rng(1).random((6, 8, 4), dtype=np.float32)
    lazy_in_the_sky = honest.copy()
    lazy_in_the_sky[0, 0, 0] += np.float32(1e-7)
    assert compare(honest, honest.copy(), EXACT).match
    assert not compare(honest, lazy_in_the_sky, EXACT).match  # only an exact check sees it
    assert compare(honest, lazy_in_the_sky, CROSS_KERNEL).match
    noisy = honest + np.float32(0.03)
    assert not compare(honest, noisy, CROSS_KERNEL).match
    assert not compare(honest, honest[:3], EXACT).match
    png = (honest * 255).astype(np.uint8)
    assert compare(png, png.copy(), CROSS_KERNEL).match


# ----- comparisons, field by field ---------------------------------------------------------
def pixels(*rows: list[list[float]]) -> np.ndarray:
    return np.array(rows, dtype=np.float32)


def test_a_window_of_another_shape_or_an_empty_one_is_judged_before_any_pixel() -> None:
    a = np.zeros((2, 2, 4), dtype=np.float32)
    assert compare(a, np.zeros((2, 3, 4), dtype=np.float32), EXACT) == Comparison(
        False, math.inf, 1.0, "shape (2, 2, 4) != (2, 3, 4)")
    empty = np.zeros((0, 2, 4), dtype=np.float32)
    assert compare(empty, empty.copy(), EXACT) == Comparison(True, 0.0, 0.0, "empty window")
    # One pixel of one channel is a window, not an empty one.
    assert compare(pixels([[0.5]]), pixels([[0.25]]), EXACT) == Comparison(
        False, 0.25, 1.0, "not bit-identical")


def test_an_exact_comparison_counts_each_pixel_by_its_worst_channel() -> None:
    """2 x 3 pixels of 4 channels; one pixel differs in two channels (0.125 and 0.5)."""
    claimed = np.zeros((2, 3, 4), dtype=np.float32)
    checked = claimed.copy()
    assert compare(claimed, checked, EXACT) == Comparison(True, 0.0, 0.0, "bit-identical")
    checked[1, 2, 0], checked[1, 2, 3] = 0.125, 0.5
    assert compare(claimed, checked, EXACT) == Comparison(False, 0.5, 1 / 6,
                                                          "not bit-identical")


def test_a_tolerant_comparison_allows_its_share_of_pixels_over_up_to_the_hard_limit() -> None:
    """Four one-channel pixels differing by 0, 0.25, 0.25 and 0.5: only 0.5 is over 0.25."""
    tolerance = Tolerance(max_abs=0.25, max_share=0.25, hard_abs=0.5)
    claimed = pixels([[0.0], [0.25]], [[0.25], [0.5]])
    checked = np.zeros_like(claimed)
    assert compare(claimed, checked, tolerance) == Comparison(
        True, 0.5, 0.25, "max 0.5, 25.000% over 0.25")
    stricter_share = Tolerance(max_abs=0.25, max_share=0.2, hard_abs=0.5)
    assert not compare(claimed, checked, stricter_share).match
    stricter_hard = Tolerance(max_abs=0.25, max_share=0.25, hard_abs=0.49)
    assert not compare(claimed, checked, stricter_hard).match


def test_eight_bit_pixels_are_compared_on_the_zero_to_one_scale() -> None:
    claimed = np.array([[[255, 0, 0]]], dtype=np.uint8)
    checked = np.array([[[0, 0, 51]]], dtype=np.uint8)
    assert compare(claimed, checked, EXACT) == Comparison(False, 1.0, 1.0, "not bit-identical")
    assert compare(checked, np.zeros_like(checked), CROSS_KERNEL).max_abs == pytest.approx(0.2)


# ----- a checked window ----------------------------------------------------------------------
FRAME = np.zeros((2, 2, 4), dtype=np.float32)
CHUNK = np.full((2, 2, 4), 0.5, dtype=np.float32)
FRAME_LEAF = Leaf(LeafPart.FRAME, 3, 0, 0, pixel_digest(FRAME))
CHUNK_LEAF = Leaf(LeafPart.CHUNK, 3, 16, 8, pixel_digest(CHUNK))


def test_a_window_matches_when_every_leaf_does_each_named_by_its_part() -> None:
    same = compare_window([(FRAME_LEAF, LeafPixels(FRAME, FRAME.copy())),
                           (CHUNK_LEAF, LeafPixels(CHUNK, CHUNK.copy()))], EXACT)
    assert same.matched and same.tolerance is EXACT
    assert same.comparisons == {"frame": Comparison(True, 0.0, 0.0, "bit-identical"),
                                "chunk 16+8": Comparison(True, 0.0, 0.0, "bit-identical")}
    off = CHUNK.copy()
    off[0, 0, 0] = 0.75
    one_off = compare_window([(FRAME_LEAF, LeafPixels(FRAME, FRAME.copy())),
                              (CHUNK_LEAF, LeafPixels(CHUNK, off))], EXACT)
    assert not one_off.matched
    assert one_off.comparisons["frame"].match
    assert one_off.comparisons["chunk 16+8"] == Comparison(False, 0.25, 0.25,
                                                           "not bit-identical")


def test_a_leaf_that_did_not_decode_or_that_the_checker_did_not_send_does_not_match() -> None:
    verdict = compare_window([(FRAME_LEAF, "not an image"),
                              (CHUNK_LEAF, LeafPixels(CHUNK, None))], CROSS_KERNEL)
    assert not verdict.matched and verdict.tolerance is CROSS_KERNEL
    assert verdict.comparisons == {
        "frame": Comparison(False, math.inf, 1.0, "not an image"),
        "chunk 16+8": Comparison(False, math.inf, 1.0, "the checker sent none")}


def test_pixels_of_the_node_that_no_longer_hash_to_their_leaf_are_a_broken_store() -> None:
    with pytest.raises(RuntimeError, match=r"stored chunk 16\+8 no longer hashes"):
        compare_window([(CHUNK_LEAF, LeafPixels(CHUNK + np.float32(1), CHUNK))], EXACT)
    with pytest.raises(RuntimeError, match="stored frame no longer hashes"):
        compare_window([(FRAME_LEAF, LeafPixels(CHUNK, None))], EXACT)


def test_a_result_that_is_not_a_render_is_compared_by_its_file_hash() -> None:
    same = compare_results("ab" * 32, "ab" * 32, EXACT)
    assert same.matched and same.tolerance is EXACT
    assert same.comparisons == {"result": Comparison(True, 0.0, 0.0, "same bytes")}
    for other in ("cd" * 32, None):
        verdict = compare_results("ab" * 32, other, EXACT)
        assert not verdict.matched
        assert verdict.comparisons == {"result": Comparison(False, 1.0, 1.0, "other bytes")}


def test_the_verdict_keeps_each_comparison_with_an_infinite_difference_as_null() -> None:
    comparisons = {"frame": Comparison(False, math.inf, 1.0, "not an image"),
                   "chunk 0+4": Comparison(True, 0.25, 0.5, "max 0.25")}
    assert WindowVerdict(comparisons, CROSS_KERNEL).as_json() == {
        "frame": {"match": False, "max_abs": None, "share_over": 1.0,
                  "detail": "not an image", "exact": False},
        "chunk 0+4": {"match": True, "max_abs": 0.25, "share_over": 0.5,
                      "detail": "max 0.25", "exact": False}}
    assert all(entry["exact"] is True
               for entry in WindowVerdict(comparisons, EXACT).as_json().values())
