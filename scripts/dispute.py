"""Open a dispute with a bond: over a job's settlement (`--job-id`) or a slash (`--slash-id`)."""

from __future__ import annotations

from typing import Any

import click
from ape.cli import ConnectedProviderCommand, account_option

from scripts._mesh import bytes32_option, contract, decoded_errors, ensure_allowance


@click.command(cls=ConnectedProviderCommand)
@account_option()
@bytes32_option("--job-id", "Settled job whose settlement is disputed (hex).")
@click.option("--respondent", help="Settlement disputes: the other side's address.")
@click.option("--amount", type=int, help="Settlement disputes: pending payout to freeze.")
@click.option("--slash-id", type=int, help="Slash to dispute (the slashed provider only).")
@bytes32_option("--evidence", "Hash of the evidence (hex).")
@decoded_errors
def cli(account: Any, job_id: bytes | None, respondent: str | None, amount: int | None,
        slash_id: int | None, evidence: bytes | None) -> None:
    if (job_id is None) == (slash_id is None):
        raise click.UsageError("give exactly one of --job-id, --slash-id")
    if evidence is None:
        raise click.UsageError("--evidence is required")
    disputes = contract("Disputes")
    ensure_allowance(account, disputes.address, disputes.bond())
    if job_id is not None:
        if respondent is None or amount is None:
            raise click.UsageError("--respondent and --amount are required with --job-id")
        receipt = disputes.disputeSettlement(job_id, respondent, amount, evidence, sender=account)
    else:
        receipt = disputes.disputeSlash(slash_id, evidence, sender=account)
    (event,) = receipt.decode_logs(disputes.DisputeOpened)
    click.echo(f"dispute {event.disputeId} open until {event.rulingDeadline} ({receipt.txn_hash})")
