"""Rule a dispute as the arbiter (`--grant` / `--dismiss`), or apply the default when it is late."""

from __future__ import annotations

from typing import Any

import click
from ape.cli import ConnectedProviderCommand, account_option

from scripts._mesh import bytes32_option, contract, decoded_errors


@click.command(cls=ConnectedProviderCommand)
@account_option()
@click.option("--dispute-id", type=int, required=True)
@click.option("--grant/--dismiss", default=None, help="Rule for the opener or the respondent.")
@click.option("--slash-amount", type=int, default=0, show_default=True,
              help="Granted customer disputes: provider stake to slash.")
@bytes32_option("--evidence", "Hash of the ruling's reasoning (hex).")
@click.option("--default", "apply_default", is_flag=True,
              help="Apply the default ruling after the ruling deadline (anyone).")
@decoded_errors
def cli(account: Any, dispute_id: int, grant: bool | None, slash_amount: int,
        evidence: bytes | None, apply_default: bool) -> None:
    disputes = contract("Disputes")
    if apply_default:
        receipt = disputes.applyDefaultRuling(dispute_id, sender=account)
        click.echo(f"default ruling applied to dispute {dispute_id} ({receipt.txn_hash})")
        return
    if grant is None:
        raise click.UsageError("give --grant or --dismiss (or --default)")
    receipt = disputes.rule(dispute_id, grant, slash_amount, evidence or bytes(32), sender=account)
    click.echo(f"dispute {dispute_id} {'granted' if grant else 'dismissed'} ({receipt.txn_hash})")
