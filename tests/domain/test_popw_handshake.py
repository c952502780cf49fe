"""PoPW handshake: the committed chain and its spot checks, the timing against the claimed
GPU, the single-use nonce, and what verifying costs the orchestrator."""

from __future__ import annotations

import base64
import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np
import pytest
from eth_abi import encode
from eth_utils import keccak

from orchestrator.config import Settings
from orchestrator.domain import popw
from orchestrator.domain.popw import (
    DEFAULT_GPU_CLASSES,
    MODULUS,
    Challenge,
    ChallengeBook,
    GpuClass,
    KernelSpec,
    PopwAnswer,
    PopwConfig,
    PopwFacts,
    PopwReason,
    PopwVerdict,
    PositionalTree,
    SpotOpening,
    check_answer,
    fold_path,
    kernel_round,
    kernel_start,
    max_answer_bytes,
    round_leaf,
    row_tree,
    solve,
    spot_checks,
    state_bytes,
)
from orchestrator.domain.reliability import GpuSample
from orchestrator.domain.types import Tier

CONFIG = PopwConfig(size=32, spot_checks=8, target_s=2.0,
                    gpu_classes={"slow": GpuClass("slow", 10.0, 0.5),
                                 "fast": GpuClass("fast", 40.0, 2.0)})
NONCE = bytes(range(32))
STEADY_PINGS: tuple[float | None, ...] = (20.0,) * 20


def cool(at: float) -> GpuSample:
    return GpuSample(at, 65.0, 1800.0, 1900.0, 0, 99.0, 4000.0, 24000.0, 300.0, 350.0)


@cache
def solved(spec: KernelSpec) -> PopwAnswer:
    return solve(spec)


def issued(gpu: str = "slow") -> tuple[ChallengeBook, PopwAnswer, float]:
    book = ChallengeBook(CONFIG)
    challenge = book.issue("node-1", gpu, NONCE, now=1000.0)
    return book, solved(challenge.kernel), challenge.expected_s


def facts(answer: PopwAnswer, answered_at: float, *, node: str = "node-1", signed: bool = True,
          pings: tuple[float | None, ...] = STEADY_PINGS, load: tuple[GpuSample, ...] = (),
          nonce: bytes = NONCE) -> PopwFacts:
    return PopwFacts(nonce, node, answer, answered_at, signed, pings, load or (cool(1001.0),))


def faked_answer(spec: KernelSpec, honest_rounds: int) -> PopwAnswer:
    """A node that runs only the first `honest_rounds` rounds and fills the rest of the
    chain with made-up states, then commits and opens exactly as `solve` does."""
    a, x = kernel_start(spec.nonce, spec.size)
    rng = np.random.default_rng(7)
    states = [state_bytes(x)]
    for r in range(spec.rounds):
        x = (kernel_round(x, a, r) if r < honest_rounds
             else rng.integers(0, MODULUS, x.shape).astype(np.float64))
        states.append(state_bytes(x))
    tree = PositionalTree([round_leaf(r, row_tree(s, spec.size).root)
                           for r, s in enumerate(states)])
    width = 2 * spec.size
    openings = tuple(
        SpotOpening(
            states[r][i * width:(i + 1) * width], row_tree(states[r], spec.size).proof(i),
            tree.proof(r), row_tree(states[r + 1], spec.size).proof(i), tree.proof(r + 1))
        for r, i in spot_checks(spec.nonce, tree.root, spec.rounds, spec.size, spec.spot_checks))
    final = row_tree(states[-1], spec.size).root
    return PopwAnswer(tree.root, final, tree.proof(0), tree.proof(spec.rounds), openings)


def flip_row_byte(answer: PopwAnswer) -> PopwAnswer:
    first = answer.openings[0]
    row = bytes([first.row[0] ^ 1]) + first.row[1:]
    return replace(answer, openings=(replace(first, row=row), *answer.openings[1:]))


# ----- the kernel, the commitment and the spot checks ------------------------------------

def test_kernel_is_deterministic_and_depends_on_the_nonce() -> None:
    spec = KernelSpec(NONCE, 8, 5, 4)
    assert solve(spec) == solve(spec)
    assert solve(spec).root != solve(replace(spec, nonce=bytes(32))).root
    assert solve(spec).root != solve(replace(spec, rounds=6)).root


def test_one_row_of_a_round_is_the_same_row_of_the_whole_round() -> None:
    a, x = kernel_start(NONCE, 16)
    whole = kernel_round(x, a, 3)
    assert np.array_equal(kernel_round(x[5], a, 3), whole[5])


