"""The pure verification rules: commitments and proofs, the challenge, the adaptive rate,
k-of-n agreement, and the verification state tables."""

from __future__ import annotations

import hashlib
import hmac
import itertools

import numpy as np
import pytest

from orchestrator.domain.errors import InvalidTransition
from orchestrator.domain.lifecycle import (
    CHECK_TRANSITIONS,
    VERIFICATION_TRANSITIONS,
    CheckStatus,
    VerificationStatus,
    check_transition,
    verification_transition,
)
from orchestrator.domain.merkle import verify
from orchestrator.domain.verification import (
    Agreement,
    Commitment,
    Leaf,
    LeafPart,
    ProviderRecord,
    Redundancy,
    SamplingPolicy,
    agreement,
    catch_probability,
    challenge_seed,
    draw,
    pixel_digest,
    pooled_floor,
    sampled_windows,
    window_rows,
    windows_for,
    windows_needed,
)

ALLOWED_VERIFICATION_MOVES = {
    ("committed", "checking"), ("committed", "trusted"), ("committed", "overridden"),
    ("checking", "passed"), ("checking", "disputed"), ("checking", "overridden"),
    ("disputed", "passed"), ("disputed", "failed"), ("disputed", "overridden"),
}
ALLOWED_CHECK_MOVES = {
    ("open", "leased"), ("open", "void"),
    ("leased", "matched"), ("leased", "mismatched"), ("leased", "open"), ("leased", "void"),
}


