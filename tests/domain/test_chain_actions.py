"""The typed outbox actions and their one codec: rows written before the codec existed read
back as the same actions, every action round-trips, and a bad field is refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.domain.chain_actions import (
    ChainAction,
    CommitEpoch,
    LockCollateral,
    PayloadError,
    SetTier,
    SettleJob,
    SlashCollateral,
    decode,
    encode,
)

JOB = "0x" + "11" * 32
ROOT = "0x" + "22" * 32
EVIDENCE = "0x" + "ee" * 32
ALICE = "0xABaBaBaBABabABabAbAbABAbABabababaBaBABaB"  # EIP-55 of 0xabab...
BOB = "0x" + "cd" * 20
BOB_CHECKSUMMED = "0xCdCDCdCdcdcdcdCdcDcDCdcDcDCdCdcdCdcDCDcD"

# Payloads exactly as the code before the codec wrote them (hand-built dicts): a stored row of
# each kind must read back as this action, and the codec must write the same payload again.
LEGACY_ROWS: list[tuple[str, dict[str, Any], ChainAction]] = [
    ("lock", {"job_id": JOB, "providers": [ALICE], "amounts": ["500"], "task_id": 7},
     LockCollateral(bytes.fromhex("11" * 32), (ALICE,), (500,), task_id=7)),
    ("settle", {"job_id": JOB, "providers": [ALICE], "payouts": ["9"], "merkle_root": ROOT},
     SettleJob(bytes.fromhex("11" * 32), (ALICE,), (9,), bytes.fromhex("22" * 32))),
    ("settle", {"job_id": JOB, "providers": [], "payouts": [], "merkle_root": None},
     SettleJob(bytes.fromhex("11" * 32), (), (), None)),
    ("commit", {"epoch": 12, "root": ROOT}, CommitEpoch(12, bytes.fromhex("22" * 32))),
    ("tier", {"provider": ALICE, "tier": 0, "node_id": "gpu-1", "detail": "low RS"},
     SetTier(ALICE, 0, node_id="gpu-1", detail="low RS")),
    ("slash", {"job_id": JOB, "provider": ALICE, "amount": "40", "reason": 1,
               "evidence": EVIDENCE},
     SlashCollateral(bytes.fromhex("11" * 32), ALICE, 40, 1, bytes.fromhex("ee" * 32))),
]


@pytest.mark.parametrize(("kind", "payload", "action"), LEGACY_ROWS)
def test_rows_written_before_the_codec_read_back_and_are_written_the_same(
        kind: str, payload: dict[str, Any], action: ChainAction) -> None:
    assert decode(kind, payload) == action
    assert action.kind == kind
    assert encode(action) == payload


def test_every_action_round_trips_and_addresses_are_checksummed_once() -> None:
    for action in (LockCollateral(bytes(32), (BOB,), (1,)),
                   SettleJob(bytes(32), (BOB, ALICE), (2**256 - 1, 0)),
                   SetTier(BOB, 2), SlashCollateral(bytes(32), BOB, 3, 2, bytes(32)),
                   CommitEpoch(0, bytes(32))):
        assert decode(action.kind, encode(action)) == action
    assert LockCollateral(bytes(32), (BOB,), (1,)).providers == (BOB_CHECKSUMMED,)
    assert encode(SetTier(BOB, 2)) == {"provider": BOB_CHECKSUMMED, "tier": 2}
    assert "task_id" not in encode(LockCollateral(bytes(32), (BOB,), (1,)))


def test_decoding_reads_version_one_and_refuses_other_versions_and_kinds() -> None:
    assert decode("commit", {"v": 1, "epoch": "3", "root": ROOT}) == CommitEpoch(
        3, bytes.fromhex("22" * 32))
    with pytest.raises(PayloadError, match=r"^payload version 2 is not 1$"):
        decode("commit", {"v": 2, "epoch": 3, "root": ROOT})
    with pytest.raises(PayloadError, match=r"^unknown outbox kind 'mint'$"):
        decode("mint", {})


@pytest.mark.parametrize(("make", "reason"), [
    (lambda: SettleJob(bytes(32), (ALICE, BOB), (1,)), "2 providers but 1 payouts"),
    (lambda: LockCollateral(bytes(31), (ALICE,), (1,)), "job_id must be 32 bytes"),
    (lambda: LockCollateral(bytes(32), ("0x12",), (1,)), "providers holds '0x12', not an"),
    (lambda: SlashCollateral(bytes(32), ALICE, -1, 1, bytes(32)), "amount holds -1, out of"),
    (lambda: SlashCollateral(bytes(32), ALICE, 1, 1, b"e"), "evidence must be 32 bytes"),
    (lambda: SetTier(ALICE, True), "tier holds True, not an unsigned integer"),
    (lambda: CommitEpoch(2**256, bytes(32)), "epoch holds"),
])
def test_an_action_with_a_bad_field_cannot_be_made(make: Any, reason: str) -> None:
    with pytest.raises(PayloadError) as caught:
        make()
    assert str(caught.value).startswith(reason)


@pytest.mark.parametrize(("kind", "payload", "reason"), [
    ("lock", {"job_id": JOB, "providers": [ALICE], "amounts": ["1"], "task_id": "x"},
     "task_id holds 'x', not an unsigned integer"),
    ("tier", {"provider": ALICE, "tier": 1, "detail": 5}, "detail holds 5, not text"),
    ("slash", {"job_id": JOB, "provider": ALICE, "amount": "1", "reason": 1},
     "evidence must be 32 bytes as 0x-hex, got None"),
    ("lock", {"job_id": JOB, "providers": [ALICE]}, "amounts must be a list"),
])
def test_a_malformed_row_is_refused_naming_its_field(kind: str, payload: dict[str, Any],
                                                     reason: str) -> None:
    with pytest.raises(PayloadError) as caught:
        decode(kind, payload)
    assert str(caught.value).startswith(reason)