def test_round_leaf_is_the_openzeppelin_double_hashed_abi_leaf() -> None:
    digest = keccak(b"state")
    assert round_leaf(7, digest) == keccak(keccak(encode(["uint256", "bytes32"], [7, digest])))


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 9, 33])
def test_positional_proof_verifies_only_at_its_own_index(count: int) -> None:
    leaves = [keccak(bytes([i])) for i in range(count)]
    tree = PositionalTree(leaves)
    for index, leaf in enumerate(leaves):
        assert fold_path(leaf, index, tree.proof(index), count) == tree.root
        if count > 1:
            other = (index + 1) % count
            assert fold_path(leaf, other, tree.proof(index), count) != tree.root
    assert fold_path(leaves[0], count, tree.proof(0), count) is None


def test_spot_checks_are_distinct_in_range_and_follow_the_root() -> None:
    cells = spot_checks(NONCE, keccak(b"root"), rounds=20, size=32, count=8)
    assert len(set(cells)) == 8
    assert all(0 <= r < 20 and 0 <= i < 32 for r, i in cells)
    assert cells != spot_checks(NONCE, keccak(b"other root"), 20, 32, 8)
    assert len(spot_checks(NONCE, keccak(b"root"), rounds=2, size=2, count=8)) == 4


def test_honest_answer_passes_the_spot_checks() -> None:
    spec = KernelSpec(NONCE, 32, 20, 8)
    assert check_answer(spec, solved(spec))


@pytest.mark.parametrize("tamper", [
    flip_row_byte,
    lambda a: replace(a, final_digest=keccak(b"not the last state")),
    lambda a: replace(a, root=keccak(b"another root")),
    lambda a: replace(a, openings=a.openings[:-1]),
    lambda a: replace(a, start_proof=a.start_proof[:-1]),
    lambda a: replace(a, openings=(
        replace(a.openings[0], next_round_proof=a.openings[0].round_proof), *a.openings[1:])),
    lambda a: replace(a, openings=(replace(a.openings[0], row=a.openings[0].row[:-2]),
                                   *a.openings[1:])),
    lambda a: replace(a, openings=(replace(a.openings[0], row=a.openings[0].row + b"\0\0"),
                                   *a.openings[1:])),
], ids=["row", "final_digest", "root", "missing_opening", "start_path", "swapped_path",
        "short_row", "long_row"])
def test_any_tampered_part_of_the_answer_fails_the_check(
        tamper: Callable[[PopwAnswer], PopwAnswer]) -> None:
    spec = KernelSpec(NONCE, 32, 20, 8)
    assert not check_answer(spec, tamper(solved(spec)))


def test_a_node_that_skips_half_the_rounds_is_caught() -> None:
    spec = KernelSpec(NONCE, 32, 40, 20)
    assert check_answer(spec, faked_answer(spec, honest_rounds=40))  # the faker's code is honest
    assert not check_answer(spec, faked_answer(spec, honest_rounds=20))


def test_answer_round_trips_through_its_wire_bytes_and_refuses_garbage() -> None:
    answer = solved(KernelSpec(NONCE, 32, 20, 8))
    wire = answer.to_bytes()
    assert PopwAnswer.from_bytes(wire) == answer
    assert len(wire) <= max_answer_bytes(32, 20, 8)
    for broken in (wire[:-1], wire + b"\x00", b"", wire[:64] + b"\xff" + wire[65:]):
        with pytest.raises(ValueError):
            PopwAnswer.from_bytes(broken)


