"""The command line as a whole: help that reads right, benches that print tables, a missing
build that is one line, and `mesh orchestrator serve` naming the settings it misses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from mesh.cli import app
from mesh.commands import bench
from mesh.commands.orchestrator import missing_capabilities
from orchestrator.config import Settings
from tests.mesh.commands.conftest import Mesh, one_line_error

REPO = Path(__file__).resolve().parents[3]
# Measured by `mesh bench gas --json` on this tree (the shape gas.run() returns).
GAS = {"stake": 134_144, "settle": 51_618, "settle_batch_100_per_job": 14_961,
       "targets": {"settle": 80_000, "settle_batch_100_per_job": 15_000},
       "met": {"settle": True, "settle_batch_100_per_job": True},
       "breakdown_per_job": {"settle_batch_100_per_job": {"sstore": 8_700, "total": 14_961}}}


def every_command(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group under `group` (typer's own click: groups have `commands`)."""
    found = [path]
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += every_command(command, (*path, name))
        else:
            found.append((*path, name))
    return found


def test_noHelpPageShowsAValueAfterAFlag(mesh: Mesh) -> None:
    paths = every_command(typer.main.get_command(app))
    assert ("job", "submit") in paths and ("provider", "stake") in paths
    for path in paths:
        shown = mesh(*path, "--help")
        assert shown.exit_code == 0, (path, shown.output)
        assert "<bool>" not in shown.stdout, path
    assert "--json " in mesh("bench", "gas", "--help").stdout


def test_benchGas_withoutJson_printsATable_notAPythonDict(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    bench._show_gas(GAS)
    shown = capsys.readouterr().out
    assert "{" not in shown
    assert "settle_batch_100_per_job" in shown and "14,961" in shown and "15,000" in shown
    assert "gas per job" in shown


def test_benchGas_withJson_isOneDocument(mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    from mesh.bench import gas

    monkeypatch.setattr(gas, "run", lambda: GAS)  # the measurement is bench/gas's own test
    shown = mesh("bench", "gas", "--json")
    assert json.loads(shown.stdout) == GAS


def test_benchGas_beforeTheContractsAreBuilt_isOneLine(tmp_path: Path) -> None:
    """A tree without `.build/` (a fresh clone before `make compile`)."""
    for package in ("orchestrator", "agent", "protocol", "mesh"):
        shutil.copytree(REPO / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "mesh.cli", "bench", "gas"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path),
                               "PATH": f"{REPO / 'node_modules' / '.bin'}:{os.environ['PATH']}"})
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("mesh bench gas: ") and "run `make compile`" in line


def test_serve_namesEveryMissingSettingThatDisablesSomething(tmp_path: Path) -> None:
    bare = missing_capabilities(Settings(data_dir=tmp_path, _env_file=None))
    text = "\n".join(bare)
    for setting in ("MESH_DATA_DIR", "MESH_ORCHESTRATOR_KEY", "MESH_ADMIN_KEY",
                    "MESH_SESSION_SECRET"):
        assert setting in text, setting
    assert len(bare) == 4


def test_serve_warnsAtStart_thatTheChainIsUnreachable(on_chain: Mesh, tmp_path: Path) -> None:
    from pydantic import SecretStr

    configured = Settings(data_dir=Path(on_chain.env["MESH_DATA_DIR"]),
                          rpc_url="http://127.0.0.1:9", orchestrator_key=SecretStr("0x" + "1" * 64),
                          slasher_key=SecretStr("0x" + "2" * 64), admin_key=SecretStr("a"),
                          session_secret=SecretStr("s"), _env_file=None)
    (warning,) = missing_capabilities(configured)
    assert "chain unreachable" in warning and "MESH_RPC_URL" in warning


def test_serve_printsTheWarningsBeforeItStarts(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "mesh.cli", "orchestrator", "serve", "--port", "0"],
        cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "MESH_DATA_DIR": str(tmp_path)})
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert first.startswith("warning: no deployment") and "MESH_DATA_DIR" in first


