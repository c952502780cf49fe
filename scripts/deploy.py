"""Deploy and wire the mesh contracts with a wallet, then record them in `.mesh/deployment.json`.

`ape run deploy --account <admin> --orchestrator 0x.. --slasher 0x.. --arbiter 0x..`
Same order and roles as `orchestrator.chain.deploy.deploy_local` (see contracts/README.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from ape import chain, project
from ape.cli import ConnectedProviderCommand, account_option

from orchestrator.chain.deploy import DeployParams
from orchestrator.chain.deployment import Deployment
from orchestrator.config import get_settings
from scripts._mesh import decoded_errors


def _grant(contract: Any, role_getter: str, account: str, admin: Any) -> None:
    contract.grantRole(getattr(contract, role_getter)(), account, sender=admin)


@click.command(cls=ConnectedProviderCommand)
@account_option()
@click.option("--orchestrator", required=True, help="Address that locks collateral and settles.")
@click.option("--slasher", required=True, help="Address that may slash stake.")
@click.option("--arbiter", required=True, help="Address that rules disputes.")
@click.option("--treasury", help="Receiver of slash proceeds (default: the admin).")
@decoded_errors
def cli(account: Any, orchestrator: str, slasher: str, arbiter: str,
        treasury: str | None) -> None:
    params = DeployParams()
    treasury = treasury or account.address
    first_block = chain.blocks.head.number + 1
    token = account.deploy(project.TestToken)
    stake_manager = account.deploy(project.StakeManager, token, account, treasury,
                                   params.unbonding_period_s, params.slash_dispute_window_s)
    escrow = account.deploy(project.JobEscrow, token, stake_manager, account,
                            params.reclaim_grace_s, params.settlement_dispute_window_s)
    disputes = account.deploy(project.Disputes, token, stake_manager, escrow, account,
                              params.dispute_bond, params.ruling_period_s)

    stake_manager.setJobEscrow(escrow, sender=account)
    _grant(stake_manager, "ORCHESTRATOR_ROLE", orchestrator, account)
    _grant(stake_manager, "SLASHER_ROLE", slasher, account)
    _grant(stake_manager, "DISPUTES_ROLE", disputes.address, account)
    _grant(stake_manager, "SLASHER_ROLE", disputes.address, account)
    _grant(escrow, "ORCHESTRATOR_ROLE", orchestrator, account)
    _grant(escrow, "DISPUTES_ROLE", disputes.address, account)
    _grant(disputes, "ARBITER_ROLE", arbiter, account)

    deployment = Deployment(
        chain_id=chain.chain_id, token=token.address, stake_manager=stake_manager.address,
        job_escrow=escrow.address, disputes=disputes.address, admin=account.address,
        orchestrator=orchestrator, slasher=slasher, arbiter=arbiter, treasury=treasury,
        deployed_at_block=first_block,
    )
    path = deployment.save(Path(get_settings().data_dir))
    click.echo(f"deployed; wrote {path}")