def test_default_answers_fit_the_popw_route_body_limit_in_every_gpu_class() -> None:
    cfg = PopwConfig()
    json_allowance = 4096 + 120 * 300  # nonce, field names, up to 120 GPU samples
    for gpu in DEFAULT_GPU_CLASSES.values():
        rounds = round(cfg.target_s * gpu.rounds_per_s)
        encoded = 4 * -(-max_answer_bytes(cfg.size, rounds, cfg.spot_checks) // 3)
        assert encoded + json_allowance < Settings().max_popw_answer_bytes, gpu.name


def test_at_the_default_config_the_orchestrator_side_is_a_small_fraction_of_solving(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """issue + judge must not redo the node's work. Counted, not timed (a timing moves with
    the machine's load): the kernel's multiply-adds and the bytes hashed, on each side."""
    work: Counter[str] = Counter()

    def counted_round(x: np.ndarray, a: np.ndarray, round_number: int) -> np.ndarray:
        work["multiply_adds"] += x.size * a.shape[1]
        return kernel_round(x, a, round_number)

    def counted_keccak(data: bytes) -> bytes:
        work["bytes_hashed"] += len(data)
        return keccak(data)

    monkeypatch.setattr(popw, "kernel_round", counted_round)
    monkeypatch.setattr(popw, "keccak", counted_keccak)
    book = ChallengeBook(PopwConfig())
    challenge = book.issue("node-1", "cpu", NONCE, now=0.0)
    issuing, work = work, Counter()
    answer = PopwAnswer.from_bytes(base64.b64decode(base64.b64encode(
        popw.solve(challenge.kernel).to_bytes())))
    solving, work = work, Counter()
    at = challenge.expected_s
    verdict = book.judge(PopwFacts(NONCE, "node-1", answer, at, True, STEADY_PINGS,
                                   (cool(at),)), now=at)
    issue_and_judge = issuing + work
    assert verdict.passed
    for kind in ("multiply_adds", "bytes_hashed"):
        assert 0 < issue_and_judge[kind] < 0.05 * solving[kind], (kind, issue_and_judge, solving)


# ----- the verdict -------------------------------------------------------------------------

def test_correct_timely_answer_on_a_steady_cool_node_earns_high() -> None:
    book, answer, expected_s = issued()
    verdict = book.judge(facts(answer, 1000.0 + expected_s), now=1000.0 + expected_s)
    assert verdict.passed and verdict.tier is Tier.HIGH and verdict.reasons == ()
    assert verdict.fresh(1000.0 + expected_s + 1)
    assert not verdict.fresh(verdict.expires_at)


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda a, t: facts(flip_row_byte(a), t), PopwReason.WRONG_ANSWER),
    (lambda a, t: facts(a, t + 1e4), PopwReason.LATE),
    (lambda a, t: facts(a, t, signed=False), PopwReason.FORGED),
    (lambda a, t: facts(a, t, node="node-2"), PopwReason.WRONG_NODE),
    (lambda a, t: facts(a, t, nonce=b"\x01" * 32), PopwReason.UNKNOWN_CHALLENGE),
    (lambda a, t: facts(a, t, pings=(None,) * 10 + (20.0,) * 10), PopwReason.PROBE_LOSS),
])
def test_bad_answers_fail_with_their_reason(mutate: Callable[[PopwAnswer, float], PopwFacts],
                                            reason: PopwReason) -> None:
    book, answer, expected_s = issued()
    verdict = book.judge(mutate(answer, 1000.0 + expected_s), now=1000.0 + expected_s)
    assert not verdict.passed
    assert verdict.tier is Tier.BACKGROUND
    assert verdict.reasons == (reason,)


def test_an_answer_to_another_nonce_is_a_wrong_answer() -> None:
    book, _, expected_s = issued()
    other = solved(replace(book.pending(1000.0)[0].kernel, nonce=bytes(32)))
    verdict = book.judge(facts(other, 1000.0 + expected_s), now=1000.0 + expected_s)
    assert verdict.reasons == (PopwReason.WRONG_ANSWER,)


def test_replayed_answer_is_refused() -> None:
    book, answer, expected_s = issued()
    first = book.judge(facts(answer, 1000.0 + expected_s), now=1000.0 + expected_s)
    replay = book.judge(facts(answer, 1000.0 + expected_s), now=1000.0 + expected_s + 1)
    assert first.passed
    assert not replay.passed and replay.reasons == (PopwReason.REPLAYED,)


def test_forged_answer_does_not_burn_the_honest_nodes_challenge() -> None:
    book, answer, expected_s = issued()
    assert not book.judge(facts(answer, 1001.0, signed=False), now=1001.0).passed
    assert book.judge(facts(answer, 1000.0 + expected_s), now=1000.0 + expected_s).passed


def test_too_slow_for_the_claimed_gpu_fails() -> None:
    book, answer, expected_s = issued("fast")
    at = 1000.0 + expected_s * 3  # within the deadline slack but 3x the nominal time
    verdict = book.judge(facts(answer, at), now=at)
    assert verdict.reasons == (PopwReason.TOO_SLOW_FOR_CLASS,)


def test_impossibly_fast_answer_fails() -> None:
    book, answer, expected_s = issued()
    verdict = book.judge(facts(answer, 1000.0 + expected_s * 0.05), now=1001.0)
    assert verdict.reasons == (PopwReason.IMPOSSIBLY_FAST,)