@pytest.mark.postgres
def test_serve_onAMissingPostgresDatabase_isOneLine(tmp_path: Path) -> None:
    """A real `mesh orchestrator serve` on a PostgreSQL server without the named database:
    before, uvicorn's 180-line traceback of the failed start-up; now one line saying what to
    do, before the server starts."""
    base = os.environ.get("MESH_TEST_POSTGRES_URL")
    if not base:
        pytest.skip("no PostgreSQL server (MESH_TEST_POSTGRES_URL)")
    missing = base.rsplit("/", 1)[0] + "/no_such_mesh_database"
    done = subprocess.run(
        [sys.executable, "-m", "mesh.cli", "orchestrator", "serve", "--port", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO), "MESH_DATA_DIR": str(tmp_path),
             "MESH_DATABASE_URL": missing})
    errors = [line for line in done.stderr.splitlines() if not line.startswith("warning: ")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = errors
    assert line.startswith("mesh orchestrator serve: cannot open the database (")
    assert 'database "no_such_mesh_database" does not exist' in line and "createdb" in line


def test_serve_withABadSetting_isOneLine(mesh: Mesh) -> None:
    mesh.env["MESH_LEASE_TTL_S"] = "soon"
    error = one_line_error(mesh("orchestrator", "serve"), command="orchestrator serve")
    assert "MESH_LEASE_TTL_S" in error


# ---------------------------------------------------------------- the agent-only install

AGENT_ONLY = """import sys
for module in {blocked!r}:
    sys.modules[module] = None  # `import` of it now fails as where it is not installed
sys.argv = ["mesh", *sys.argv[1:]]
from mesh.cli import main
main()
"""


def agent_only(tmp_path: Path, *args: str, blocked: list[str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    """`mesh ARGS` as in a provider's `.[agent]` install: every installed package that target
    does not bring fails to import (tests/agent/test_install.py builds that install for real)."""
    from tests.install_targets import modules_outside

    code = AGENT_ONLY.format(blocked=modules_outside(["agent"]) if blocked is None else blocked)
    env = {**os.environ, "PYTHONPATH": str(REPO), "MESH_WALLET_DIR": str(tmp_path / "wallets"),
           "MESH_AGENT_PASSWORD": "", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_agentOnlyInstall_runsTheProvidersCommands(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("provider-pw\n")
    for args in (["--help"], ["agent", "run", "--help"], ["wallet", "--help"]):
        shown = agent_only(tmp_path, *args)
        assert shown.returncode == 0 and "Usage: mesh" in shown.stdout, (args, shown.stderr)
    made = agent_only(tmp_path, "wallet", "new", "provider", "--password-file", str(password),
                      "--json")
    assert made.returncode == 0, made.stderr
    listed = agent_only(tmp_path, "wallet", "list", "--json")
    assert json.loads(listed.stdout) == [{"name": "provider",
                                          "address": json.loads(made.stdout)["address"],
                                          "keystore": str(tmp_path / "wallets/provider.json")}]
    (tmp_path / "wrong").write_text("not it\n")
    refused = agent_only(tmp_path, "agent", "run", "--wallet", "provider", "--password-file",
                         str(tmp_path / "wrong"))  # the error kinds need no chain module
    assert refused.returncode == 2 and refused.stderr.startswith("mesh agent run: wrong password")
    assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "missing"), [
    (["provider", "stake", "10", "--wallet", "provider"], "web3"),
    (["job", "submit", "scene.blend", "--wallet", "customer", "--frames", "1-2", "--budget",
      "5"], None),
    (["orchestrator", "serve"], None),
    (["up"], None),
])
def test_agentOnlyInstall_aToolsCommand_saysInOneLineWhatToInstall(
        tmp_path: Path, args: list[str], missing: str | None) -> None:
    done = agent_only(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    command = " ".join(a for a in args[:2] if a.isalpha())
    assert line.startswith(f"mesh {command}: this command needs the tools install, and this "
                           "one has no "), line
    assert "pip install -c requirements.lock '.[tools]'" in line
    if missing:
        assert f"has no {missing}:" in line


def test_aModuleNoInstallLeavesOut_staysATraceback(tmp_path: Path) -> None:
    """Only a module of a smaller install is a user's matter: a broken environment is a bug."""
    done = agent_only(tmp_path, "wallet", "list", blocked=["eth_utils"])
    assert done.returncode == 1 and "Traceback" in done.stderr
    assert "ModuleNotFoundError" in done.stderr



def test_anErrorUnderJson_isOneJsonObjectWithCodeAndMessage_andExitsNonZero(
        served: Mesh) -> None:
    """A script that asked for `--json` reads the failure as JSON too (on stdout, where it
    reads the answer), with a code it can branch on (the service's own where it refused);
    without `--json` it stays one line on stderr."""
    unknown = "0x" + "ab" * 32
    refused = served("job", "status", unknown, "--json")
    assert refused.exit_code == 2 and refused.stderr == ""
    error = json.loads(refused.stdout)["error"]
    assert (error["code"], error["command"]) == ("job_not_found", "mesh job status")
    assert unknown in error["message"]
    mistake = served("job", "download", unknown, "--out", "x", "--wallet", "nobody", "--json")
    assert mistake.exit_code == 2
    assert json.loads(mistake.stdout)["error"]["code"] == "user_error"
    plain = served("job", "status", unknown)
    assert "(job_not_found)" in one_line_error(plain, command="job status")
    assert plain.stdout == ""
