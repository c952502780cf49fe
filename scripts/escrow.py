"""Escrow payment for a job as a customer (`createJob`).

Later: collect the unused part of a settled job (`--claim-refund`), or take back an
unsettled one after deadline + grace (`--reclaim`).
"""

from __future__ import annotations

from typing import Any

import click
from ape import chain
from ape.cli import ConnectedProviderCommand, account_option

from scripts._mesh import bytes32_option, contract, decoded_errors, ensure_allowance


@click.command(cls=ConnectedProviderCommand)
@account_option()
@bytes32_option("--job-id", "32-byte job id (hex).")
@click.option("--amount", type=int, help="Token units to escrow.")
@click.option("--deadline-in", type=int, default=3600, show_default=True,
              help="Seconds from now until the work is due.")
@bytes32_option("--spec-hash", "keccak of the canonical job spec (hex).")
@click.option("--reclaim", is_flag=True, help="Take back the escrow of an unsettled, late job.")
@click.option("--claim-refund", is_flag=True, help="Collect a settled job's unused escrow.")
@decoded_errors
def cli(account: Any, job_id: bytes | None, amount: int | None, deadline_in: int,
        spec_hash: bytes | None, reclaim: bool, claim_refund: bool) -> None:
    if job_id is None:
        raise click.UsageError("--job-id is required")
    escrow = contract("JobEscrow")
    if claim_refund:
        receipt = escrow.claimRefund(job_id, sender=account)
        (event,) = receipt.decode_logs(escrow.RefundClaimed)
        click.echo(f"refund of {event.amount} for job 0x{job_id.hex()} in {receipt.txn_hash}")
        return
    if reclaim:
        receipt = escrow.reclaim(job_id, sender=account)
        click.echo(f"reclaimed job 0x{job_id.hex()} in {receipt.txn_hash}")
        return
    if amount is None or spec_hash is None:
        raise click.UsageError("--amount and --spec-hash are required to create a job")
    ensure_allowance(account, escrow.address, amount)
    deadline = chain.blocks.head.timestamp + deadline_in  # chain time: local chains travel
    receipt = escrow.createJob(job_id, amount, deadline, spec_hash, sender=account)
    click.echo(f"escrowed {amount} for job 0x{job_id.hex()} due {deadline} "
               f"in {receipt.txn_hash} ({receipt.gas_used} gas)")