def test_round_trip_time_is_not_charged_to_the_gpu() -> None:
    book, answer, expected_s = issued("fast")
    slow_link = (2000.0,) * 20  # 2 s round trips: the raw elapsed time would look too slow
    at = 1000.0 + expected_s * 1.5 + 2.0
    assert book.judge(facts(answer, at, pings=slow_link), now=at).passed


def test_jitter_or_heat_passes_but_only_at_standard() -> None:
    jittery = tuple(20.0 + (60.0 if i % 2 else 0.0) for i in range(20))
    hot = (GpuSample(1001.0, 88.0, 1500.0, 1900.0, 0x40, 99.0, 4000.0, 24000.0, 340.0, 350.0),)
    book, answer, expected_s = issued()
    at = 1000.0 + expected_s
    on_jittery_link = book.judge(facts(answer, at, pings=jittery), now=at)
    book, answer, _ = issued()
    running_hot = book.judge(facts(answer, at, load=hot), now=at)
    for verdict, reason in ((on_jittery_link, PopwReason.HIGH_JITTER),
                            (running_hot, PopwReason.THERMAL)):
        assert verdict.passed and verdict.tier is Tier.STANDARD
        assert verdict.reasons == (reason,)


def test_a_jitter_exactly_at_the_limit_keeps_high() -> None:
    """Pings 10 ms from their median spread 1.4826 x 10 ms; with that as the limit, HIGH."""
    book = ChallengeBook(dataclasses.replace(CONFIG, high_tier_max_jitter_ms=1.4826 * 10.0))
    challenge = book.issue("node-1", "slow", NONCE, now=1000.0)
    at = 1000.0 + challenge.expected_s
    verdict = book.judge(facts(solved(challenge.kernel), at, pings=(20.0, 30.0, 40.0)), now=at)
    assert (verdict.tier, verdict.reasons) == (Tier.HIGH, ())


def test_a_steady_link_with_a_few_late_replies_keeps_high() -> None:
    """Two of twenty rounds answered late (the host busy rendering) are not a jittery link."""
    assert judged(pings=(6.0, 7.0) * 9 + (828.0, 190.0)).tier is Tier.HIGH


def test_issue_refuses_unknown_gpu_short_or_reused_nonce() -> None:
    book = ChallengeBook(CONFIG)
    with pytest.raises(ValueError, match="unknown GPU"):
        book.issue("n", "tpu", NONCE, 0.0)
    with pytest.raises(ValueError, match="16 bytes"):
        book.issue("n", "slow", b"short", 0.0)
    book.issue("n", "slow", NONCE, 0.0)
    with pytest.raises(ValueError, match="already used"):
        book.issue("n", "slow", NONCE, 1.0)


def test_prune_forgets_old_challenges_and_replays_still_fail() -> None:
    book, answer, expected_s = issued()
    assert [c.nonce for c in book.pending(1000.0)] == [NONCE]
    book.judge(facts(answer, 1000.0 + expected_s), now=1000.0 + expected_s)
    assert book.pending(1000.0 + expected_s) == []
    assert book.prune(now=1e9) == 1
    assert not book.judge(facts(answer, 1e9), now=1e9).passed


@pytest.mark.parametrize(("size", "rounds", "spot_checks"), [
    (2, 1, 1), (4, 1, 1), (4, 3, 2), (8, 7, 4), (16, 15, 8), (8, 3, 100)])
def test_answer_size_bound_is_reached_when_every_tree_is_full(size: int, rounds: int,
                                                              spot_checks: int) -> None:
    """Power-of-two rows and rounds + 1 states: no odd node is carried up, every path has
    its full length, so an honest answer is exactly as long as the bound allows."""
    answer = solve(KernelSpec(b"\x01" * 16, size, rounds, spot_checks))
    assert len(answer.to_bytes()) == max_answer_bytes(size, rounds, spot_checks)


def test_a_challenge_is_pending_up_to_its_deadline_and_kept_a_day_after_it() -> None:
    book = ChallengeBook(CONFIG)
    deadline = book.issue("node-1", "slow", NONCE, now=1000.0).deadline
    assert [c.nonce for c in book.pending(deadline)] == [NONCE]  # still answerable
    assert book.pending(deadline + 0.001) == []
    assert book.prune(now=deadline + 86_400.0) == 0  # exactly a day: kept
    assert book.prune(now=deadline + 86_400.5) == 1
    assert book.prune(now=deadline + 10 * 86_400.0) == 0  # gone already


