"""A provider's node installs only the agent: a fresh venv, the install command docs/providers.md
gives (the `agent` target with requirements.lock as constraints) run in a copy of the project's
sources, and then, from that venv alone: none of the server stack, exactly the pinned packages
of the target, the provider's commands working (a tools command saying in one line what to
install), and the real agent rendering a frame of a job on a local grid (the orchestrator and
anvil run from the full environment, as an operator's would), delivered to the customer with
the pixels of a direct render. Measured on this 2-core machine (shared, PyPI reachable): the
build, bpy's 374 MB download included, 71-109 s for a 1.2 GB venv; the grid render 24 s;
removing the venv afterwards about 40 s (its many small files on a busy disk)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agent.sandbox import Limits, Outcome, Sandbox
from agent.workloads.blender import WORKER, FrameTask, render
from mesh.localgrid import Grid, wait_for
from tests.install_targets import EVERY_VENV, PROJECT, SERVER_MODULES, canonical, closure

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "requirements.lock", "orchestrator", "agent", "protocol", "mesh")


def documented_install() -> list[str]:
    """The arguments of the one `pip install` line docs/providers.md gives a provider."""
    lines = [line for line in re.findall(
        r"^\S*pip install (-c requirements\.lock [^#\n]*?)\s*(?:#.*)?$",
        (ROOT / "docs" / "providers.md").read_text(), flags=re.MULTILINE) if "[agent]" in line]
    assert len(lines) == 1, lines
    args = shlex.split(lines[0])
    assert ".[agent]" in args, args
    return args


@dataclass(frozen=True)
class AgentInstall:
    venv: Path
    env: dict[str, str]  # nothing of the full environment: no PYTHONPATH, its venv off PATH
    build_s: float

    @property
    def mesh(self) -> Path:
        return self.venv / "bin" / "mesh"

    def run(self, *argv: str | Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(a) for a in argv], cwd=cwd, env={**self.env, **env},
                              capture_output=True, text=True, timeout=300, check=False)

    def launcher(self) -> list[str]:
        """`mesh` of the venv, started with this environment (for `Grid.agent`)."""
        unset = [a for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") for a in ("-u", name)]
        return ["env", *unset, f"PATH={self.env['PATH']}", str(self.mesh)]


def clean_env(venv: Path) -> dict[str, str]:
    full = [Path(sys.prefix).resolve(), ROOT.resolve()]
    path = [p for p in os.environ["PATH"].split(os.pathsep)
            if p and not any(Path(p).resolve().is_relative_to(f) for f in full)]
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME",
                                                            "VIRTUAL_ENV", "PYTHONSTARTUP"}
           and not k.startswith("MESH_")}
    return {**env, "PATH": os.pathsep.join([str(venv / "bin"), *path])}


@pytest.fixture(scope="module")
def agent_install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentInstall]:
    root = tmp_path_factory.mktemp("agent-install")
    clone = root / "clone"  # what a provider's clone holds of the project, built from scratch
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, clone / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.egg-info", "build"))
        else:
            clone.mkdir(exist_ok=True)
            shutil.copy2(source, clone / name)
    venv = root / "venv"
    env = clean_env(venv)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=120)
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                *documented_install()], cwd=clone, env=env, capture_output=True,
                               text=True, timeout=900, check=False)
    build_s = time.monotonic() - started
    assert installed.returncode == 0, installed.stderr[-4000:]
    size = subprocess.run(["du", "-sm", str(venv)], capture_output=True, text=True, check=True)
    print(f"\nagent install: {build_s:.0f} s, {size.stdout.split()[0]} MB")
    yield AgentInstall(venv=venv, env=env, build_s=build_s)
    shutil.rmtree(root, ignore_errors=True)


def test_agentInstall_hasExactlyTheTargetsPinnedPackages_andNoServerStack(
        agent_install: AgentInstall, tmp_path: Path) -> None:
    listed = agent_install.run(agent_install.venv / "bin" / "python", "-m", "pip", "list",
                               "--format", "json", cwd=tmp_path)
    installed = {canonical(p["name"]): p["version"] for p in json.loads(listed.stdout)
                 if canonical(p["name"]) not in {PROJECT, *EVERY_VENV}}
    assert installed == closure(["agent"])  # each at requirements.lock's pin (test_dependencies)
    probe = agent_install.run(agent_install.venv / "bin" / "python", "-c", f"""
