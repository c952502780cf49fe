"""Outbox payloads: what a queued row must hold before any transaction is built from it, and
the one-line reason a malformed one fails with (no chain needed)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.chain.errors import ChainError
from orchestrator.chain.outbox_tx import settlement_of
from orchestrator.chain.sdk import Settlement
from orchestrator.config import Settings
from orchestrator.domain.chain_actions import CommitEpoch, PayloadError, SettleJob, decode
from orchestrator.services.outbox.sender import build_sender
from orchestrator.telemetry.metrics import MeshMetrics

JOB = "0x" + "11" * 32
ROOT = "0x" + "22" * 32
ALICE = "0x" + "ab" * 20
ALICE_CHECKSUMMED = "0xABaBaBaBABabABabAbAbABAbABabababaBaBABaB"  # EIP-55


def parse_settlement(payload: dict[str, Any]) -> Settlement:
    """A stored settle row as the escrow gets it: through the codec, then the chain's view."""
    action = decode("settle", payload)
    assert isinstance(action, SettleJob)
    return settlement_of(action)


def parse_commit(payload: dict[str, Any]) -> tuple[int, bytes]:
    action = decode("commit", payload)
    assert isinstance(action, CommitEpoch)
    return action.epoch, action.root


def settle(**overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"job_id": JOB, "providers": [ALICE], "payouts": ["7"],
                               "merkle_root": ROOT}
    payload.update(overrides)
    return payload


def test_a_settlement_parses_into_checksummed_providers_and_integer_payouts() -> None:
    assert parse_settlement(settle(payouts=[7], note="ignored")) == Settlement(
        job_id=bytes.fromhex("11" * 32), providers=(ALICE_CHECKSUMMED,), payouts=(7,),
        result_root=bytes.fromhex("22" * 32))
    assert parse_settlement(settle(merkle_root=None)).result_root == bytes(32)
    assert parse_settlement(settle(payouts=[str(2**256 - 1)])).payouts == (2**256 - 1,)
    assert parse_settlement(settle(payouts=["0"])).payouts == (0,)


@pytest.mark.parametrize(("overrides", "reason"), [
    ({"providers": ALICE}, "providers must be a list"),
    ({"payouts": None}, "payouts must be a list"),
    ({"payouts": ["7", "8"]}, "1 providers but 2 payouts"),
    ({"providers": ["0x1234"]}, "providers holds '0x1234', not an address"),
    ({"providers": [7]}, "providers holds 7, not an address"),
    ({"payouts": ["-1"]}, "payouts holds '-1', out of uint256 range"),
    ({"payouts": [str(2**256)]}, f"payouts holds '{2**256}', out of uint256 range"),
    ({"payouts": ["seven"]}, "payouts holds 'seven', not an unsigned integer"),
    ({"payouts": [True]}, "payouts holds True, not an unsigned integer"),
    ({"payouts": [7.0]}, "payouts holds 7.0, not an unsigned integer"),
    ({"job_id": "0x" + "11" * 31}, "job_id must be 32 bytes as 0x-hex, got '0x" + "11" * 31),
    ({"job_id": "0x" + "zz" * 32}, "job_id must be 32 bytes as 0x-hex, got '0x" + "zz" * 32),
    ({"job_id": 7}, "job_id must be 32 bytes as 0x-hex, got 7"),
    ({"merkle_root": "0x00"}, "merkle_root must be 32 bytes as 0x-hex, got '0x00'"),
])
def test_a_malformed_settlement_is_refused_with_its_reason(overrides: dict[str, Any],
                                                            reason: str) -> None:
    with pytest.raises(PayloadError) as caught:
        parse_settlement(settle(**overrides))
    assert str(caught.value).startswith(reason)


def test_a_commit_parses_and_a_malformed_one_names_its_field() -> None:
    assert parse_commit({"epoch": "9", "root": ROOT}) == (9, bytes.fromhex("22" * 32))
    assert parse_commit({"epoch": 9, "root": ROOT.removeprefix("0x")})[0] == 9
    with pytest.raises(PayloadError, match=r"^epoch holds 'x', not an unsigned integer$"):
        parse_commit({"epoch": "x", "root": ROOT})
    with pytest.raises(PayloadError, match=r"^root must be 32 bytes"):
        parse_commit({"epoch": 9})


def test_the_service_sender_needs_the_orchestrator_key(tmp_path: Any) -> None:
    settings = Settings(database_url="sqlite://", data_dir=tmp_path, json_logs=False)
    with pytest.raises(ChainError, match=r"^the outbox sender needs MESH_ORCHESTRATOR_KEY$"):
        build_sender(settings, MeshMetrics())
