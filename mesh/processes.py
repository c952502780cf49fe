"""Child processes the demo, benchmarks and tests run: whole process trees killed and reaped
(the simplest pieces, a free port and a stop, are `orchestrator.processes`'), and the
orchestrator as a real server process (`mesh orchestrator
serve` on a free port, configured only through MESH_* variables, its log kept in a file)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from orchestrator.processes import free_port, stop_process

ACCESS_LOG_LINE = re.compile(r'^INFO: +[0-9.]+:[0-9]+ - "')


def _processes() -> Iterator[tuple[int, int, str]]:
    """(pid, parent pid, state letter) of every process, from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        yield int(entry.name), int(parent), state


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children first), from /proc: a sandboxed task runs in a
    session of its own, so killing its agent's process group would miss it."""
    children: dict[int, list[int]] = {}
    for child, parent, _ in _processes():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and everything below it (a machine gone at once, its renders with it)."""
    for target in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)


def adopt_orphans() -> None:
    """Make this process the child subreaper (Linux): a grandchild whose parent dies (an agent
    killed mid-frame leaves its Blender worker) is re-parented here, so `reap_descendants`
    still finds it instead of it rendering on under init."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def reap_orphans(own: Collection[int]) -> int:
    """Reap the zombies of the processes this one adopted as the child subreaper
    (`adopt_orphans`): each sandboxed task an agent left behind ends as one, and a grid left
    serving would pile them up. `own`: the children it started itself, whose exit status their
    `Popen` reads, left alone. Returns how many were reaped."""
    reaped = 0
    me = os.getpid()
    for pid, parent, state in list(_processes()):
        if parent == me and state == "Z" and pid not in own:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
                reaped += 1
    return reaped


def reap_descendants() -> None:
    """Kill and reap every process still below this one (the end of `mesh up`, Ctrl-C too)."""
    for target in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    with contextlib.suppress(ChildProcessError):
        while time.monotonic() < deadline:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.05)


class ServiceError(RuntimeError):
    """The orchestrator process did not come up, or died."""


class OrchestratorProcess:
    """`mesh orchestrator serve --port <free> [serve_args]` with `env` on top of ours; waits
    for /healthz."""

    def __init__(self, env: Mapping[str, str], log_path: Path, startup_timeout_s: float = 60.0,
                 serve_args: Sequence[str] = (), port: int | None = None) -> None:
        self.port = port or free_port()  # a given port: a restart at the same address
        self._env = {**os.environ, **env}
        self._serve_args = list(serve_args)
        self._log_path = log_path
        self._startup_timeout_s = startup_timeout_s
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OrchestratorProcess:
        with self._log_path.open("ab") as log:  # the child keeps its own copy of the handle
            self._process = subprocess.Popen(
                [sys.executable, "-m", "mesh.cli", "orchestrator", "serve",
                 "--port", str(self.port), *self._serve_args],
                env=self._env, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self._startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ServiceError(f"orchestrator exited with {self._process.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise ServiceError(f"orchestrator did not answer /healthz within "
                           f"{self._startup_timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        """The service's last log lines, leaving out uvicorn's one-line-per-request access log."""
        try:
            text = self._log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        kept = [line for line in text.splitlines() if not ACCESS_LOG_LINE.match(line)]
        return "\n".join(kept[-lines:])

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, timeout_s=15)

    def kill(self) -> None:
        """SIGKILL: an outage, not a shutdown."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()

    def again(self) -> OrchestratorProcess:
        """A new process of this one's settings at its port (a replica back after a crash),
        not started yet."""
        return OrchestratorProcess(self._env, self._log_path, self._startup_timeout_s,
                                   self._serve_args, port=self.port)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
