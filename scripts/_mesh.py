"""Shared by the ape scripts: find the deployed mesh contracts from `.mesh/deployment.json`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from ape import project

from orchestrator.chain.deployment import Deployment
from orchestrator.config import get_settings


def load_deployment() -> Deployment:
    return Deployment.load(Path(get_settings().data_dir))


def contract(name: str) -> Any:
    """The deployed `name` (TestToken, StakeManager, JobEscrow, Disputes) at its address."""
    deployment = load_deployment()
    address = {
        "TestToken": deployment.token,
        "StakeManager": deployment.stake_manager,
        "JobEscrow": deployment.job_escrow,
        "Disputes": deployment.disputes,
    }[name]
    return project.get_contract(name).at(address)


def bytes32_option(name: str, help_text: str) -> Any:
    """A 0x-prefixed 32-byte hex option (job ids, spec hashes, evidence digests)."""

    def convert(_ctx: click.Context, _param: click.Parameter, value: str | None) -> bytes | None:
        if value is None:
            return None
        raw = bytes.fromhex(value.removeprefix("0x"))
        if len(raw) != 32:
            raise click.BadParameter(f"expected 32 bytes of hex, got {len(raw)}")
        return raw

    return click.option(name, callback=convert, help=help_text)


def ensure_allowance(account: Any, spender: str, amount: int) -> None:
    token = contract("TestToken")
    if token.allowance(account.address, spender) < amount:
        token.approve(spender, amount, sender=account)
