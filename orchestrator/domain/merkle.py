"""Merkle trees that verify with OpenZeppelin's `MerkleProof.verify`.

Pairs are hashed sorted (commutative keccak), and leaves are double-hashed
(`keccak256(bytes.concat(keccak256(abi.encode(...))))`) as OpenZeppelin's
StandardMerkleTree does, so a leaf can never be mistaken for an inner node.
The score leaf layout is the one `StakeManager.slashForScore` rebuilds on chain; the
assignment leaf is the one `JobEscrow.proveAssignment` rebuilds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eth_abi import encode
from eth_utils import keccak, to_checksum_address

SCORE_SCALE = 10_000
"""Reliability scores go on chain in basis points: 0 ... 10_000 == RS 0.0 ... 1.0."""


def score_leaf(provider: str, score_bps: int, telemetry_digest: bytes) -> bytes:
    """Leaf for one provider's epoch entry: (address provider, uint256 scoreBps, bytes32 digest)."""
    if not 0 <= score_bps <= SCORE_SCALE:
        raise ValueError(f"score_bps {score_bps} outside 0..{SCORE_SCALE}")
    if len(telemetry_digest) != 32:
        raise ValueError(f"telemetry digest must be 32 bytes, got {len(telemetry_digest)}")
    inner = keccak(encode(["address", "uint256", "bytes32"],
                          [to_checksum_address(provider), score_bps, telemetry_digest]))
    return keccak(inner)


def placement_id(task_id: int, attempt: int) -> int:
    """The on-chain id of one placement, a task attempt: `task_id << 32 | attempt`. Never 0
    (task ids start at 1), the id `StakeManager.slashCollateral` reserves for a job lock."""
    if task_id < 1 or not 0 <= attempt < 2**32:
        raise ValueError(f"no placement id for task {task_id} attempt {attempt}")
    return task_id << 32 | attempt


def check_placement(placement: int) -> int:
    """`placement` when it can name a leaf (1 .. 2**256 - 1); 0 names a job lock."""
    if not 0 < placement < 2**256:
        raise ValueError(f"placement {placement} is not a placement id (1 .. 2**256 - 1)")
    return placement


def assignment_leaf(job_id: bytes, provider: str, placement: int, collateral: int) -> bytes:
    """Leaf for one placement: (bytes32 jobId, address provider, uint256 placement, uint256
    collateral), meaning `provider`'s standing reservation backs its placement `placement` on
    job `job_id` with `collateral`, slashable on its own up to that amount."""
    if len(job_id) != 32:
        raise ValueError(f"job id must be 32 bytes, got {len(job_id)}")
    inner = keccak(encode(["bytes32", "address", "uint256", "uint256"],
                          [job_id, to_checksum_address(provider), check_placement(placement),
                           collateral]))
    return keccak(inner)


def hash_pair(a: bytes, b: bytes) -> bytes:
    return keccak(a + b) if a < b else keccak(b + a)


@dataclass(frozen=True)
class MerkleTree:
    """A complete tree over leaf hashes; `layers[0]` are the leaves, `layers[-1]` the root."""

    layers: tuple[tuple[bytes, ...], ...]

    @classmethod
    def build(cls, leaves: Sequence[bytes]) -> MerkleTree:
        if not leaves:
            raise ValueError("a Merkle tree needs at least one leaf")
        layer = tuple(sorted(leaves))  # sorted: the root depends on the set, not the order given
        layers = [layer]
        while len(layer) > 1:
            nxt = [hash_pair(layer[i], layer[i + 1]) for i in range(0, len(layer) - 1, 2)]
            if len(layer) % 2:
                nxt.append(layer[-1])  # an odd node is carried up unchanged
            layer = tuple(nxt)
            layers.append(layer)
        return cls(tuple(layers))

    @property
    def root(self) -> bytes:
        return self.layers[-1][0]

    def proof(self, leaf: bytes) -> list[bytes]:
        try:
            index = self.layers[0].index(leaf)
        except ValueError:
            raise KeyError("leaf is not in the tree") from None
        path: list[bytes] = []
        for layer in self.layers[:-1]:
            sibling = index ^ 1
            if sibling < len(layer):
                path.append(layer[sibling])
            index //= 2
        return path


def verify(proof: Sequence[bytes], root: bytes, leaf: bytes) -> bool:
    """Same fold as OpenZeppelin `MerkleProof.verify`."""
    node = leaf
    for sibling in proof:
        node = hash_pair(node, sibling)
    return node == root