def test_a_malformed_answer_is_refused_saying_what_is_wrong() -> None:
    answer = solved(KernelSpec(NONCE, 32, 20, 8))
    wire = answer.to_bytes()
    head = 64  # root and final digest; then the start path's depth byte
    cases = [
        (wire[:-1], "answer is truncated"),
        (wire + b"\x00", "trailing bytes after the answer"),
        (wire[:head] + bytes([65]), "a Merkle path has at most 64 siblings"),
    ]
    for broken, message in cases:
        with pytest.raises(ValueError, match=f"^{message}$"):
            PopwAnswer.from_bytes(broken)
    # A path of 64 siblings, the deepest any challenge allows, is read.
    deep = PopwAnswer(answer.root, answer.final_digest, (b"\x07" * 32,) * 64,
                      (), ())
    assert PopwAnswer.from_bytes(deep.to_bytes()) == deep
    no_paths = answer.root + answer.final_digest + b"\x00\x00"
    with pytest.raises(ValueError, match=r"^at most 1024 openings$"):
        PopwAnswer.from_bytes(no_paths + b"\xff\xff")  # counts are unsigned
    with pytest.raises(ValueError, match=r"^row length outside 1..2\*MAX_SIZE bytes$"):
        PopwAnswer.from_bytes(no_paths + b"\x00\x01" + b"\x80\x00" + bytes(40_000))


def test_a_failed_handshake_names_its_node_and_fails_at_background() -> None:
    book = ChallengeBook(CONFIG)
    verdict = book.judge(facts(solved(KernelSpec(NONCE, 32, 20, 8)), 1000.0, node="ghost"),
                         now=1000.0)
    assert verdict == PopwVerdict("ghost", False, Tier.BACKGROUND, 1000.0,
                                  1000.0 + CONFIG.standard_validity_s,
                                  (PopwReason.UNKNOWN_CHALLENGE,))


def test_a_pruned_nonce_is_forgotten_entirely() -> None:
    """Pruned after its day, a nonce is no longer used nor answered: issued again (the caller
    picks nonces), its new challenge is pending like any other."""
    book, answer, expected_s = issued()
    book.judge(facts(answer, 1000.0 + expected_s), now=1000.0 + expected_s)
    assert book.prune(now=1e9) == 1
    again = book.issue("node-1", "slow", NONCE, now=1e9)
    assert book.pending(1e9) == [again]


def test_a_challenge_carries_its_class_pings_and_deadline() -> None:
    """The "slow" class does 10 rounds a second: 2 s is 20 rounds; the deadline is twice the
    expected 2 s plus 5 s of slack."""
    book = ChallengeBook(CONFIG)
    challenge = book.issue("node-1", "slow", NONCE[:16], now=1000.0)  # 16 bytes suffice
    assert challenge == Challenge(NONCE[:16], "node-1", "slow", 32, 20, 8, 20, 1000.0, 2.0,
                                  1000.0 + 2.0 * 2.0 + 5.0)
    tiny = ChallengeBook(PopwConfig(size=32, target_s=0.01,
                                    gpu_classes={"slow": GpuClass("slow", 10.0, 0.5)}))
    assert tiny.issue("n", "slow", NONCE, 0.0).rounds == 1  # never fewer than one round
    with pytest.raises(ValueError, match=r"^a challenge nonce needs at least 16 bytes$"):
        book.issue("n", "slow", NONCE[:15], 0.0)
    with pytest.raises(ValueError, match=r"^nonce already used for a challenge$"):
        book.issue("n", "slow", NONCE[:16], 1.0)


def judged(at_offset: float = 0.0, **kwargs: Any) -> PopwVerdict:
    book, answer, expected_s = issued()
    at = 1000.0 + expected_s + at_offset
    return book.judge(facts(answer, at, **kwargs), now=at)


def test_every_verdict_names_its_node_time_and_validity() -> None:
    _, _, expected_s = issued()
    at = 1000.0 + expected_s
    assert judged() == PopwVerdict("node-1", True, Tier.HIGH, at,
                                   at + CONFIG.high_validity_s, (), "slow")
    jittery = tuple(20.0 + (60.0 if i % 2 else 0.0) for i in range(20))
    assert judged(pings=jittery) == PopwVerdict("node-1", True, Tier.STANDARD, at,
                                                at + CONFIG.standard_validity_s,
                                                (PopwReason.HIGH_JITTER,), "slow")
    assert judged(signed=False) == PopwVerdict("node-1", False, Tier.BACKGROUND, at,
                                               at + CONFIG.standard_validity_s,
                                               (PopwReason.FORGED,))  # proves no class


