"""Verification of results: what a node commits to, what is re-checked, how often, and when two
renders agree. Pure: the service feeds it hashes, pixels, secrets and clocks.

* **Commitment.** When a node completes a render task its result is cut into leaves, one per
  (sample chunk, pixel window) plus one per window of the delivered frame, each the sha256 of
  the window's decoded pixels; the Merkle root over them (`domain.merkle`, OpenZeppelin-style)
  is recorded before anything about the check is decided.
* **Challenge.** Which windows are re-rendered is drawn from HMAC(server secret, root, task):
  the node cannot predict it when it commits (it knows neither the secret nor, before it
  renders, the root), and anyone given the secret reproduces it for a dispute.
* **Rate.** Adaptive replication after BOINC: a provider with CV consecutive valid checks is
  trusted with probability 1 - 1/CV, i.e. each window is re-checked with probability
  max(floor, 1/CV); a failure resets CV to 0 (everything checked again). The streak is pooled
  per provider (all its nodes, all its tasks) and every window is an independent draw, so the
  catch probability within an epoch depends on the windows a provider delivered, not on how
  it split them into tasks: P(catch) = 1 - (1 - p * share)^windows.
* **Comparison** of a re-rendered window against the committed pixels:
  `domain.pixel_comparison`.
* **k-of-n** for `command` workloads that declare themselves non-deterministic: n runs on
  distinct providers, a result hash is accepted once k of them agree byte for byte.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from eth_abi import encode
from eth_utils import keccak

from orchestrator.domain.merkle import MerkleTree

CHALLENGE_DOMAIN = b"mesh-verification/1"


class LeafPart(StrEnum):
    CHUNK = "chunk"  # linear float RGBA of one sample chunk, one window of it
    FRAME = "frame"  # the delivered (merged, colour-managed) frame, one window of it
    RESULT = "result"  # a whole non-render result (command output), by its file hash


@dataclass(frozen=True, slots=True)
class Leaf:
    part: LeafPart
    window: int  # window index within the task (0 for a RESULT)
    offset: int  # first sample of the chunk (0 for FRAME / RESULT)
    length: int  # samples in the chunk (0 for FRAME / RESULT)
    digest: bytes  # sha256 of the decoded pixels (C order, their dtype), or of the file

    @property
    def hash(self) -> bytes:
        """Double-hashed ABI tuple, as `merkle.score_leaf`: never mistaken for an inner node."""
        inner = keccak(encode(["string", "uint32", "uint32", "uint32", "bytes32"],
                              [self.part.value, self.window, self.offset, self.length,
                               self.digest]))
        return keccak(inner)

    def as_json(self) -> dict[str, object]:
        return {"part": self.part.value, "window": self.window, "offset": self.offset,
                "length": self.length, "digest": self.digest.hex()}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Leaf:
        return cls(LeafPart(str(data["part"])), int(str(data["window"])),
                   int(str(data["offset"])), int(str(data["length"])),
                   bytes.fromhex(str(data["digest"])))


def pixel_digest(pixels: np.ndarray) -> bytes:
    """sha256 over the decoded pixels (shape and dtype included), independent of the file."""
    array = np.ascontiguousarray(pixels)
    header = f"{array.dtype.str}{array.shape}".encode()
    return hashlib.sha256(header + array.tobytes()).digest()


@dataclass(frozen=True, slots=True)
class Commitment:
    leaves: tuple[Leaf, ...]
    root: bytes

    @classmethod
    def of(cls, leaves: Sequence[Leaf]) -> Commitment:
        if len({leaf.hash for leaf in leaves}) != len(leaves):
            raise ValueError("a commitment's leaves must be distinct")
        return cls(tuple(leaves), MerkleTree.build([leaf.hash for leaf in leaves]).root)

    def proof(self, leaf: Leaf) -> list[bytes]:
        return MerkleTree.build([item.hash for item in self.leaves]).proof(leaf.hash)

    @property
    def windows(self) -> list[int]:
        return sorted({leaf.window for leaf in self.leaves})


def window_rows(window: int, windows: int, height: int) -> tuple[int, int]:
    """Rows [top, bottom) of horizontal window `window` of `windows` in a top-down image of
    `height` rows. Same edges as a Blender border render of strip `window` of `windows`
    (`int(float32(border) * float32(res))`, border y bottom-up), so a checker renders exactly
    these rows with `tile=window, tiles=windows`."""
    if not 0 <= window < windows:
        raise ValueError(f"window {window} outside 0..{windows - 1}")
    low, high = 1.0 - (window + 1) / windows, 1.0 - window / windows
    y0 = int(np.float32(low) * np.float32(height))
    y1 = int(np.float32(high) * np.float32(height))
    return height - y1, height - y0


def windows_for(height: int, preferred: int) -> int:
    """How many windows a frame of `height` rows is cut into: `preferred`, fewer for tiny
    frames so that every window keeps at least two rows."""
    return max(1, min(preferred, height // 2))


# ----- the challenge ------------------------------------------------------------------------

def challenge_seed(secret: bytes, root: bytes, task_id: int, attempt: int) -> bytes:
    """The seed every sampling draw of one committed result comes from."""
    message = CHALLENGE_DOMAIN + root + task_id.to_bytes(8, "big") + attempt.to_bytes(4, "big")
    return hmac.new(secret, message, hashlib.sha256).digest()


def draw(seed: bytes, label: str) -> float:
    """A uniform number in [0, 1) for `label`, fixed by the seed."""
    digest = hmac.new(seed, label.encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def sampled_windows(seed: bytes, windows: Sequence[int], rate: float) -> list[int]:
    """The windows to re-render: each an independent draw with probability `rate`."""
    return [w for w in windows if draw(seed, f"window:{w}") < rate]


# ----- the adaptive rate --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ProviderRecord:
    """A provider's verification record, pooled over its nodes and tasks."""

    consecutive_valid: int = 0  # checked windows that matched since the last failure (CV)
    failures: int = 0

    def after(self, matched: bool) -> ProviderRecord:
        if matched:
            return ProviderRecord(self.consecutive_valid + 1, self.failures)
        return ProviderRecord(0, self.failures + 1)


