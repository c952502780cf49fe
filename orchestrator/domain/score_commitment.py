"""The per-epoch score commitment: what goes on chain so that any slash or dispute can be
proven against it.

Each epoch the orchestrator commits one Merkle root over (provider, RS in basis points,
telemetry digest) leaves (`merkle.score_leaf`, the layout `StakeManager.slashForScore`
rebuilds), one leaf per provider. The telemetry digest is the keccak of a node's
`WindowSummary` (`ReliabilityBook.summary`): integer-scaled evidence behind its score, which
anyone holding the summary can recompute; the proof of a provider's leaf comes from the tree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from eth_abi import encode
from eth_utils import keccak

from orchestrator.domain.merkle import SCORE_SCALE, MerkleTree, score_leaf


@dataclass(frozen=True, slots=True)
class WindowSummary:
    """Canonical, integer-scaled summary of a node's long window: the evidence behind its
    epoch score and any slash. Its keccak is the telemetry digest committed on chain."""

    node_id: str
    window_end_s: int
    probes: int
    probes_lost: int
    rtt_mean_us: int
    jitter_us: int
    max_heartbeat_gap_ms: int
    upload_kbps: int
    temperature_mc: int  # milli-degrees Celsius
    throttled_bps: int  # share of GPU samples thermally throttled
    sessions: int
    abrupt_departures: int
    uptime_s: int
    tasks_completed: int
    tasks_failed: int

    ABI_TYPES = ("string", "uint64", "uint32", "uint32", "uint64", "uint64", "uint64", "uint64",
                 "int64", "uint16", "uint32", "uint32", "uint64", "uint32", "uint32")


def telemetry_digest(summary: WindowSummary) -> bytes:
    """keccak256(abi.encode(summary fields in declaration order)): anyone holding the summary
    can recompute it; fields are integers so no float formatting enters the hash."""
    values = [getattr(summary, name) for name in WindowSummary.__dataclass_fields__]
    return keccak(encode(list(WindowSummary.ABI_TYPES), values))


@dataclass(frozen=True, slots=True)
class EpochEntry:
    provider: str  # checksummed address
    score_bps: int  # RS in basis points, 0..10_000
    telemetry_digest: bytes  # 32 bytes, `telemetry_digest(summary)`


@dataclass(frozen=True)
class EpochCommitment:
    tree: MerkleTree
    leaf_of: Mapping[str, bytes]  # provider -> leaf, to ask the tree for its proof

    @property
    def root(self) -> bytes:
        return self.tree.root


def score_bps(rs: float) -> int:
    """RS as the contract's basis points; rounds down so a committed score never flatters."""
    if not 0.0 <= rs <= 1.0:
        raise ValueError(f"RS {rs} outside [0, 1]")
    return math.floor(rs * SCORE_SCALE)


def commit_epoch(entries: Sequence[EpochEntry]) -> EpochCommitment:
    """Merkle tree of one epoch's (provider, RS bps, digest) leaves, as `slashForScore` checks.
    One leaf per provider: two leaves for one provider would let either be proven."""
    leaf_of: dict[str, bytes] = {}
    for entry in entries:
        if entry.provider in leaf_of:
            raise ValueError(f"provider {entry.provider} appears twice in one epoch")
        leaf_of[entry.provider] = score_leaf(entry.provider, entry.score_bps,
                                             entry.telemetry_digest)
    return EpochCommitment(MerkleTree.build(list(leaf_of.values())), leaf_of)
