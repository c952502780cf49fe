"""The typed outbox actions and their one codec: rows written before the codec existed read
back as the same actions, every action round-trips, and a bad field is refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.domain.chain_actions import (
    AssignCollateral,
    ChainAction,
    CommitEpoch,
    PayloadError,
    ProveAssignment,
    ReserveCollateral,
    SetTier,
    SettleJob,
    SlashCollateral,
    assignment_tree,
    decode,
    encode,
)
from orchestrator.domain.merkle import assignment_leaf, placement_id, verify

JOB = "0x" + "11" * 32
ROOT = "0x" + "22" * 32
EVIDENCE = "0x" + "ee" * 32
ALICE = "0xABaBaBaBABabABabAbAbABAbABabababaBaBABaB"  # EIP-55 of 0xabab...
BOB = "0x" + "cd" * 20
BOB_CHECKSUMMED = "0xCdCDCdCdcdcdcdCdcDcDCdcDcDCdCdcdCdcDCDcD"

# Payloads exactly as the code before the codec wrote them (hand-built dicts): a stored row of
# each kind must read back as this action, and the codec must write the same payload again.
LEGACY_ROWS: list[tuple[str, dict[str, Any], ChainAction]] = [
    ("settle", {"job_id": JOB, "providers": [ALICE], "payouts": ["9"], "merkle_root": ROOT},
     SettleJob(bytes.fromhex("11" * 32), (ALICE,), (9,), bytes.fromhex("22" * 32))),
    ("settle", {"job_id": JOB, "providers": [], "payouts": [], "merkle_root": None},
     SettleJob(bytes.fromhex("11" * 32), (), (), None)),
    ("commit", {"epoch": 12, "root": ROOT}, CommitEpoch(12, bytes.fromhex("22" * 32))),
    ("tier", {"provider": ALICE, "tier": 0, "node_id": "gpu-1", "detail": "low RS"},
     SetTier(ALICE, 0, node_id="gpu-1", detail="low RS")),
]

# The collateral kinds of standing reservations, as the codec writes them.
COLLATERAL_ROWS: list[tuple[str, dict[str, Any], ChainAction]] = [
    ("reserve", {"provider": ALICE, "amount": "900", "until": 1_700_000_000},
     ReserveCollateral(ALICE, 900, 1_700_000_000)),
    ("assign", {"job_id": JOB, "provider": ALICE, "placement": str(7 << 32 | 1),
                "collateral": "500"},
     AssignCollateral(bytes.fromhex("11" * 32), ALICE, placement_id(7, 1), 500)),
    ("prove", {"job_id": JOB, "provider": ALICE, "placement": "9"},
     ProveAssignment(bytes.fromhex("11" * 32), ALICE, 9)),
    ("slash", {"job_id": JOB, "provider": ALICE, "placement": "9", "amount": "40",
               "reason": 1, "evidence": EVIDENCE},
     SlashCollateral(bytes.fromhex("11" * 32), ALICE, 9, 40, 1, bytes.fromhex("ee" * 32))),
]


@pytest.mark.parametrize(("kind", "payload", "action"), LEGACY_ROWS + COLLATERAL_ROWS)
def test_rows_written_before_the_codec_read_back_and_are_written_the_same(
        kind: str, payload: dict[str, Any], action: ChainAction) -> None:
    assert decode(kind, payload) == action
    assert action.kind == kind
    assert encode(action) == payload


def test_every_action_round_trips_and_addresses_are_checksummed_once() -> None:
    for action in (AssignCollateral(bytes(32), BOB, 1, 1), ReserveCollateral(BOB, 0, 5),
                   ProveAssignment(bytes(32), BOB, 2**256 - 1),
                   SettleJob(bytes(32), (BOB, ALICE), (2**256 - 1, 0)),
                   SetTier(BOB, 2), SlashCollateral(bytes(32), BOB, 1, 3, 2, bytes(32)),
                   CommitEpoch(0, bytes(32))):
        assert decode(action.kind, encode(action)) == action
    assert AssignCollateral(bytes(32), BOB, 1, 1).provider == BOB_CHECKSUMMED
    assert encode(SetTier(BOB, 2)) == {"provider": BOB_CHECKSUMMED, "tier": 2}


@pytest.mark.parametrize("kind", ["assign", "prove", "slash"])
def test_a_placement_row_without_its_placement_is_refused(kind: str) -> None:
    """Rows of (job, provider) from before placements were keyed on chain name no placement,
    and placement 0 is the job lock's id: neither can build a transaction."""
    payload = {"job_id": JOB, "provider": ALICE, "collateral": "500", "amount": "40",
               "reason": 1, "evidence": EVIDENCE}
    with pytest.raises(PayloadError, match=r"^placement holds None"):
        decode(kind, payload)
    with pytest.raises(PayloadError, match=r"^placement 0 is not a placement id"):
        decode(kind, {**payload, "placement": "0"})


