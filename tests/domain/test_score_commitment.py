"""The per-epoch score commitment: basis points that never flatter, one leaf per provider,
each provable against the root."""

from __future__ import annotations

import pytest

from orchestrator.domain.merkle import verify
from orchestrator.domain.score_commitment import EpochEntry, commit_epoch, score_bps


def test_epoch_commitment_proves_every_provider() -> None:
    providers = [f"0x{i:040x}" for i in range(1, 6)]
    entries = [EpochEntry(p, score_bps(i / 5), bytes([i]) * 32) for i, p in enumerate(providers)]
    commitment = commit_epoch(entries)
    for provider in providers:
        leaf = commitment.leaf_of[provider]
        assert verify(commitment.tree.proof(leaf), commitment.root, leaf)
    with pytest.raises(ValueError, match="twice"):
        commit_epoch([*entries, entries[0]])


def test_score_bps_rounds_down_and_rejects_out_of_range() -> None:
    assert score_bps(0.99999) == 9999
    assert score_bps(1.0) == 10_000
    with pytest.raises(ValueError):
        score_bps(1.01)


def test_an_out_of_range_score_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"^RS 1.5 outside \[0, 1\]$"):
        score_bps(1.5)
