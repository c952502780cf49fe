"""The ape scripts load as click commands and really deploy and stake through `ape run`; a
revert ends a script with one decoded line."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ape.cli import ConnectedProviderCommand

from orchestrator.chain.anvil import Anvil, dev_account
from orchestrator.chain.artifacts import REPO_ROOT
from orchestrator.chain.deployment import Deployment
from orchestrator.chain.sdk import MeshChain

SCRIPTS = {
    "deploy": {"orchestrator", "slasher", "arbiter", "treasury"},
    "stake": {"amount"},
    "unbond": {"amount", "withdraw_lock", "cancel_lock"},
    "escrow": {"job_id", "amount", "deadline_in", "spec_hash", "reclaim", "claim_refund"},
    "dispute": {"job_id", "respondent", "amount", "slash_id", "evidence"},
    "rule": {"dispute_id", "grant", "slash_amount", "evidence", "apply_default"},
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_exposesAConnectedClickCommandWithItsOptions(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT))

    module = importlib.import_module(f"scripts.{name}")

    assert isinstance(module.cli, ConnectedProviderCommand)
    options = {param.name for param in module.cli.params}
    assert SCRIPTS[name] | {"account"} <= options


def test_revertLine_decodesTheHexApeLeavesUndecoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ape decodes only the called contract's errors: the token's, raised inside
    StakeManager.stake, reaches the script as bare 0xe450d38c... data."""
    from ape.exceptions import ContractLogicError
    from eth_abi import encode
    from eth_utils import keccak

    monkeypatch.syspath_prepend(str(REPO_ROOT))
    from scripts._mesh import revert_line

    provider = dev_account(5).address
    data = keccak(text="ERC20InsufficientBalance(address,uint256,uint256)")[:4] + encode(
        ["address", "uint256", "uint256"], [provider, 0, 600])
    line = revert_line(ContractLogicError(revert_message="0x" + data.hex()))
    assert line == (f"the contract refused: ERC20InsufficientBalance(sender='{provider}', "
                    "balance=0, needed=600); get tokens first (`mesh tokens mint` on a local "
                    "chain)")


def _ape_run(script: str, rpc_url: str, data_dir: Path, *args: str, ok: bool = True
             ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MESH_DATA_DIR": str(data_dir),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        ["ape", "run", script, "--network", rpc_url, *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    if ok:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


@pytest.mark.anvil
@pytest.mark.slow
def test_ape_deploy_then_stake_scripts_workAgainstAnvil(tmp_path: Path) -> None:
    provider = dev_account(5)
    with Anvil() as anvil:
        _ape_run("deploy", anvil.rpc_url, tmp_path, "--account", "TEST::0",
                 "--orchestrator", dev_account(1).address, "--slasher", dev_account(2).address,
                 "--arbiter", dev_account(3).address)
        chain = MeshChain.connect(anvil.rpc_url, Deployment.load(tmp_path))
        broke = _ape_run("stake", anvil.rpc_url, tmp_path, "--account", "TEST::5",
                         "--amount", "600", ok=False)
        unknown = _ape_run("unbond", anvil.rpc_url, tmp_path, "--account", "TEST::5",
                           "--withdraw", "3", ok=False)
        chain.account(dev_account(0)).mint(provider.address, 1_000)

        _ape_run("stake", anvil.rpc_url, tmp_path, "--account", "TEST::5", "--amount", "600")

        assert chain.provider_stake(provider.address).bonded == 600
        assert chain.deployment.orchestrator == dev_account(1).address
    # A stake before any tokens is refused before sending (it was a 75-line traceback ending
    # in a bare 0xe450d38c... ERC20InsufficientBalance); a revert is one decoded line.
    assert broke.returncode != 0 and "Traceback" not in broke.stdout + broke.stderr
    assert broke.stderr.strip().splitlines()[-1] == (
        f"Error: {provider.address} holds 0 token units, this needs 600: get tokens first "
        "(`mesh tokens mint` on a local chain)")
    assert unknown.returncode != 0 and "Traceback" not in unknown.stdout + unknown.stderr
    line = unknown.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: the contract refused: StakeManagerUnknownUnbondingLock(")
    assert "lock_id=3" in line and "use the lock id" in line
