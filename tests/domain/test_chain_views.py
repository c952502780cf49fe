"""The read models of on-chain state: every enum numbered as the contract's, and the stake a
provider has left to lock."""

from __future__ import annotations

import re
from enum import IntEnum
from pathlib import Path

import pytest

from orchestrator.domain.chain_views import (
    DisputeKind,
    DisputeStatus,
    EscrowStatus,
    ProviderStake,
    SlashStatus,
)
from orchestrator.domain.types import SlashReason, Tier

INTERFACES = Path(__file__).resolve().parents[2] / "contracts" / "interfaces"


def solidity_enum(interface: str, name: str) -> list[str]:
    """The members of `enum name` in contracts/interfaces/`interface`.sol, in order."""
    source = (INTERFACES / f"{interface}.sol").read_text()
    match = re.search(rf"enum\s+{name}\s*\{{(?P<body>[^}}]*)\}}", source)
    assert match is not None, f"{interface}.sol has no enum {name}"
    body = re.sub(r"//[^\n]*", "", match["body"])
    return [member.strip() for member in body.split(",") if member.strip()]


def snake_upper(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).upper()


@pytest.mark.parametrize(("python", "interface", "solidity"), [
    (EscrowStatus, "IJobEscrow", "JobStatus"),
    (SlashStatus, "IStakeManager", "SlashStatus"),
    (SlashReason, "IStakeManager", "SlashReason"),
    (Tier, "IStakeManager", "Tier"),
    (DisputeKind, "IDisputes", "DisputeKind"),
    (DisputeStatus, "IDisputes", "DisputeStatus"),
])
def test_enums_are_numbered_as_the_contracts_number_them(
        python: type[IntEnum], interface: str, solidity: str) -> None:
    members = solidity_enum(interface, solidity)
    assert [(snake_upper(name), index) for index, name in enumerate(members)] == [
        (member.name, member.value) for member in python]


def test_hand_listed_numbering_of_the_states_money_depends_on() -> None:
    """A second, hand-written check: a renumbering in both the contract and here still fails."""
    assert (EscrowStatus.FUNDED, EscrowStatus.SETTLED, EscrowStatus.RECLAIMED) == (1, 2, 3)
    assert (SlashStatus.PENDING, SlashStatus.FROZEN, SlashStatus.RELEASED,
            SlashStatus.REVERSED) == (1, 2, 3, 4)
    assert (DisputeStatus.OPEN, DisputeStatus.GRANTED, DisputeStatus.DISMISSED,
            DisputeStatus.DEFAULTED) == (1, 2, 3, 4)


@pytest.mark.parametrize(("bonded", "locked", "unbonding", "free"), [
    (100, 0, 0, 100),
    (100, 40, 0, 60),
    (100, 40, 25, 60),  # stake on its way out backs no new work: never free
    (100, 100, 0, 0),
])
def test_free_stake_is_what_is_bonded_and_not_locked(bonded: int, locked: int, unbonding: int,
                                                     free: int) -> None:
    stake = ProviderStake("0x" + "1" * 40, bonded, locked, unbonding, int(Tier.STANDARD))
    assert stake.free == free
