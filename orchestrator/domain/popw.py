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

Cheap to verify (commit and spot-check, non-interactive by Fiat-Shamir): the node
(`solve`) commits to every state X_0 .. X_R. Each state's digest d_r is the root of a
positional Merkle tree over its rows (leaf = keccak of the row as little-endian uint16);
the answer's root is a positional tree over the leaves keccak(keccak(abi.encode(uint256 r,
bytes32 d_r))). From keccak(nonce || root) come `spot_checks` distinct (round, row) cells;
for each the node opens row i of X_r. Row i of X_{r+1} depends on row i of X_r alone
((X A)_i = X_i A), so the judge (`check_answer`) recomputes it with one n^2 vector-matrix
product and folds both rows up to the root: milliseconds, against the node's R n^3 work,
and about 2 KB of answer per check instead of a whole matrix.

Why positional trees and not `merkle.MerkleTree` (sorted, commutative pairs): a sorted
tree commits to a SET, so a node could put two leaves with one round number in it. Then
one product Z = (Y A mod P)^2 serves every round (round r's successor is just Z + r), and
the whole chain "passes" for one matmul. A positional tree binds exactly one digest to
each round and row, so the opened links must be links of one chain.

Soundness: a node that skips or fakes a fraction q of the row-rounds passes all k checks
with probability about (1-q)^k; at the default k = 20 it is caught with probability 0.88
at q = 0.1, 0.997 at q = 0.25 and 1 - 1e-6 at q = 0.5. Grinding (varying the commitment
until the checks miss the fakes) costs a cheater little per try: he varies one faked leaf
and refolds its path, about log2(R) + 3 keccaks, not a recomputation of the chain. It
needs (1-q)^-k tries on average: at q = 0.5 and k = 20, about 1e6 tries x ~15 keccaks
(~1e4 integer ops each) ~ 1.5e11 operations, against the q R n^3 ~ 2.5e10 (rtx4090, R =
3000) to 8e10 (h100, R = 10000) multiply-adds the skipped rounds would have cost: grinding
is no cheaper than honest work for q >= 0.5 in every default class, and more expensive the
larger q. Smaller q saves less than the slack of the class band (`too_slow_factor`).
What spot checks cannot show is SEQUENTIALITY: faking m - 1 links (caught with probability
about k (m - 1) / R) splits the chain into m segments that m slower GPUs run in parallel. A
proof of sequential work (Cohen-Pietrzak) would close that; until then the timing says
"this much work in this time", not "on one GPU".

Signatures are checked in the API layer; `judge` takes verified facts and a
`signature_valid` flag. A forged or wrong-node answer does not consume the
nonce (an attacker must not be able to burn an honest node's challenge).
"""

from __future__ import annotations

import statistics
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from eth_utils import keccak

from orchestrator.domain.reliability import THERMAL_THROTTLE_MASK, GpuSample, link_jitter_ms
from orchestrator.domain.types import Tier

MODULUS = 8191  # prime; (MODULUS-1)**2 * 1024 < 2**53 keeps float64 matmuls exact up to size 1024
MAX_SIZE = 1024
MAX_PROOF_DEPTH = 64  # siblings in one Merkle path; 2**64 leaves is far beyond any challenge
MAX_SPOT_CHECKS = 1024


def kernel_start(nonce: bytes, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, X_0): the nonce's fixed matrix and its first state."""
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"kernel needs 1 <= size <= {MAX_SIZE}")
    rng = np.random.Generator(np.random.PCG64(int.from_bytes(keccak(nonce), "big")))
    a = rng.integers(0, MODULUS, (size, size)).astype(np.float64)
    x = rng.integers(0, MODULUS, (size, size)).astype(np.float64)
    return a, x


def kernel_round(x: np.ndarray, a: np.ndarray, round_number: int) -> np.ndarray:
    """X_{r+1} from X_r; on one row of X_r it gives that row of X_{r+1}."""
    y = np.mod(x @ a, MODULUS)
    return np.mod(y * y + round_number, MODULUS)


def state_bytes(x: np.ndarray) -> bytes:
    return x.astype("<u2").tobytes()


class PositionalTree:
    """A Merkle tree whose leaves keep their order, with keccak(left || right) nodes: a path
    proves WHICH position a leaf holds, so a root binds one value per index. An odd node is
    carried up unchanged, as in `merkle.MerkleTree`."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        if not leaves:
            raise ValueError("a Merkle tree needs at least one leaf")
        layer = list(leaves)
        self.layers = [layer]
        while len(layer) > 1:
            nxt = [keccak(layer[i] + layer[i + 1]) for i in range(0, len(layer) - 1, 2)]
            if len(layer) % 2:
                nxt.append(layer[-1])
            layer = nxt
            self.layers.append(layer)

    @property
    def root(self) -> bytes:
        return self.layers[-1][0]

    def proof(self, index: int) -> tuple[bytes, ...]:
        path: list[bytes] = []
        for layer in self.layers[:-1]:
            if index ^ 1 < len(layer):
                path.append(layer[index ^ 1])
            index //= 2
        return tuple(path)


def fold_path(leaf: bytes, index: int, proof: Sequence[bytes], leaf_count: int) -> bytes | None:
    """The root a positional proof leads to, or None when the path does not fit a tree of
    `leaf_count` leaves (wrong length or index out of range)."""
    if not 0 <= index < leaf_count:
        return None
    node, used, width = leaf, 0, leaf_count
    while width > 1:
        if index ^ 1 < width:
            if used == len(proof):
                return None
            sibling = proof[used]
            used += 1
            node = keccak(node + sibling) if index % 2 == 0 else keccak(sibling + node)
        index //= 2
        width = (width + 1) // 2
    return node if used == len(proof) else None


def row_tree(state: bytes, size: int) -> PositionalTree:
    """Tree over the rows of one state (uint16 bytes); its root is the state's digest."""
    width = 2 * size
    return PositionalTree([keccak(state[i:i + width]) for i in range(0, len(state), width)])


def round_leaf(round_number: int, digest: bytes) -> bytes:
    """keccak(keccak(abi.encode(uint256 round, bytes32 digest))), OpenZeppelin's leaf form
    (two static words: the ABI encoding is their concatenation)."""
    return keccak(keccak(round_number.to_bytes(32, "big") + digest))


def spot_checks(nonce: bytes, root: bytes, rounds: int, size: int,
                count: int) -> list[tuple[int, int]]:
    """The (round, row) cells to open, from keccak(nonce || root || counter): distinct,
    round in [0, rounds), row in [0, size); all cells when there are fewer than `count`."""
    cells = rounds * size
    count = min(count, cells)
    chosen: dict[int, None] = {}  # ordered set
    counter = 0
    while len(chosen) < count:
        draw = int.from_bytes(keccak(nonce + root + counter.to_bytes(8, "big")), "big") % cells
        chosen.setdefault(draw)
        counter += 1
    return [divmod(cell, size) for cell in chosen]


@dataclass(frozen=True, slots=True)
class SpotOpening:
    """One checked link: row i of X_r and the paths that tie it, and the row i of X_{r+1}
    the judge recomputes from it, to the root."""

    row: bytes  # row i of X_r, little-endian uint16
    row_proof: tuple[bytes, ...]  # row leaf -> d_r
    round_proof: tuple[bytes, ...]  # (r, d_r) leaf -> root
    next_row_proof: tuple[bytes, ...]  # row i of X_{r+1} -> d_{r+1}
    next_round_proof: tuple[bytes, ...]  # (r+1, d_{r+1}) leaf -> root


@dataclass(frozen=True, slots=True)
class PopwAnswer:
    """A node's answer: the commitment, the final digest and the spot-check openings in the
    order `spot_checks(nonce, root, ...)` draws them. `to_bytes` is the wire form."""

    root: bytes
    final_digest: bytes  # d_R
    start_proof: tuple[bytes, ...]  # (0, d_0) -> root; the judge derives d_0 from the nonce
    final_proof: tuple[bytes, ...]  # (R, d_R) -> root
    openings: tuple[SpotOpening, ...]

    def to_bytes(self) -> bytes:
        """root, final digest, start and final paths, u16 count, then per opening: u16 row
        length, row, four paths. A path is a u8 length and its 32-byte siblings."""
        def path(p: Sequence[bytes]) -> bytes:
            return bytes([len(p)]) + b"".join(p)

        parts = [self.root, self.final_digest, path(self.start_proof), path(self.final_proof),
                 struct.pack(">H", len(self.openings))]
        for o in self.openings:
            parts += [struct.pack(">H", len(o.row)), o.row, path(o.row_proof),
                      path(o.round_proof), path(o.next_row_proof), path(o.next_round_proof)]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> PopwAnswer:
        """Parse the wire form; ValueError when it is truncated, too long or has a path or
        row beyond the limits any challenge allows."""
        reader = _Reader(data)
        root, final_digest = reader.take(32), reader.take(32)
        start_proof, final_proof = reader.path(), reader.path()
        count = reader.u16()
        if count > MAX_SPOT_CHECKS:
            raise ValueError(f"at most {MAX_SPOT_CHECKS} openings")
        openings = []
        for _ in range(count):
            row_length = reader.u16()
            if row_length == 0 or row_length > 2 * MAX_SIZE:
                raise ValueError("row length outside 1..2*MAX_SIZE bytes")
            openings.append(SpotOpening(reader.take(row_length), reader.path(), reader.path(),
                                        reader.path(), reader.path()))
        reader.done()
        return cls(root, final_digest, start_proof, final_proof, tuple(openings))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def take(self, n: int) -> bytes:
        if self._at + n > len(self._data):
            raise ValueError("answer is truncated")
        chunk = self._data[self._at:self._at + n]
        self._at += n
        return chunk

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def path(self) -> tuple[bytes, ...]:
        depth = self.take(1)[0]
        if depth > MAX_PROOF_DEPTH:
            raise ValueError(f"a Merkle path has at most {MAX_PROOF_DEPTH} siblings")
        return tuple(self.take(32) for _ in range(depth))

    def done(self) -> None:
        if self._at != len(self._data):
            raise ValueError("trailing bytes after the answer")


@dataclass(frozen=True, slots=True)
class GpuClass:
    """Nominal speeds of one GPU class: the challenge kernel's (measure with `solve` on real
    cards) and Cycles renders' relative to the reference card, an RTX 3090 (the reference
    GPU-hour tasks are sized and priced in). A passing handshake proves the class within
    `PopwConfig.too_slow_factor`, so placement may plan a task's wall time by it."""

    name: str
    rounds_per_s: float  # kernel rounds per second at `PopwConfig.size`, commitment included
    render_speed: float  # Cycles throughput relative to an RTX 3090


DEFAULT_GPU_CLASSES: Mapping[str, GpuClass] = {
    g.name: g for g in (
        GpuClass("cpu", 20.0, 0.05),
        GpuClass("rtx3060", 400.0, 0.55),
        GpuClass("rtx3080", 700.0, 0.85),
        GpuClass("rtx3090", 900.0, 1.0),
        GpuClass("rtx4090", 1500.0, 1.8),
        GpuClass("a100", 3000.0, 2.2),
        GpuClass("h100", 5000.0, 3.0),
    )
}


class PopwReason(StrEnum):
    UNKNOWN_CHALLENGE = "unknown_challenge"  # nonce never issued (or long pruned)
    REPLAYED = "replayed"  # nonce already answered once
    FORGED = "forged"  # signature did not verify
    WRONG_NODE = "wrong_node"  # answer from a node the challenge was not issued to
    LATE = "late"  # after the deadline
    WRONG_ANSWER = "wrong_answer"  # a spot check or a Merkle path failed
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
    spot_checks: int = 20  # opened (round, row) cells; see the module docstring for why 20
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
class KernelSpec:
    """What a node computes: all `solve` needs, and all the challenge route tells it."""

    nonce: bytes
    size: int
    rounds: int
    spot_checks: int


@dataclass(frozen=True, slots=True)
class Challenge:
    nonce: bytes
    node_id: str
    gpu_class: str
    size: int
    rounds: int
    spot_checks: int
    ping_rounds: int
    issued_at: float
    expected_s: float  # nominal kernel time on the claimed class
    deadline: float

    @property
    def kernel(self) -> KernelSpec:
        return KernelSpec(self.nonce, self.size, self.rounds, self.spot_checks)


def max_answer_bytes(size: int, rounds: int, spot_checks: int) -> int:
    """Upper bound of `PopwAnswer.to_bytes()` for a challenge (paths can be shorter where an
    odd node was carried up): to size body limits without solving."""
    round_path = 1 + 32 * max(1, rounds).bit_length()
    row_path = 1 + 32 * (size - 1).bit_length()
    opening = 2 + 2 * size + 2 * row_path + 2 * round_path
    return 64 + 2 * round_path + 2 + min(spot_checks, rounds * size) * opening


def solve(challenge: KernelSpec) -> PopwAnswer:
    """The node's side: run all rounds, commit to every state, open the drawn cells. Keeps
    every state (rounds x size^2 x 2 bytes) because the cells are known only at the end."""
    size, rounds = challenge.size, challenge.rounds
    a, x = kernel_start(challenge.nonce, size)
    states = [state_bytes(x)]
    digests = [row_tree(states[0], size).root]
    for round_number in range(rounds):
        x = kernel_round(x, a, round_number)
        states.append(state_bytes(x))
        digests.append(row_tree(states[-1], size).root)
    rounds_tree = PositionalTree([round_leaf(r, d) for r, d in enumerate(digests)])
    width = 2 * size
    openings = []
    for r, i in spot_checks(challenge.nonce, rounds_tree.root, rounds, size,
                            challenge.spot_checks):
        openings.append(SpotOpening(
            states[r][i * width:(i + 1) * width], row_tree(states[r], size).proof(i),
            rounds_tree.proof(r), row_tree(states[r + 1], size).proof(i),
            rounds_tree.proof(r + 1)))
    return PopwAnswer(rounds_tree.root, digests[-1], rounds_tree.proof(0),
                      rounds_tree.proof(rounds), tuple(openings))


def check_answer(challenge: KernelSpec, answer: PopwAnswer) -> bool:
    """The judge's side: the chain starts at the nonce's X_0, ends at the claimed d_R, and
    every drawn link recomputes. Cost: one size^2 product and a few dozen keccaks per check."""
    size, rounds = challenge.size, challenge.rounds
    leaf_count = rounds + 1
    cells = spot_checks(challenge.nonce, answer.root, rounds, size, challenge.spot_checks)
    if len(answer.openings) != len(cells):
        return False
    a, x0 = kernel_start(challenge.nonce, size)
    start_leaf = round_leaf(0, row_tree(state_bytes(x0), size).root)
    if (fold_path(start_leaf, 0, answer.start_proof, leaf_count) != answer.root
            or fold_path(round_leaf(rounds, answer.final_digest), rounds, answer.final_proof,
                         leaf_count) != answer.root):
        return False
    for (r, i), opening in zip(cells, answer.openings, strict=True):
        if len(opening.row) != 2 * size:
            return False
        # no range check needed: a row with entries >= P is not the canonical successor of
        # anything, so the link INTO its state fails wherever it is drawn, and float64 stays
        # exact for any uint16 (65535 * 8190 * 1024 < 2**53)
        row = np.frombuffer(opening.row, dtype="<u2")
        digest = fold_path(keccak(opening.row), i, opening.row_proof, size)
        next_row = state_bytes(kernel_round(row.astype(np.float64), a, r))
        next_digest = fold_path(keccak(next_row), i, opening.next_row_proof, size)
        if (digest is None or next_digest is None
                or fold_path(round_leaf(r, digest), r, opening.round_proof,
                             leaf_count) != answer.root
                or fold_path(round_leaf(r + 1, next_digest), r + 1, opening.next_round_proof,
                             leaf_count) != answer.root):
            return False
    return True


@dataclass(frozen=True, slots=True)
class PopwFacts:
    """What the API layer verified about one answer (signature already checked)."""

    nonce: bytes
    node_id: str
    answer: PopwAnswer
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
    gpu_class: str | None = None  # the class a passing handshake proved

    def fresh(self, now: float) -> bool:
        return self.passed and now < self.expires_at


class ChallengeBook:
    """Issued challenges and their single-use state. `nonce` comes from the caller
    (`secrets.token_bytes(32)` in the service, a seeded RNG in the simulator). Issuing is
    O(1): nothing is computed until an answer comes, and then only the spot checks."""

    def __init__(self, config: PopwConfig | None = None) -> None:
        self.config = config or PopwConfig()
        self._issued: dict[bytes, Challenge] = {}
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
        challenge = Challenge(nonce, node_id, gpu.name, cfg.size, rounds, cfg.spot_checks,
                              cfg.ping_rounds, now, expected_s,
                              now + expected_s * cfg.too_slow_factor + cfg.deadline_slack_s)
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
        if not check_answer(challenge.kernel, facts.answer):
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
        if link_jitter_ms(received) > cfg.high_tier_max_jitter_ms:
            degraded.append(PopwReason.HIGH_JITTER)
        hot_limit = cfg.slowdown_temp_c - cfg.thermal_margin_c
        if any(s.temperature_c >= hot_limit or s.throttle_reasons & THERMAL_THROTTLE_MASK
               for s in facts.gpu_under_load):
            degraded.append(PopwReason.THERMAL)
        if degraded:
            return PopwVerdict(facts.node_id, True, Tier.STANDARD, now,
                               now + cfg.standard_validity_s, tuple(degraded),
                               challenge.gpu_class)
        return PopwVerdict(facts.node_id, True, Tier.HIGH, now, now + cfg.high_validity_s, (),
                           challenge.gpu_class)

    def prune(self, now: float, retention_s: float = 86_400.0) -> int:
        """Forget challenges whose deadline passed more than `retention_s` ago; a replay of
        one after that is still refused, as an unknown challenge. Returns how many."""
        old = [n for n, c in self._issued.items() if c.deadline + retention_s < now]
        for nonce in old:
            del self._issued[nonce]
            self._consumed.discard(nonce)
        return len(old)

    def pending(self, now: float) -> list[Challenge]:
        return [c for n, c in self._issued.items()
                if n not in self._consumed and now <= c.deadline]
