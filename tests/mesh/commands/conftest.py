"""`mesh` commands against real parts: the session's anvil deployment (saved where the
commands look for it) and, where a command talks to one, a real orchestrator process on
loopback. Commands run in-process through typer's CliRunner with `MESH_*` settings in the
environment, exactly as a user's shell would pass them."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from mesh.cli import app
from mesh.processes import OrchestratorProcess
from orchestrator.chain.anvil import Anvil, dev_account
from orchestrator.chain.sdk import MeshChain

ORCHESTRATOR_ID = "mesh-cli-tests"
PASSWORD = "correct horse battery"


@dataclass
class Mesh:
    """The environment a user's `mesh` commands run in, and the runner that runs them."""

    env: dict[str, str]
    root: Path
    runner: CliRunner = field(default_factory=CliRunner)

    def __call__(self, *args: str) -> Result:
        return self.runner.invoke(app, list(args), env=self.env, catch_exceptions=False)

    @property
    def password_file(self) -> Path:
        path = self.root / "password"
        if not path.exists():
            path.write_text(PASSWORD + "\n")
        return path

    def new_wallet(self, name: str) -> str:
        done = self("wallet", "new", name, "--password-file", str(self.password_file), "--json")
        assert done.exit_code == 0, done.output
        return str(json.loads(done.stdout)["address"])

    def signed(self, *args: str) -> Result:
        """A command signed with a wallet: the password comes from the password file."""
        return self(*args, "--password-file", str(self.password_file))


def one_line_error(result: Result, *, command: str) -> str:
    """The single stderr line a refused command prints (and that it exited non-zero)."""
    assert result.exit_code != 0, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"mesh {command}: "), lines[0]
    assert "Traceback" not in result.output
    return lines[0]


@pytest.fixture
def mesh(tmp_path: Path) -> Mesh:
    """A user's environment with its own wallet dir and no chain or orchestrator yet."""
    return Mesh(env={"MESH_RPC_URL": "http://127.0.0.1:9",
                     "MESH_DATA_DIR": str(tmp_path / "data"),
                     "MESH_WALLET_DIR": str(tmp_path / "wallets"),
                     "MESH_ORCHESTRATOR_ID": ORCHESTRATOR_ID,
                     "MESH_ORCHESTRATOR_URL": "http://127.0.0.1:9",  # nothing: set per test
                     "MESH_AGENT_PASSWORD": "", "COLUMNS": "200"},
                root=tmp_path)


@pytest.fixture
def on_chain(mesh: Mesh, chain: MeshChain, anvil: Anvil) -> Mesh:
    """Settings pointing at the session deployment (rolled back after each test)."""
    chain.deployment.save(Path(mesh.env["MESH_DATA_DIR"]))
    mesh.env.update({"MESH_RPC_URL": anvil.rpc_url,
                     "MESH_CHAIN_ID": str(chain.deployment.chain_id)})
    return mesh


@pytest.fixture(scope="module")
def service(session_chain: MeshChain, anvil: Anvil, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[OrchestratorProcess]:
    """A real `mesh orchestrator serve` on the session deployment (SQLite)."""
    data_dir = tmp_path_factory.mktemp("orchestrator")
    session_chain.deployment.save(data_dir)
    env = {"MESH_DATA_DIR": str(data_dir), "MESH_RPC_URL": anvil.rpc_url,
           "MESH_CHAIN_ID": str(session_chain.deployment.chain_id),
           "MESH_ORCHESTRATOR_ID": ORCHESTRATOR_ID,
           "MESH_ORCHESTRATOR_KEY": "0x" + bytes(dev_account(1).key).hex(),
           "MESH_SLASHER_KEY": "0x" + bytes(dev_account(2).key).hex(),
           "MESH_SESSION_SECRET": secrets.token_hex(16), "MESH_JSON_LOGS": "false",
           "MESH_ADMIN_KEY": "cli-test-admin"}
    with OrchestratorProcess(env, data_dir / "service.log") as process:
        yield process


@pytest.fixture
def served(on_chain: Mesh, service: OrchestratorProcess) -> Mesh:
    on_chain.env["MESH_ORCHESTRATOR_URL"] = service.base_url
    return on_chain