@dataclass(frozen=True, slots=True)
class SamplingPolicy:
    """`fixed`: every window checked with probability `rate`. `adaptive`: BOINC's adaptive
    replication per window, max(floor, 1/CV), everything checked while CV < `min_streak`."""

    name: str
    adaptive: bool
    rate: float = 0.05  # fixed policies
    floor: float = 0.04  # adaptive: the rate never goes below this
    min_streak: int = 10  # adaptive: below this many valid checks, check every window
    # pooled: the floor is what catches `target_share` tampering with P >= `target` (0.995,
    # a margin over the 0.99 promised) over the windows the provider delivers in an epoch
    # (fewer windows: a higher floor)
    pooled: bool = False
    target: float = 0.995
    target_share: float = 0.10

    def __post_init__(self) -> None:
        if not (0.0 < self.rate <= 1.0 and 0.0 < self.floor <= 1.0):
            raise ValueError("rates must lie in (0, 1]")

    def window_rate(self, record: ProviderRecord, epoch_windows: int | None = None) -> float:
        """`epoch_windows`: the windows the provider delivers in an epoch (its last one's)."""
        if not self.adaptive:
            return self.rate
        if record.consecutive_valid < self.min_streak:
            return 1.0
        floor = self.floor
        if self.pooled:
            floor = max(floor, pooled_floor(self.target, self.target_share, epoch_windows or 1))
        return min(1.0, max(floor, 1.0 / record.consecutive_valid))

    @classmethod
    def parse(cls, text: str) -> SamplingPolicy:
        """`adaptive` (pooled per provider and epoch, floor at least 0.5 %), `adaptive-F%`
        (a fixed floor F) or `fixed-N%`."""
        name = text.strip()
        if name == "adaptive":
            return cls(name, adaptive=True, floor=0.005, pooled=True)
        for prefix, adaptive in (("adaptive-", True), ("fixed-", False)):
            if name.startswith(prefix) and name.endswith("%"):
                try:
                    share = float(name[len(prefix):-1]) / 100
                except ValueError:
                    break
                if adaptive:
                    return cls(name, adaptive=True, floor=share)
                return cls(name, adaptive=False, rate=share)
        raise ValueError(f"unknown sampling policy {text!r}: use adaptive, adaptive-F% or fixed-N%")


def pooled_floor(target: float, share: float, windows: int) -> float:
    """The per-window rate at which `windows` draws catch a `share` tamperer with P `target`."""
    return min(1.0, (1.0 - (1.0 - target) ** (1.0 / max(windows, 1))) / share)


def catch_probability(rate: float, share: float, windows: int) -> float:
    """P(at least one re-checked window is a tampered one) when `share` of `windows` are."""
    return 1.0 - (1.0 - rate * share) ** windows


def windows_needed(rate: float, share: float, target: float) -> int:
    """Windows a provider must deliver in an epoch for `catch_probability` to reach `target`."""
    return math.ceil(math.log(1.0 - target) / math.log(1.0 - rate * share))


# ----- k-of-n for non-deterministic commands -----------------------------------------------

@dataclass(frozen=True, slots=True)
class Redundancy:
    """Run a task `n` times on distinct providers; accept a result hash once `k` agree."""

    k: int = 2
    n: int = 3

    def __post_init__(self) -> None:
        if not 1 <= self.k <= self.n or 2 * self.k <= self.n:
            raise ValueError("k-of-n needs 1 <= k <= n and a strict majority (2k > n)")


@dataclass(frozen=True, slots=True)
class Agreement:
    accepted: str | None  # the result hash k runs agreed on, None while undecided or failed
    dissenters: tuple[str, ...]  # runs (node ids) whose hash differs from the accepted one
    exhausted: bool  # all n runs are in and no hash reached k: nobody can be blamed


def agreement(results: Mapping[str, str], rule: Redundancy) -> Agreement:
    """Byte agreement of result hashes by run (node id). With 2k > n at most one hash can
    reach k, so the verdict never depends on the order runs finish in."""
    counts: dict[str, int] = {}
    for digest in results.values():
        counts[digest] = counts.get(digest, 0) + 1
    winners = [digest for digest, count in counts.items() if count >= rule.k]
    if winners:
        accepted = winners[0]
        return Agreement(accepted, tuple(sorted(n for n, d in results.items() if d != accepted)),
                         False)
    return Agreement(None, (), len(results) >= rule.n)
