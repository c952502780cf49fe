"""Proof-of-Physical-Work handshake: a timed compute challenge, ping-pong rounds and
telemetry under load, judged into a tier with an expiry and stated reasons.

The kernel is derived from a single-use nonce, so its answer cannot be looked up:
X <- (X @ A mod P) squared elementwise, plus the round number, mod P, for `rounds`
rounds over `size` x `size` matrices. Entries stay below P = 8191, so every
float64 dot product is an exact integer whatever the BLAS summation order: the
agent's GPU and the orchestrator's CPU agree bit for bit. The elementwise square
keeps the rounds from collapsing into a matrix power (no repeated-squaring
shortcut), so the time taken says how fast the GPU is. Time outside the nominal
band of the claimed GPU class fails: too slow means "not that GPU", impossibly
fast means a precomputed or outsourced answer.

Signatures are checked in the API layer; `judge` takes verified facts and a
`signature_valid` flag. A forged or wrong-node answer does not consume the
nonce (an attacker must not be able to burn an honest node's challenge).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from eth_utils import keccak

from orchestrator.domain.reliability import THERMAL_THROTTLE_MASK, GpuSample
from orchestrator.domain.types import Tier

MODULUS = 8191  # prime; (MODULUS-1)**2 * 1024 < 2**53 keeps float64 matmuls exact up to size 1024
MAX_SIZE = 1024


def kernel_answer(nonce: bytes, size: int, rounds: int) -> bytes:
    """The challenge answer: keccak of the final matrix as little-endian uint16."""
    if not 1 <= size <= MAX_SIZE or rounds < 1:
        raise ValueError(f"kernel needs 1 <= size <= {MAX_SIZE} and rounds >= 1")
    rng = np.random.Generator(np.random.PCG64(int.from_bytes(keccak(nonce), "big")))
    a = rng.integers(0, MODULUS, (size, size)).astype(np.float64)
    x = rng.integers(0, MODULUS, (size, size)).astype(np.float64)
    for round_number in range(rounds):
        x = np.mod(x @ a, MODULUS)
        x = np.mod(x * x + round_number, MODULUS)
    return keccak(x.astype("<u2").tobytes())


@dataclass(frozen=True, slots=True)
class GpuClass:
    """Nominal kernel speed of one GPU class; measure with `kernel_answer` on real cards."""

    name: str
    rounds_per_s: float  # kernel rounds per second at `PopwConfig.size`


DEFAULT_GPU_CLASSES: Mapping[str, GpuClass] = {
    g.name: g for g in (
        GpuClass("cpu", 20.0),
        GpuClass("rtx3060", 400.0),
        GpuClass("rtx3090", 900.0),
        GpuClass("rtx4090", 1500.0),
        GpuClass("a100", 3000.0),
        GpuClass("h100", 5000.0),
    )
}


class PopwReason(StrEnum):
    UNKNOWN_CHALLENGE = "unknown_challenge"  # nonce never issued (or long pruned)
    REPLAYED = "replayed"  # nonce already answered once
    FORGED = "forged"  # signature did not verify
    WRONG_NODE = "wrong_node"  # answer from a node the challenge was not issued to
    LATE = "late"  # after the deadline
    WRONG_ANSWER = "wrong_answer"
    TOO_SLOW_FOR_CLASS = "too_slow_for_class"  # not the GPU it claims
    IMPOSSIBLY_FAST = "impossibly_fast"  # precomputed or outsourced
    PROBE_LOSS = "probe_loss"  # too many ping-pong rounds lost
    HIGH_JITTER = "high_jitter"  # link too unstable for high-priority work
    THERMAL = "thermal"  # throttled or near slowdown under load


FAILING_REASONS = frozenset({PopwReason.UNKNOWN_CHALLENGE, PopwReason.REPLAYED, PopwReason.FORGED,
                             PopwReason.WRONG_NODE, PopwReason.LATE, PopwReason.WRONG_ANSWER,
                             PopwReason.TOO_SLOW_FOR_CLASS, PopwReason.IMPOSSIBLY_FAST,
                             PopwReason.PROBE_LOSS})


@dataclass(frozen=True, slots=True)
class PopwConfig:
    size: int = 256
    target_s: float = 2.0  # kernel time on the claimed class
    too_slow_factor: float = 2.0  # slower than target * this: not that GPU
    impossibly_fast_factor: float = 0.25  # faster than target * this: suspicious
    deadline_slack_s: float = 5.0  # network and scheduling allowance after the slow bound
    ping_rounds: int = 20
    max_probe_loss: float = 0.1  # fail above
    high_tier_max_jitter_ms: float = 20.0  # HIGH needs a link at least this steady
    slowdown_temp_c: float = 90.0
    thermal_margin_c: float = 5.0  # HIGH needs this far below slowdown under load
    high_validity_s: float = 6 * 3600.0  # a HIGH verdict must be refreshed this often
    standard_validity_s: float = 24 * 3600.0
    gpu_classes: Mapping[str, GpuClass] = field(default_factory=lambda: dict(DEFAULT_GPU_CLASSES))


@dataclass(frozen=True, slots=True)
class Challenge:
    nonce: bytes
    node_id: str
    gpu_class: str
    size: int
    rounds: int
    ping_rounds: int
    issued_at: float
    expected_s: float  # nominal kernel time on the claimed class
    deadline: float


@dataclass(frozen=True, slots=True)
class PopwFacts:
    """What the API layer verified about one answer (signature already checked)."""

    nonce: bytes
    node_id: str
    answer: bytes
    answered_at: float  # orchestrator receive time
    signature_valid: bool
    rtts_ms: Sequence[float | None]  # ping-pong rounds; None: lost
    gpu_under_load: Sequence[GpuSample]


@dataclass(frozen=True, slots=True)
class PopwVerdict:
    node_id: str
    passed: bool
    tier: Tier
    decided_at: float
    expires_at: float
    reasons: tuple[PopwReason, ...]  # why it failed, or why it is not HIGH

    def fresh(self, now: float) -> bool:
        return self.passed and now < self.expires_at


class ChallengeBook:
    """Issued challenges and their single-use state. `nonce` comes from the caller
    (`secrets.token_bytes(32)` in the service, a seeded RNG in the simulator)."""

    def __init__(self, config: PopwConfig | None = None) -> None:
        self.config = config or PopwConfig()
        self._issued: dict[bytes, Challenge] = {}
        self._answers: dict[bytes, bytes] = {}
        self._consumed: set[bytes] = set()

    def issue(self, node_id: str, claimed_gpu: str, nonce: bytes, now: float) -> Challenge:
        cfg = self.config
        gpu = cfg.gpu_classes.get(claimed_gpu)
        if gpu is None:
            raise ValueError(f"unknown GPU class {claimed_gpu!r}")
        if len(nonce) < 16:
            raise ValueError("a challenge nonce needs at least 16 bytes")
        if nonce in self._issued:
            raise ValueError("nonce already used for a challenge")
        rounds = max(1, round(cfg.target_s * gpu.rounds_per_s))
        expected_s = rounds / gpu.rounds_per_s
        challenge = Challenge(nonce, node_id, gpu.name, cfg.size, rounds, cfg.ping_rounds, now,
                              expected_s, now + expected_s * cfg.too_slow_factor
                              + cfg.deadline_slack_s)
        self._answers[nonce] = kernel_answer(nonce, cfg.size, rounds)
        self._issued[nonce] = challenge
        return challenge

    def judge(self, facts: PopwFacts, now: float) -> PopwVerdict:
        cfg = self.config
        challenge = self._issued.get(facts.nonce)

        def fail(reason: PopwReason) -> PopwVerdict:
            return PopwVerdict(facts.node_id, False, Tier.BACKGROUND, now,
                               now + cfg.standard_validity_s, (reason,))

        if challenge is None:
            return fail(PopwReason.UNKNOWN_CHALLENGE)
        if facts.nonce in self._consumed:
            return fail(PopwReason.REPLAYED)
        if not facts.signature_valid:
            return fail(PopwReason.FORGED)
        if facts.node_id != challenge.node_id:
            return fail(PopwReason.WRONG_NODE)
        self._consumed.add(facts.nonce)
        if facts.answered_at > challenge.deadline:
            return fail(PopwReason.LATE)
        if facts.answer != self._answers.pop(facts.nonce):
            return fail(PopwReason.WRONG_ANSWER)

        received = [r for r in facts.rtts_ms if r is not None]
        loss = 1.0 - len(received) / max(len(facts.rtts_ms), 1)
        if not facts.rtts_ms or loss > cfg.max_probe_loss:
            return fail(PopwReason.PROBE_LOSS)
        one_way_s = statistics.median(received) / 2000.0
        elapsed = facts.answered_at - challenge.issued_at - 2.0 * one_way_s
        if elapsed > challenge.expected_s * cfg.too_slow_factor:
            return fail(PopwReason.TOO_SLOW_FOR_CLASS)
        if elapsed < challenge.expected_s * cfg.impossibly_fast_factor:
            return fail(PopwReason.IMPOSSIBLY_FAST)

        degraded: list[PopwReason] = []
        jitter = statistics.pstdev(received) if len(received) > 1 else 0.0
        if jitter > cfg.high_tier_max_jitter_ms:
            degraded.append(PopwReason.HIGH_JITTER)
        hot_limit = cfg.slowdown_temp_c - cfg.thermal_margin_c
        if any(s.temperature_c >= hot_limit or s.throttle_reasons & THERMAL_THROTTLE_MASK
               for s in facts.gpu_under_load):
            degraded.append(PopwReason.THERMAL)
        if degraded:
            return PopwVerdict(facts.node_id, True, Tier.STANDARD, now,
                               now + cfg.standard_validity_s, tuple(degraded))
        return PopwVerdict(facts.node_id, True, Tier.HIGH, now, now + cfg.high_validity_s, ())

    def prune(self, now: float, retention_s: float = 86_400.0) -> int:
        """Forget challenges whose deadline passed more than `retention_s` ago; a replay of
        one after that is still refused, as an unknown challenge. Returns how many."""
        old = [n for n, c in self._issued.items() if c.deadline + retention_s < now]
        for nonce in old:
            del self._issued[nonce]
            self._answers.pop(nonce, None)
            self._consumed.discard(nonce)
        return len(old)

    def pending(self, now: float) -> list[Challenge]:
        return [c for n, c in self._issued.items()
                if n not in self._consumed and now <= c.deadline]

