"""Deployments round-trip through JSON and carry least-privilege roles."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from web3.contract import Contract

from orchestrator.chain.anvil import Anvil
from orchestrator.chain.deployment import Deployment, DeploymentError
from orchestrator.chain.errors import ChainError
from orchestrator.chain.sdk import MeshChain
from orchestrator.config import Settings


def test_deployment_roundTripsThroughJsonFile(deployment: Deployment, tmp_path: Path) -> None:
    path = deployment.save(tmp_path / ".mesh")

    assert path.name == "deployment.json"
    assert Deployment.load(tmp_path / ".mesh") == deployment


def test_deployment_rejectsMissingFieldsAndBadAddresses(deployment: Deployment) -> None:
    with pytest.raises(DeploymentError, match="lacks"):
        Deployment.from_json('{"chain_id": 31337}')
    with pytest.raises(DeploymentError, match="token"):
        replace(deployment, token="0xnot-an-address")


def test_deployment_loadExplainsHowToDeployWhenTheFileIsMissing(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError, match="deploy first"):
        Deployment.load(tmp_path)


def test_deploy_local_givesEachRoleToItsOwnKeyOnly(chain: MeshChain) -> None:
    deployment = chain.deployment
    stake_manager, escrow, disputes = chain.stake_manager, chain.job_escrow, chain.disputes

    def holds(contract: Contract, role_getter: str, account: str) -> bool:
        role = contract.functions[role_getter]().call()
        return bool(contract.functions.hasRole(role, account).call())

    assert holds(escrow, "ORCHESTRATOR_ROLE", deployment.orchestrator)
    assert holds(stake_manager, "ORCHESTRATOR_ROLE", deployment.orchestrator)
    assert holds(stake_manager, "SLASHER_ROLE", deployment.slasher)
    assert holds(disputes, "ARBITER_ROLE", deployment.arbiter)
    assert holds(stake_manager, "ESCROW_ROLE", deployment.job_escrow)
    assert not holds(escrow, "ORCHESTRATOR_ROLE", deployment.admin)
    assert not holds(stake_manager, "SLASHER_ROLE", deployment.orchestrator)
    assert not holds(disputes, "ARBITER_ROLE", deployment.orchestrator)
    assert len({deployment.admin, deployment.orchestrator, deployment.slasher,
                deployment.arbiter}) == 4


def test_from_settings_connectsToTheSavedDeployment(
    chain: MeshChain, anvil: Anvil, tmp_path: Path
) -> None:
    chain.deployment.save(tmp_path)

    loaded = MeshChain.from_settings(Settings(data_dir=tmp_path, rpc_url=anvil.rpc_url))

    assert loaded.deployment == chain.deployment
    assert loaded.provider_stake(chain.deployment.admin).bonded == 0


def test_from_settings_refusesADeploymentForAnotherChain(
    chain: MeshChain, anvil: Anvil, tmp_path: Path
) -> None:
    chain.deployment.save(tmp_path)

    with pytest.raises(ChainError, match="chain"):
        MeshChain.from_settings(Settings(data_dir=tmp_path, rpc_url=anvil.rpc_url, chain_id=1))