def test_the_edges_of_the_handshake_rules_are_passes() -> None:
    _, _, expected_s = issued()
    deadline = 1000.0 + expected_s * CONFIG.too_slow_factor + CONFIG.deadline_slack_s
    # Answered exactly at the deadline is in time (then too slow for the class, not late).
    assert judged(at_offset=deadline - 1000.0 - expected_s).reasons == (
        PopwReason.TOO_SLOW_FOR_CLASS,)
    # Exactly the allowed probe loss (2 of 20 = 10 %) passes.
    assert judged(pings=(None, None) + (20.0,) * 18).passed
    # Pings d ms apart lie d ms from their median: jitter 1.4826 d, so d = 13.4 ms (19.87 ms)
    # is within the 20 ms HIGH limit and d = 13.6 ms (20.16 ms) over it.
    assert judged(pings=(20.0, 33.4, 46.8)).tier is Tier.HIGH
    assert judged(pings=(20.0, 33.6, 47.2)).reasons == (PopwReason.HIGH_JITTER,)
    # 85 C is the margin's edge under a 90 C slowdown: already too hot for HIGH.
    edge = (GpuSample(1001.0, 85.0, 1800.0, 1900.0, 0, 99.0, 4000.0, 24000.0, 300.0, 350.0),)
    assert judged(load=edge).reasons == (PopwReason.THERMAL,)
    throttled = (GpuSample(1001.0, 60.0, 1500.0, 1900.0, 0x40, 99.0, 4000.0, 24000.0, 340.0,
                           350.0),)
    assert judged(load=throttled).reasons == (PopwReason.THERMAL,)


def test_the_kernel_time_is_the_answer_time_less_one_round_trip() -> None:
    """Pings of exactly 1 s (0.5 s each way); the slow class expects 2 s and allows up to 4 s.
    Answered 5 s after issue: 4 s of kernel, at the limit; 5.25 s: 4.25 s, too slow."""
    _, _, expected_s = issued()
    second = (1000.0,) * 20
    assert judged(at_offset=5.0 - expected_s, pings=second).tier is Tier.HIGH
    assert judged(at_offset=5.25 - expected_s, pings=second).reasons == (
        PopwReason.TOO_SLOW_FOR_CLASS,)
    # With instant pings, a quarter of the expected time (0.5 s) is just not too fast.
    assert judged(at_offset=0.5 - expected_s, pings=(0.0,) * 20).tier is Tier.HIGH
    # A single ping, answered: no loss.
    assert judged(pings=(20.0,)).tier is Tier.HIGH


@pytest.mark.parametrize("proof", ["row_proof", "next_row_proof"])
def test_a_row_path_of_the_wrong_length_fails_the_check(proof: str) -> None:
    """A path one sibling short fits no tree of the row's size: a wrong answer, not an
    error."""
    spec = KernelSpec(NONCE, 32, 20, 8)
    answer = solved(spec)
    first = answer.openings[0]
    short = replace(first, **{proof: getattr(first, proof)[:-1]})
    assert check_answer(spec, answer)
    assert check_answer(spec, replace(answer, openings=(short, *answer.openings[1:]))) is False


def test_the_kernel_takes_sizes_from_1_to_1024() -> None:
    for size in (1, 1024):
        a, x = kernel_start(NONCE, size)
        assert a.shape == x.shape == (size, size)
    for size in (0, 1025):
        with pytest.raises(ValueError, match=r"^kernel needs 1 <= size <= 1024$"):
            kernel_start(NONCE, size)


def test_a_positional_tree_of_no_leaves_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^a Merkle tree needs at least one leaf$"):
        PositionalTree([])


def test_a_probe_loss_of_exactly_the_limit_passes() -> None:
    """One of four pings lost is exactly a 25 % limit (0.1 is no binary fraction, 0.25 is)."""
    book = ChallengeBook(replace(CONFIG, max_probe_loss=0.25))
    challenge = book.issue("node-1", "slow", NONCE, now=1000.0)
    at = 1000.0 + challenge.expected_s
    answer = solved(challenge.kernel)
    assert book.judge(facts(answer, at, pings=(None, 20.0, 20.0, 20.0)), now=at).passed
    book = ChallengeBook(replace(CONFIG, max_probe_loss=0.24))
    book.issue("node-1", "slow", NONCE, now=1000.0)
    assert book.judge(facts(answer, at, pings=(None, 20.0, 20.0, 20.0)), now=at).reasons == (
        PopwReason.PROBE_LOSS,)