import importlib, json
missing = []
for name in {list(SERVER_MODULES)!r}:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        missing.append(name)
import orchestrator.domain, protocol.client, agent.daemon, mesh.cli
try:
    import orchestrator.main
except ModuleNotFoundError as error:
    service = error.name
print(json.dumps({{"missing": missing, "service": service,
                  "agent": agent.daemon.__file__}}))
""", cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found["missing"] == list(SERVER_MODULES)
    assert found["service"] in SERVER_MODULES  # the service's code is there, its stack is not
    assert Path(found["agent"]).is_relative_to(agent_install.venv)  # not the repo's


def test_agentInstall_runsTheProvidersCommands_andSendsTheRestToTheTools(
        agent_install: AgentInstall, tmp_path: Path) -> None:
    env = {"MESH_WALLET_DIR": str(tmp_path / "wallets"), "COLUMNS": "200"}
    password = tmp_path / "password"
    password.write_text("provider-pw\n")
    for argv in (["--help"], ["agent", "run", "--help"]):
        shown = agent_install.run(agent_install.mesh, *argv, cwd=tmp_path, **env)
        assert shown.returncode == 0 and "Usage: mesh" in shown.stdout, shown.stderr
    made = agent_install.run(agent_install.mesh, "wallet", "new", "provider", "--password-file",
                             password, "--json", cwd=tmp_path, **env)
    assert made.returncode == 0, made.stderr
    listed = agent_install.run(agent_install.mesh, "wallet", "list", "--json", cwd=tmp_path,
                               **env)
    assert [w["address"] for w in json.loads(listed.stdout)] == [
        json.loads(made.stdout)["address"]]
    staked = agent_install.run(agent_install.mesh, "provider", "stake", "10", "--wallet",
                               "provider", "--password-file", password, cwd=tmp_path, **env)
    assert staked.returncode == 2, staked.stderr
    assert staked.stderr.splitlines() == [
        "mesh provider stake: this command needs the tools install, and this one has no web3: "
        "in a clone of the repository, pip install -c requirements.lock '.[tools]' (or `make "
        "setup`); see docs/providers.md"]


def direct(scene: Path, tmp: Path, **task: object) -> np.ndarray:
    """The same frame rendered straight through bpy in the full environment's sandbox."""
    frame = FrameTask(blend=scene, threads=1, **task)  # type: ignore[arg-type]
    with Sandbox(limits=Limits(wall_s=300), read_only=[scene, WORKER.parent],
                 parent_dir=tmp) as box:
        rendered = render(frame, box)
        assert rendered.run.outcome is Outcome.OK and rendered.frame is not None
        return np.asarray(Image.open(rendered.frame))


@pytest.mark.anvil
def test_agentInstall_rendersAJobsFrameOnAGrid_withTheDirectRendersPixels(
        agent_install: AgentInstall, grid: Grid, scene: Path, tmp_path: Path) -> None:
    grid.start()
    node = grid.agent("agent-only", launcher=agent_install.launcher()).start()
    grid.wait_logged_in([node])
    assert node.process is not None
    maps = Path(f"/proc/{node.process.pid}/maps").read_text()
    assert str(agent_install.venv / "lib") in maps  # its numpy, scipy, ... are the venv's
    job_id = grid.submit(scene, frames={"start": 2, "end": 2}, samples=8, chunk_samples=4,
                         resolution=[32, 24])

    wait_for("the frame", lambda: grid.done(job_id), timeout_s=180)
    (result,) = grid.results(job_id)["results"]
    assert grid.customer is not None
    delivered = tmp_path / "frame.png"
    delivered.write_bytes(grid.customer.send(
        "GET", f"/v1/jobs/{job_id}/results/{result['sha256']}").content)
    assert "acknowledged" in node.log()
    assert np.array_equal(np.asarray(Image.open(delivered)),
                          direct(scene, tmp_path, frame=2, samples=8, chunk_samples=4,
                                 resolution=(32, 24)))
