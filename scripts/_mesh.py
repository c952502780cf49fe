"""Shared by the ape scripts: find the deployed mesh contracts from `.mesh/deployment.json`,
and turn a revert into one line naming the contract's custom error and what to do."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from ape import project
from ape.exceptions import ApeException, ContractLogicError, CustomError
from hexbytes import HexBytes

from mesh.commands.common import explain
from orchestrator.chain.artifacts import load_artifacts
from orchestrator.chain.deployment import Deployment, DeploymentError
from orchestrator.chain.errors import ContractError, ErrorDecoder, snake_case
from orchestrator.config import get_settings

F = TypeVar("F", bound=Callable[..., Any])


def revert_line(error: ContractLogicError) -> str:
    """The revert decoded against every mesh ABI (ape knows only the called contract's, so an
    ERC-20 error raised inside the StakeManager reaches it as bare hex)."""
    if isinstance(error, CustomError):
        decoded: Exception = ContractError(error.name, {snake_case(key): value for key, value
                                                        in error.inputs.items()})
    else:
        message = str(error.revert_message or "")
        try:
            data = bytes(HexBytes(message)) if message.startswith("0x") else b""
        except ValueError:
            data = b""
        decoded = (ErrorDecoder(load_artifacts().all_abis()).decode(data) if data
                   else error)
    return explain(decoded)


def decoded_errors(command: F) -> F:
    """Innermost decorator of a script's `cli`: a revert, a missing deployment or another ape
    failure ends the script with one line (click's `Error: ...`), not a traceback."""
    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ContractLogicError as error:
            raise click.ClickException(revert_line(error)) from None
        except (DeploymentError, ApeException) as error:
            raise click.ClickException(" ".join(str(error).split())) from None
    return run  # type: ignore[return-value]


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
    """Approve `spender` for `amount` if needed, refusing first (no gas, no ape call trace)
    when the account cannot pay it."""
    token = contract("TestToken")
    balance = token.balanceOf(account.address)
    if balance < amount:
        raise click.ClickException(
            f"{account.address} holds {balance} token units, this needs {amount}: get tokens "
            "first (`mesh tokens mint` on a local chain)")
    if token.allowance(account.address, spender) < amount:
        token.approve(spender, amount, sender=account)
