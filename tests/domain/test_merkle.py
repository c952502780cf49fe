"""Score leaves: the range and digest checks in front of the on-chain layout."""

from __future__ import annotations

import pytest
from eth_abi import encode
from eth_utils import keccak

from orchestrator.domain.merkle import assignment_leaf, placement_id, score_leaf

PROVIDER = "0x" + "ab" * 20
DIGEST = b"\x07" * 32


@pytest.mark.parametrize("score_bps", [0, 9_999, 10_000])
def test_score_leaf_accepts_the_whole_range_and_double_hashes_the_abi_tuple(
        score_bps: int) -> None:
    inner = keccak(encode(["address", "uint256", "bytes32"], [PROVIDER, score_bps, DIGEST]))
    assert score_leaf(PROVIDER, score_bps, DIGEST) == keccak(inner)


@pytest.mark.parametrize("score_bps", [-1, 10_001])
def test_score_outside_basis_points_is_refused(score_bps: int) -> None:
    with pytest.raises(ValueError, match=f"score_bps {score_bps} outside 0..10000"):
        score_leaf(PROVIDER, score_bps, DIGEST)


def test_digest_of_another_length_is_refused() -> None:
    with pytest.raises(ValueError, match="telemetry digest must be 32 bytes, got 31"):
        score_leaf(PROVIDER, 5_000, DIGEST[:31])


@pytest.mark.parametrize("length", [0, 31, 33])
def test_an_assignment_of_a_job_id_of_another_length_is_refused_naming_it(length: int) -> None:
    with pytest.raises(ValueError, match=f"^job id must be 32 bytes, got {length}$"):
        assignment_leaf(b"\x01" * length, "0x" + "ab" * 20, 1, 10)


def test_a_placement_id_is_the_task_and_attempt_and_never_the_job_locks_zero() -> None:
    assert placement_id(7, 0) == 7 << 32
    assert placement_id(1, 0) == 1 << 32  # the first task's first attempt
    assert placement_id(7, 3) != placement_id(7, 2) != placement_id(8, 2)
    for task_id, attempt in ((0, 0), (1, -1), (1, 2**32)):
        with pytest.raises(ValueError, match="no placement id"):
            placement_id(task_id, attempt)
    with pytest.raises(ValueError, match="placement 0 is not a placement id"):
        assignment_leaf(b"\x01" * 32, "0x" + "ab" * 20, 0, 10)
