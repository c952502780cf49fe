"""Comparison of a re-rendered window against the result a node committed to. Pure: decoded
pixels (numpy arrays) in, verdicts out; decoding stays with `protocol.images`.

* **Pixels, never file bytes.** Exact for the same Blender build and CPU kernel (Cycles on CPU
  is bit-reproducible there); across kernels a tolerance measured on real renders
  (docs/verification.md); across Blender builds no comparison is made (the service picks a
  checker that matches).
* **A window matches** when every leaf of it does (`domain.verification.Leaf`: the delivered
  frame and each sample chunk): the node's pixels, cut to the window's rows and still hashing
  to the committed leaf, against the checker's render of the window. A leaf whose pixels do
  not decode, or that the checker did not send, does not match.
* **A non-render result** (command output) matches when its file hash is the same.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from orchestrator.domain.verification import Leaf, LeafPart, pixel_digest


@dataclass(frozen=True, slots=True)
class RenderEnv:
    """What a result was rendered with; the checker is picked to match it."""

    blender: str  # version and build hash, e.g. "5.0.1 a3db93c5b259"
    kernel: str  # the Cycles CPU kernel: "avx2" or "sse42" (or a GPU device name)

    def as_json(self) -> dict[str, str]:
        return {"blender": self.blender, "kernel": self.kernel}

    @classmethod
    def from_json(cls, data: Mapping[str, object] | None) -> RenderEnv | None:
        if not data or "blender" not in data or "kernel" not in data:
            return None
        return cls(str(data["blender"]), str(data["kernel"]))


@dataclass(frozen=True, slots=True)
class Tolerance:
    """Pixels may differ by more than `max_abs` on at most `max_share` of them (Blender's own
    render tests: 0.016 on 1 % between devices); `max_abs == 0` with `max_share == 0` is
    bit-exact."""

    max_abs: float
    max_share: float
    hard_abs: float  # no pixel channel may ever differ by more than this

    @property
    def exact(self) -> bool:
        return self.max_abs == 0.0 and self.max_share == 0.0 and self.hard_abs == 0.0


EXACT = Tolerance(0.0, 0.0, 0.0)
CROSS_KERNEL = Tolerance(max_abs=0.016, max_share=0.001, hard_abs=0.05)
"""AVX2 against SSE4.2 on CPU, linear float chunks. The measured worst case is in
docs/verification.md; 8-bit frames get the same rule after dividing by 255."""


def tolerance_for(node: RenderEnv, checker: RenderEnv) -> Tolerance | None:
    """EXACT for the same build and kernel, CROSS_KERNEL for the same build on another
    kernel, None (do not compare: pick another checker) for another Blender build."""
    if node.blender != checker.blender:
        return None
    return EXACT if node.kernel == checker.kernel else CROSS_KERNEL


@dataclass(frozen=True, slots=True)
class Comparison:
    match: bool
    max_abs: float
    share_over: float  # of pixels whose largest channel difference exceeds the tolerance
    detail: str


def compare(claimed: np.ndarray, checked: np.ndarray, tolerance: Tolerance) -> Comparison:
    """Decoded pixels of the node's window against the checker's render of it."""
    if claimed.shape != checked.shape:
        return Comparison(False, math.inf, 1.0, f"shape {claimed.shape} != {checked.shape}")
    scale = 255.0 if claimed.dtype == np.uint8 else 1.0
    diff = np.abs(claimed.astype(np.float64) - checked.astype(np.float64)) / scale
    if diff.size == 0:
        return Comparison(True, 0.0, 0.0, "empty window")
    per_pixel = diff.reshape(-1, diff.shape[-1]).max(axis=1)
    max_abs = float(per_pixel.max())
    if tolerance.exact:
        share = float((per_pixel > 0).mean())
        return Comparison(max_abs == 0.0, max_abs, share,
                          "bit-identical" if max_abs == 0.0 else "not bit-identical")
    share = float((per_pixel > tolerance.max_abs).mean())
    ok = share <= tolerance.max_share and max_abs <= tolerance.hard_abs
    return Comparison(ok, max_abs, share, f"max {max_abs:.4g}, {share:.3%} over "
                                          f"{tolerance.max_abs}")


@dataclass(frozen=True, slots=True)
class LeafPixels:
    """One leaf of a checked window, decoded on both sides: the node's pixels (its committed
    image cut to the window's rows) and the checker's render of the window (None: the
    checker sent none)."""

    claimed: np.ndarray
    checked: np.ndarray | None


@dataclass(frozen=True, slots=True)
class WindowVerdict:
    """The comparisons of a checked window's leaves, by name, under `tolerance`."""

    comparisons: Mapping[str, Comparison]
    tolerance: Tolerance

    @property
    def matched(self) -> bool:
        return all(c.match for c in self.comparisons.values())

    def as_json(self) -> dict[str, dict[str, object]]:
        """The numbers kept with the check (an infinite difference as null)."""
        return {name: {"match": c.match, "max_abs": _finite(c.max_abs),
                       "share_over": c.share_over, "detail": c.detail,
                       "exact": self.tolerance.exact}
                for name, c in self.comparisons.items()}


def compare_window(pixels: Iterable[tuple[Leaf, LeafPixels | str]],
                   tolerance: Tolerance) -> WindowVerdict:
    """The render leaves of one window against the checker's render of it, each leaf with its
    decoded pixels or why they did not decode; by name ("frame", "chunk OFFSET+LENGTH"). A
    node's pixels that no longer hash to their leaf are a broken store, not a verdict:
    RuntimeError."""
    out: dict[str, Comparison] = {}
    for leaf, decoded in pixels:
        name = "frame" if leaf.part is LeafPart.FRAME else f"chunk {leaf.offset}+{leaf.length}"
        if isinstance(decoded, str):
            out[name] = Comparison(False, math.inf, 1.0, decoded)
            continue
        if pixel_digest(decoded.claimed) != leaf.digest:
            raise RuntimeError(f"stored {name} no longer hashes to its commitment's leaf")
        if decoded.checked is None:
            out[name] = Comparison(False, math.inf, 1.0, "the checker sent none")
        else:
            out[name] = compare(decoded.claimed, decoded.checked, tolerance)
    return WindowVerdict(out, tolerance)


def compare_results(claimed_sha256: str, checked_sha256: str | None,
                    tolerance: Tolerance) -> WindowVerdict:
    """A non-render result against the checker's run of it, by file hash."""
    same = checked_sha256 == claimed_sha256
    return WindowVerdict({"result": Comparison(same, 0.0 if same else 1.0, 0.0 if same else 1.0,
                                               "same bytes" if same else "other bytes")},
                         tolerance)


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None
