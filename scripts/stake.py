"""Bond stake as a provider: `ape run stake --account <alias> --amount <units>`."""

from __future__ import annotations

from typing import Any

import click
from ape.cli import ConnectedProviderCommand, account_option

from scripts._mesh import contract, decoded_errors, ensure_allowance


@click.command(cls=ConnectedProviderCommand)
@account_option()
@click.option("--amount", type=int, required=True, help="Token units to bond.")
@decoded_errors
def cli(account: Any, amount: int) -> None:
    stake_manager = contract("StakeManager")
    ensure_allowance(account, stake_manager.address, amount)
    receipt = stake_manager.stake(amount, sender=account)
    click.echo(f"staked {amount} in {receipt.txn_hash} ({receipt.gas_used} gas); "
               f"stake now {stake_manager.stakeOf(account.address)}")