def leaves(count: int) -> list[Leaf]:
    return [Leaf(LeafPart.CHUNK, i // 2, (i % 2) * 4, 4, hashlib.sha256(bytes([i])).digest())
            for i in range(count)]


@pytest.mark.parametrize(("current", "target"),
                         list(itertools.product(VerificationStatus, VerificationStatus)))
def test_verification_transition_accepts_exactly_the_allowed_moves(
        current: VerificationStatus, target: VerificationStatus) -> None:
    if (current.value, target.value) in ALLOWED_VERIFICATION_MOVES:
        assert verification_transition(current, target, at=1.0, reason="t").kind == "verify"
    else:
        with pytest.raises(InvalidTransition):
            verification_transition(current, target, at=1.0, reason="t")


@pytest.mark.parametrize(("current", "target"), list(itertools.product(CheckStatus, CheckStatus)))
def test_check_transition_accepts_exactly_the_allowed_moves(current: CheckStatus,
                                                            target: CheckStatus) -> None:
    if (current.value, target.value) in ALLOWED_CHECK_MOVES:
        check_transition(current, target, at=1.0, reason="t")
    else:
        with pytest.raises(InvalidTransition):
            check_transition(current, target, at=1.0, reason="t")


def test_every_verification_status_has_a_row() -> None:
    assert set(VERIFICATION_TRANSITIONS) == set(VerificationStatus)
    assert set(CHECK_TRANSITIONS) == set(CheckStatus)


def test_commitment_proofs_verify_against_the_root_and_a_changed_leaf_does_not() -> None:
    items = leaves(7)
    commitment = Commitment.of(items)
    for leaf in items:
        assert verify(commitment.proof(leaf), commitment.root, leaf.hash)
    forged = Leaf(items[3].part, items[3].window, items[3].offset, items[3].length, b"\0" * 32)
    assert not verify(commitment.proof(items[3]), commitment.root, forged.hash)
    assert Leaf.from_json(items[2].as_json()) == items[2]
    assert commitment.windows == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        Commitment.of([items[0], items[0]])


def test_pixel_digest_sees_values_shape_and_dtype() -> None:
    a = np.zeros((2, 3, 4), np.float32)
    assert pixel_digest(a) == pixel_digest(a.copy())
    b = a.copy()
    b[1, 2, 0] = np.float32(1e-7)
    assert pixel_digest(a) != pixel_digest(b)
    assert pixel_digest(a) != pixel_digest(a.reshape(3, 2, 4))
    assert pixel_digest(a) != pixel_digest(a.astype(np.float64))


def test_challenge_is_fixed_by_secret_and_root_and_unpredictable_without_the_secret() -> None:
    root = Commitment.of(leaves(4)).root
    seed = challenge_seed(b"secret", root, 5, 1)
    assert seed == challenge_seed(b"secret", root, 5, 1)  # a dispute reproduces it
    assert seed != challenge_seed(b"other", root, 5, 1)
    assert seed != challenge_seed(b"secret", Commitment.of(leaves(5)).root, 5, 1)
    assert seed != challenge_seed(b"secret", root, 5, 2)  # a redo is drawn afresh
    draws = [len(sampled_windows(challenge_seed(b"s", root, t, 0), range(8), 0.25))
             for t in range(2000)]
    assert abs(np.mean(draws) / 8 - 0.25) < 0.02  # each window an independent 25 % draw
    assert sampled_windows(seed, range(8), 1.0) == list(range(8))


def test_adaptive_rate_checks_everything_until_trusted_then_decays_to_the_floor() -> None:
    policy = SamplingPolicy("adaptive", adaptive=True, floor=0.04, min_streak=10)
    record = ProviderRecord()
    assert policy.window_rate(record) == 1.0
    for _ in range(10):
        record = record.after(True)
    assert policy.window_rate(record) == pytest.approx(0.1)  # 1/CV
    for _ in range(90):
        record = record.after(True)
    assert policy.window_rate(record) == 0.04  # never below the floor
    record = record.after(False)
    assert (record.consecutive_valid, record.failures) == (0, 1)
    assert policy.window_rate(record) == 1.0  # reset on failure
    assert SamplingPolicy.parse("fixed-5%").window_rate(record) == pytest.approx(0.05)
    assert SamplingPolicy.parse("adaptive-50%").floor == 0.5
    with pytest.raises(ValueError, match="unknown sampling policy"):
        SamplingPolicy.parse("sometimes")


def test_pooled_catch_probability_and_the_windows_it_needs() -> None:
    need = windows_needed(0.04, 0.10, 0.99)
    assert catch_probability(0.04, 0.10, need) >= 0.99 > catch_probability(0.04, 0.10, need - 1)


def test_window_rows_cut_a_frame_without_gaps_like_border_renders() -> None:
    for height in (24, 25, 120, 7):
        count = windows_for(height, 8)
        rows = [window_rows(w, count, height) for w in range(count)]
        assert rows[0][0] == 0 and rows[-1][1] == height
        assert all(a[1] == b[0] for a, b in itertools.pairwise(rows))
        assert all(bottom - top >= 1 for top, bottom in rows)


def test_k_of_n_accepts_the_majority_and_names_dissenters() -> None:
    rule = Redundancy(k=2, n=3)
    assert agreement({"a": "x"}, rule).accepted is None
    verdict = agreement({"a": "x", "b": "y", "c": "x"}, rule)
    assert (verdict.accepted, verdict.dissenters) == ("x", ("b",))
    stuck = agreement({"a": "x", "b": "y", "c": "z"}, rule)
    assert stuck.accepted is None and stuck.exhausted
    with pytest.raises(ValueError):
        Redundancy(k=1, n=2)  # no majority: two different answers would both win



# ----- the challenge, as a third party given the secret reproduces it ------------------------
def test_the_challenge_seed_and_draws_follow_the_published_layout() -> None:
    """HMAC-SHA256(secret, "mesh-verification/1" || root || task id (8 bytes, big-endian) ||
    attempt (4 bytes, big-endian)); a draw is the first 8 bytes of HMAC(seed, label) over
    2^64."""
    secret, root = b"s" * 32, bytes(range(32))
    message = (b"mesh-verification/1" + root + bytes([0, 0, 0, 0, 0, 0, 1, 2])
               + bytes([0, 0, 0, 3]))
    seed = hmac.new(secret, message, hashlib.sha256).digest()
    assert challenge_seed(secret, root, 258, 3) == seed
    label = hmac.new(seed, b"window:7", hashlib.sha256).digest()
    assert draw(seed, "window:7") == int(label[:8].hex(), 16) / 2**64
    assert draw(seed, "window:7") != draw(seed, "window:8")


def test_k_of_n_says_whether_the_runs_are_exhausted() -> None:
    rule = Redundancy(k=2, n=3)
    assert agreement({"a": "h1", "b": "h1", "c": "h2"}, rule) == Agreement("h1", ("c",), False)
    assert agreement({"a": "h1", "b": "h2"}, rule) == Agreement(None, (), False)
    assert agreement({"a": "h1", "b": "h2", "c": "h3"}, rule) == Agreement(None, (), True)


def test_a_window_past_the_last_is_refused_by_name() -> None:
    assert window_rows(2, 3, 90) == (60, 90)
    with pytest.raises(ValueError, match=r"^window 3 outside 0..2$"):
        window_rows(3, 3, 90)


@pytest.mark.parametrize(("height", "preferred", "windows"), [
    (1, 8, 1), (2, 8, 1), (3, 8, 1), (5, 8, 2), (8, 8, 4), (9, 8, 4), (100, 8, 8)])
def test_every_window_keeps_at_least_two_rows(height: int, preferred: int,
                                              windows: int) -> None:
    assert windows_for(height, preferred) == windows


def test_the_pooled_floor_catches_the_target_share_with_the_target_probability() -> None:
    # 1,000 windows: 1 - 0.005^(1/1000) = 0.0052843 of them, over a 10 % share.
    assert pooled_floor(0.995, 0.10, 1000) == pytest.approx(0.052843, rel=1e-4)
    for windows in (100, 1000, 100_000):
        floor = pooled_floor(0.995, 0.10, windows)
        assert catch_probability(floor, 0.10, windows) == pytest.approx(0.995, rel=1e-9)
    assert pooled_floor(0.995, 0.10, 10) == 1.0  # ten windows cannot reach it: check them all
    assert pooled_floor(0.995, 0.10, 0) == pooled_floor(0.995, 0.10, 1)


def test_a_single_window_of_a_whole_tamperer_is_checked_with_the_target_probability() -> None:
    assert pooled_floor(0.995, 1.0, 1) == pytest.approx(0.995)
    assert pooled_floor(0.995, 1.0, 0) == pytest.approx(0.995)  # none delivered yet: as one
