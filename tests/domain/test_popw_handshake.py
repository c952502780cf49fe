"""PoPW handshake: the answer, the timing against the claimed GPU, the single-use nonce."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.domain.popw import (
    ChallengeBook,
    GpuClass,
    PopwConfig,
    PopwFacts,
    PopwReason,
    kernel_answer,
)
from orchestrator.domain.reliability import GpuSample
from orchestrator.domain.types import Tier

CONFIG = PopwConfig(size=8, target_s=2.0, gpu_classes={"slow": GpuClass("slow", 10.0),
                                                       "fast": GpuClass("fast", 40.0)})
NONCE = bytes(range(32))
STEADY_PINGS: tuple[float | None, ...] = (20.0,) * 20


def cool(at: float) -> GpuSample:
    return GpuSample(at, 65.0, 1800.0, 1900.0, 0, 99.0, 4000.0, 24000.0, 300.0, 350.0)


def issued(gpu: str = "slow") -> tuple[ChallengeBook, bytes, float]:
    book = ChallengeBook(CONFIG)
    challenge = book.issue("node-1", gpu, NONCE, now=1000.0)
    answer = kernel_answer(NONCE, challenge.size, challenge.rounds)
    return book, answer, challenge.expected_s


def facts(answer: bytes, answered_at: float, *, node: str = "node-1", signed: bool = True,
          pings: tuple[float | None, ...] = STEADY_PINGS, load: tuple[GpuSample, ...] = (),
          nonce: bytes = NONCE) -> PopwFacts:
    return PopwFacts(nonce, node, answer, answered_at, signed, pings, load or (cool(1001.0),))


def test_kernel_is_deterministic_and_depends_on_the_nonce() -> None:
    assert kernel_answer(NONCE, 8, 5) == kernel_answer(NONCE, 8, 5)
    assert kernel_answer(NONCE, 8, 5) != kernel_answer(bytes(32), 8, 5)
    assert kernel_answer(NONCE, 8, 5) != kernel_answer(NONCE, 8, 6)


def test_correct_timely_answer_on_a_steady_cool_node_earns_high() -> None:
    book, answer, expected_s = issued()
    verdict = book.judge(facts(answer, 1000.0 + expected_s), now=1000.0 + expected_s)
    assert verdict.passed and verdict.tier is Tier.HIGH and verdict.reasons == ()
    assert verdict.fresh(1000.0 + expected_s + 1)
    assert not verdict.fresh(verdict.expires_at)


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda a, t: facts(b"\x00" * 32, t), PopwReason.WRONG_ANSWER),
    (lambda a, t: facts(a, t + 1e4), PopwReason.LATE),
    (lambda a, t: facts(a, t, signed=False), PopwReason.FORGED),
    (lambda a, t: facts(a, t, node="node-2"), PopwReason.WRONG_NODE),
    (lambda a, t: facts(a, t, nonce=b"\x01" * 32), PopwReason.UNKNOWN_CHALLENGE),
    (lambda a, t: facts(a, t, pings=(None,) * 10 + (20.0,) * 10), PopwReason.PROBE_LOSS),
])
def test_bad_answers_fail_with_their_reason(mutate: Callable[[bytes, float], PopwFacts],
                                            reason: PopwReason) -> None:
    book, answer, expected_s = issued()
    verdict = book.judge(mutate(answer, 1000.0 + expected_s), now=1000.0 + expected_s)
    assert not verdict.passed
    assert verdict.tier is Tier.BACKGROUND
    assert verdict.reasons == (reason,)


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
