"""The sandbox with real processes: clean env, no network, limits decoded into reasons."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from agent import sandbox
from agent.sandbox import Limits, Outcome, Sandbox, bubblewrap, task_python

PY = task_python()


def sandboxed(code: str, tmp: Path, limits: Limits | None = None) -> tuple[Outcome, str, str]:
    lines: list[str] = []
    with Sandbox(limits=limits or Limits(wall_s=30), parent_dir=tmp) as box:
        run = box.run([PY, "-c", code], on_line=lines.append)
        root = box.root
    assert not root.exists()  # wiped afterwards
    return run.outcome, "\n".join(lines), run.reason


@pytest.fixture(params=["bubblewrap", "rlimits_only"])
def isolation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a task runs: under bubblewrap (which clears the environment by itself) and
    without it, where the agent's own environment handling is all there is."""
    if request.param == "bubblewrap" and bubblewrap() is None:
        pytest.skip("bubblewrap cannot make namespaces here")
    if request.param == "rlimits_only":
        monkeypatch.setattr(sandbox, "bubblewrap", lambda: None)
    return str(request.param)


def test_task_seesNoneOfTheAgentsEnvironment(isolation: str, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    secrets = {"MESH_AGENT_PASSWORD": "hunter2", "AWS_SECRET_ACCESS_KEY": "k3y",
               "MESH_ADMIN_KEY": "admin"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    parent = Path(tempfile.mkdtemp(prefix="mesh-env-test-"))  # a task run as nobody reaches it
    parent.chmod(0o755)
    lines: list[str] = []
    try:
        with Sandbox(limits=Limits(wall_s=30), parent_dir=parent) as box:
            run = box.run(["/usr/bin/env"], on_line=lines.append)  # what the task was given
            home = str(box.home)
    finally:
        shutil.rmtree(parent, ignore_errors=True)

    assert run.outcome is Outcome.OK, run.reason
    seen = dict(line.split("=", 1) for line in lines if "=" in line)
    assert not set(secrets) & set(seen)
    assert not set(secrets.values()) & set(seen.values())
    assert seen["HOME"] == home and "PATH" in seen


def test_task_runs_niced_below_the_agent(tmp_path: Path) -> None:
    """The agent's heartbeats and probe answers come first: the task runs 10 nicer."""
    outcome, out, _ = sandboxed("import os; print('niceness', os.nice(0))", tmp_path)

    assert outcome is Outcome.OK
    assert f"niceness {os.nice(0) + 10}" in out


@pytest.mark.skipif(bubblewrap() is None, reason="bubblewrap not usable here")
def test_underBubblewrap_noNetworkNoHostFilesAndNobody(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = ("import os, socket\n"
                f"try:\n socket.create_connection(('127.0.0.1', {port}), timeout=2); print('NET')\n"
                "except OSError: print('no-net')\n"
                "print('uid', os.getuid())\n"
                "print('host' if os.path.exists('/etc/passwd') or os.path.exists('/root/.bashrc')"
                " or os.path.exists('/work/main/README.md') else 'no-host-files')\n")
        outcome, out, _ = sandboxed(code, tmp_path)

    assert outcome is Outcome.OK
    assert "no-net" in out and "uid 65534" in out and "no-host-files" in out


def test_memoryHog_stoppedAsMemoryLimit(tmp_path: Path) -> None:
    outcome, _, reason = sandboxed("b = bytearray(1 << 31)", tmp_path,
                                   Limits(memory_bytes=512 << 20, wall_s=30))
    assert outcome is Outcome.MEMORY, reason


def test_cpuSpinner_stoppedAsCpuLimit(tmp_path: Path) -> None:
    outcome, _, reason = sandboxed("while True: pass", tmp_path, Limits(cpu_s=1, wall_s=30))
    assert outcome is Outcome.CPU, reason


def test_sleeper_stoppedAtTheWallClock(tmp_path: Path) -> None:
    outcome, _, reason = sandboxed("import time; time.sleep(30)", tmp_path, Limits(wall_s=1))
    assert outcome is Outcome.WALL, reason


def test_bigWriter_stoppedAsOutputLimit_evenThoughItExitsZero(tmp_path: Path) -> None:
    code = ("import os\ntry:\n"
            " open(os.environ['HOME'] + '/../out/big', 'wb').write(b'x' * (8 << 20))\n"
            "except OSError: pass\n")
    outcome, _, reason = sandboxed(code, tmp_path, Limits(file_bytes=1 << 20, wall_s=30,
                                                          output_bytes=1 << 20))
    assert outcome is Outcome.OUTPUT, reason


def test_failingTask_reportsItsLastErrorLine(tmp_path: Path) -> None:
    outcome, _, reason = sandboxed("raise SystemExit('bad scene')", tmp_path)
    assert outcome is Outcome.FAILED and "bad scene" in reason
    assert sys.executable  # the agent process itself is untouched
    assert os.getpid() > 0


def test_threadBomb_stoppedAsProcessLimit(tmp_path: Path) -> None:
    code = ("import threading, time\n"
            "for _ in range(400): threading.Thread(target=time.sleep, args=(20,)).start()\n"
            "time.sleep(20)\n")
    outcome, _, reason = sandboxed(code, tmp_path, Limits(processes=64, wall_s=60))
    assert outcome is Outcome.PROCESSES, reason


def cached_pack(folder: Path, names: list[str]) -> dict[str, Path]:
    """Files as the agent's cache holds a pack (one per name, flat, content-named)."""
    folder.mkdir(exist_ok=True)
    pack = {}
    for index, name in enumerate(names):
        pack[name] = folder / f"blob{index}"
        pack[name].write_bytes(name.encode())
    return pack


def test_a_pack_is_laid_out_under_the_input_dir_by_its_paths(tmp_path: Path) -> None:
    """A scene's pack (issue 35) lies beside its .blend as its relative paths name it."""
    pack = cached_pack(tmp_path / "cache", ["tex/rel.png", "lib/lib.blend", "lib/libtex.png",
                                            "_outside/srv/abs.png"])
    with Sandbox(limits=Limits(), parent_dir=tmp_path) as box:
        box.give(pack)
        assert {str(p.relative_to(box.given)): p.read_text() for p in box.given.rglob("*")
                if p.is_file()} == {name: name for name in pack}


@pytest.mark.parametrize(("names", "reason"), [
    (["ok.png", "../escape.png"], "'..'"),
    (["ok.png", "/etc/cron.d/x"], "absolute"),
    (["ok.png", "tex/../../escape.png"], "'..'"),
    (["ok.png", "ok.png/inside"], "runs through a file"),
])
def test_a_hostile_pack_path_is_refused_before_anything_is_written(
        tmp_path: Path, names: list[str], reason: str) -> None:
    pack = cached_pack(tmp_path / "cache", names)
    parent = tmp_path / "tasks"
    parent.mkdir()
    with Sandbox(limits=Limits(), parent_dir=parent) as box:
        with pytest.raises(sandbox.UnsafeInput, match=reason):
            box.give(pack)
        if reason != "runs through a file":  # checked on the way: the first file is there
            assert list(box.given.iterdir()) == []
        assert sorted(p.name for p in parent.iterdir()) == [box.root.name]
    assert not (tmp_path / "escape.png").exists()


def test_a_symlink_on_a_pack_path_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with Sandbox(limits=Limits(), parent_dir=tmp_path) as box:
        (box.given / "tex").symlink_to(outside)  # as if planted before the pack is laid out
        with pytest.raises(sandbox.UnsafeInput, match="symlink"):
            box.give(cached_pack(tmp_path / "cache", ["tex/rel.png"]))
        (box.given / "scene.blend").symlink_to(outside / "target")
        with pytest.raises(sandbox.UnsafeInput, match="laid out twice"):
            box.give(cached_pack(tmp_path / "cache", ["scene.blend"]))
    assert list(outside.iterdir()) == []


def test_a_pack_over_the_limit_is_refused_whole(tmp_path: Path) -> None:
    pack = cached_pack(tmp_path / "cache", ["a.png", "b.png"])  # 5 bytes each
    with Sandbox(limits=Limits(pack_bytes=9), parent_dir=tmp_path) as box:
        with pytest.raises(sandbox.UnsafeInput, match="at most 9"):
            box.give(pack)
        assert list(box.given.iterdir()) == []
