"""The sandbox with real processes: clean env, no network, limits decoded into reasons."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from agent.sandbox import Limits, Outcome, Sandbox, bubblewrap, task_python

PY = task_python()


def sandboxed(code: str, tmp: Path, limits: Limits | None = None) -> tuple[Outcome, str, str]:
    lines: list[str] = []
    with Sandbox(limits=limits or Limits(wall_s=30), parent_dir=tmp) as box:
        run = box.run([PY, "-c", code], on_line=lines.append)
        root = box.root
    assert not root.exists()  # wiped afterwards
    return run.outcome, "\n".join(lines), run.reason


def test_task_seesNoneOfTheAgentsEnvironment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    monkeypatch.setenv("MESH_AGENT_PASSWORD", "hunter2")
    outcome, out, _ = sandboxed("import os; print(sorted(os.environ))", tmp_path)

    assert outcome is Outcome.OK
    assert "MESH_AGENT_PASSWORD" not in out and "PATH" in out


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