def test_a_lock_row_from_before_reservations_is_refused_as_an_unknown_kind() -> None:
    with pytest.raises(PayloadError, match=r"^unknown outbox kind 'lock'$"):
        decode("lock", {"job_id": JOB, "providers": [ALICE], "amounts": ["500"]})


def test_the_assignment_tree_proves_each_assign_of_its_batch_and_nothing_else() -> None:
    # Two placements of one provider on one job with the same collateral are two leaves.
    batch = [AssignCollateral(bytes([i // 2]) * 32, ALICE, i + 1, 10 + i // 2) for i in range(6)]
    tree = assignment_tree(batch)
    assert len(set(tree.layers[0])) == len(batch)
    for assign in batch:
        leaf = assignment_leaf(assign.job_id, assign.provider, assign.placement, assign.collateral)
        assert verify(tree.proof(leaf), tree.root, leaf)
    real = assignment_leaf(batch[0].job_id, ALICE, 1, 10)
    for forged in (assignment_leaf(batch[0].job_id, ALICE, 1, 11),  # another collateral
                   assignment_leaf(batch[0].job_id, ALICE, 3, 10)):  # another placement
        assert not verify(tree.proof(real), tree.root, forged)


def test_decoding_reads_version_one_and_refuses_other_versions_and_kinds() -> None:
    assert decode("commit", {"v": 1, "epoch": "3", "root": ROOT}) == CommitEpoch(
        3, bytes.fromhex("22" * 32))
    with pytest.raises(PayloadError, match=r"^payload version 2 is not 1$"):
        decode("commit", {"v": 2, "epoch": 3, "root": ROOT})
    with pytest.raises(PayloadError, match=r"^unknown outbox kind 'mint'$"):
        decode("mint", {})


@pytest.mark.parametrize(("make", "reason"), [
    (lambda: SettleJob(bytes(32), (ALICE, BOB), (1,)), "2 providers but 1 payouts"),
    (lambda: AssignCollateral(bytes(31), ALICE, 1, 1), "job_id must be 32 bytes"),
    (lambda: AssignCollateral(bytes(32), "0x12", 1, 1), "provider holds '0x12', not an"),
    (lambda: AssignCollateral(bytes(32), ALICE, 0, 1), "placement 0 is not a placement id"),
    (lambda: ReserveCollateral(ALICE, 1, -5), "until holds -5, out of"),
    (lambda: SlashCollateral(bytes(32), ALICE, 1, -1, 1, bytes(32)), "amount holds -1, out of"),
    (lambda: SlashCollateral(bytes(32), ALICE, 1, 1, 1, b"e"), "evidence must be 32 bytes"),
    (lambda: SetTier(ALICE, True), "tier holds True, not an unsigned integer"),
    (lambda: CommitEpoch(2**256, bytes(32)), "epoch holds"),
])
def test_an_action_with_a_bad_field_cannot_be_made(make: Any, reason: str) -> None:
    with pytest.raises(PayloadError) as caught:
        make()
    assert str(caught.value).startswith(reason)


@pytest.mark.parametrize(("kind", "payload", "reason"), [
    ("assign", {"job_id": JOB, "provider": ALICE, "collateral": "1", "placement": "x"},
     "placement holds 'x', not an unsigned integer"),
    ("tier", {"provider": ALICE, "tier": 1, "detail": 5}, "detail holds 5, not text"),
    ("tier", {"provider": ALICE, "tier": 1, "node_id": 7}, "node_id holds 7, not text"),
    ("slash", {"job_id": JOB, "provider": ALICE, "amount": "1", "reason": 1},
     "evidence must be 32 bytes as 0x-hex, got None"),
    ("reserve", {"provider": ALICE, "amount": "1"}, "until holds None, not an unsigned"),
])
def test_a_malformed_row_is_refused_naming_its_field(kind: str, payload: dict[str, Any],
                                                     reason: str) -> None:
    with pytest.raises(PayloadError) as caught:
        decode(kind, payload)
    assert str(caught.value).startswith(reason)
