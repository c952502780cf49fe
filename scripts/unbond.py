"""Unbond stake: request (`--amount`), then withdraw or cancel a lock (`--withdraw/--cancel ID`)."""

from __future__ import annotations

from typing import Any

import click
from ape.cli import ConnectedProviderCommand, account_option

from scripts._mesh import contract, decoded_errors


@click.command(cls=ConnectedProviderCommand)
@account_option()
@click.option("--amount", type=int, help="Token units of free stake to start unbonding.")
@click.option("--withdraw", "withdraw_lock", type=int, help="Lock id to withdraw after the period.")
@click.option("--cancel", "cancel_lock", type=int, help="Lock id to return to bonded stake.")
@decoded_errors
def cli(account: Any, amount: int | None, withdraw_lock: int | None,
        cancel_lock: int | None) -> None:
    chosen = [value for value in (amount, withdraw_lock, cancel_lock) if value is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --amount, --withdraw, --cancel")
    stake_manager = contract("StakeManager")
    if amount is not None:
        receipt = stake_manager.requestUnbond(amount, sender=account)
        (event,) = receipt.decode_logs(stake_manager.UnbondRequested)
        click.echo(f"lock {event.lockId}: {amount} withdrawable at {event.withdrawableAt} "
                   f"({receipt.txn_hash})")
    elif withdraw_lock is not None:
        receipt = stake_manager.withdraw(withdraw_lock, sender=account)
        click.echo(f"withdrew lock {withdraw_lock} in {receipt.txn_hash}")
    else:
        receipt = stake_manager.cancelUnbond(cancel_lock, sender=account)
        click.echo(f"cancelled lock {cancel_lock} in {receipt.txn_hash}")
