"""Every task in its own process: clean environment, own temp dir (wiped afterwards), CPU-time,
memory, file-size, process-count and wall-clock limits, no network.

With bubblewrap (Debian `bubblewrap`) the task also runs as uid 65534 with no capabilities, in
new user/pid/net/ipc/uts namespaces, seeing only read-only /usr, the Python runtime, the files
it was given and one writable output dir (never `--ro-bind / /`). Without it only the rlimits
apply (and, when the agent runs as root, the switch to uid 65534); `isolation()` says which,
and the agent says it once at start. A task that breaks a limit fails with that limit as its
reason; the caller still decodes every output it names, since exit codes lie (Blender exits 0
with a truncated file when RLIMIT_FSIZE bites).
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import IO

from protocol.packs import asset_path_problem

NOBODY = 65534
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Limits:
    cpu_s: int = 3600  # RLIMIT_CPU, summed over the task's threads
    memory_bytes: int = 4 * GIB  # RLIMIT_AS; bpy with 2 threads needs about 1.43 GiB
    file_bytes: int = 1 * GIB  # RLIMIT_FSIZE: largest single file the task may write
    output_bytes: int = 2 * GIB  # every file under the output dir together
    processes: int = 256  # threads of the task's process tree (the watchdog counts them)
    wall_s: float = 3600.0
    tmp_bytes: int = 512 << 20  # the task's private /tmp (tmpfs) under bwrap
    output_files: int = 10_000  # entries under the output dir (inodes on the agent's disk)
    pack_bytes: int = 16 * GIB  # a scene's pack (its files besides the .blend) together
    # The task yields the CPU to the agent: a render on every core would otherwise delay the
    # agent's heartbeats and probe answers, and a healthy node would look slow and jittery.
    niceness: int = 10


class UnsafeInput(ValueError):
    """A pack file the agent will not lay out in the input dir: a path that leaves it (absolute,
    '..'), one that meets a symlink or a file on its way, one laid out twice, or a pack over
    `Limits.pack_bytes`."""


class UnsafeOutput(ValueError):
    """An output name that leaves the output dir, or a file that is not a plain file (a
    symlink to the agent's keystore, a FIFO that would hang the reader, a device)."""


class Outcome(StrEnum):
    OK = "ok"
    FAILED = "failed"  # the task's own error (non-zero exit, bad output)
    MEMORY = "memory_limit"
    CPU = "cpu_limit"
    WALL = "wall_clock_limit"
    OUTPUT = "output_limit"
    PROCESSES = "process_limit"
    CANCELLED = "cancelled"  # the agent stopped it (drain)


@dataclass(slots=True)
class Run:
    outcome: Outcome
    returncode: int
    stderr_tail: str
    seconds: float
    output_bytes: int = 0
    detail: str = ""

    @property
    def reason(self) -> str:
        """One line for the orchestrator and the log."""
        return f"{self.outcome.value}: {self.detail}" if self.detail else self.outcome.value


MEMORY_SIGNS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory",
                "Unable to allocate", "Memory allocation failed", "mmap", "Calloc returns null",
                "Malloc returns null", "failed to map segment")
PROCESS_SIGNS = ("Resource temporarily unavailable", "can't start new thread",
                 "pthread_create", "fork: retry")


@functools.cache
def bubblewrap() -> str | None:
    """The bwrap binary when it can actually make the namespaces here, else None."""
    binary = shutil.which("bwrap")
    if binary is None:
        return None
    probe = [binary, "--unshare-all", "--unshare-user", "--uid", str(NOBODY), "--gid",
             str(NOBODY), "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr",
             *_usr_links(), "--die-with-parent", "--", "/usr/bin/true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return binary if done.returncode == 0 else None


def isolation() -> str:
    """What protects the host from a task, in words."""
    if bubblewrap():
        return ("bubblewrap: uid 65534, no capabilities, no network, private /tmp, read-only "
                "runtime, plus rlimits")
    return ("rlimits only (bubblewrap missing or user namespaces disabled): no filesystem or "
            "network isolation; install the Debian package `bubblewrap`")


def _usr_links() -> list[str]:
    links: list[str] = []
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        target = Path("/") / name
        if target.is_symlink():
            links += ["--symlink", os.readlink(target), str(target)]
        elif target.is_dir():
            links += ["--ro-bind", str(target), str(target)]
    return links


def runtime_paths() -> list[Path]:
    """What a Python task needs to read: the interpreter's prefix and the venv (resolved)."""
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    return sorted(p for p in paths if not str(p).startswith("/usr"))


def task_python() -> str:
    """This interpreter by a path that exists inside the sandbox (the venv, resolved)."""
    return str(Path(sys.prefix).resolve() / "bin" / Path(sys.executable).name)


def _bwrap_argv(binary: str, *, read_only: Iterable[Path], writable: Iterable[Path],
                workdir: Path, limits: Limits) -> list[str]:
    argv = [binary, "--unshare-all", "--unshare-user", "--uid", str(NOBODY), "--gid",
            str(NOBODY), "--cap-drop", "ALL", "--die-with-parent", "--new-session",
            "--clearenv", "--ro-bind", "/usr", "/usr", *_usr_links(),
            "--dev", "/dev", "--proc", "/proc", *_proc_hardening(),
            "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]  # before any bind under /tmp
    for etc in ("/etc/ld.so.cache", "/etc/localtime"):
        if Path(etc).exists():
            argv += ["--ro-bind", etc, etc]
    for path in sorted({Path(p).resolve() for p in read_only}):
        argv += ["--ro-bind", str(path), str(path)]
    for path in writable:
        argv += ["--bind", str(path), str(path)]
    argv += ["--chdir", str(workdir)]
    return argv


# Parts of a fresh /proc that write to the host's kernel, not the task's namespaces. A root
# agent's task is uid 0 to the kernel (user namespaces map it back), so root-owned 0644 files
# there (kernel.core_pattern: a pipe run as root on the next crash; sysrq-trigger) would take
# its writes: they are bound read-only, as container runtimes do.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
PROC_MASKED = ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
               "/proc/latency_stats")  # kernel memory and other tasks' secrets: read as empty


def _proc_hardening() -> list[str]:
    argv: list[str] = []
    for path in PROC_READ_ONLY:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for path in PROC_MASKED:
        if os.path.exists(path):
            argv += ["--ro-bind", "/dev/null", path]
    return argv


def _rlimits(limits: Limits, drop_to_nobody: bool) -> Callable[[], None]:
    def apply() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.nice(limits.niceness)
        if drop_to_nobody:
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)

    return apply


def _tree_bytes(root: Path) -> tuple[int, int, int]:
    """(all files together, the largest one, how many entries) under `root`."""
    total = largest = entries = 0
    for dirpath, dirs, names in os.walk(root):
        entries += len(dirs) + len(names)
        for name in names:
            with contextlib.suppress(OSError):
                size = os.lstat(os.path.join(dirpath, name)).st_size
                total += size
                largest = max(largest, size)
    return total, largest, entries


def _tree_threads(root: int) -> int:
    """Threads of `root` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    threads: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1]: ppid
        threads[pid] = int(fields[17])  # num_threads
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += threads.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


class Sandbox:
    """One task's private directory and process; `run` may be called once."""

    def __init__(self, *, limits: Limits, read_only: Sequence[Path] = (),
                 parent_dir: Path | None = None) -> None:
        self.limits = limits
        self.read_only = [*runtime_paths(), *read_only]
        # Absolute: bubblewrap binds only absolute paths, and the task runs in `out`.
        self.root = Path(tempfile.mkdtemp(prefix="mesh-task-", dir=parent_dir)).resolve()
        self.out = self.root / "out"  # the task writes here (and in home); the agent reads it
        self.home = self.root / "home"
        self.given = self.root / "in"  # read-only inside: the task's spec and inputs
        for path in (self.out, self.home, self.given):
            path.mkdir()
        self.bwrap = bubblewrap()
        self._cancel = threading.Event()
        self._breach: Outcome | None = None  # a limit the watchdog saw broken
        self._process: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        # Without bwrap a root agent runs the task as nobody: let it write its own dirs. Under
        # bwrap the sandbox's uid 65534 maps to the agent's own uid, which owns them already.
        self._as_nobody = self.bwrap is None and os.geteuid() == 0
        if self._as_nobody:
            for path in (self.root, self.out, self.home, self.given):
                os.chown(path, NOBODY, NOBODY)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill whatever is left and wipe the task's directory."""
        self.cancel()
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ChildProcessError):
                process.wait()
        if self._stderr is not None:
            self._stderr.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def cancel(self) -> None:
        """Kill the task's process group. Never reaps it (no `poll`): `run` waits for it itself
        to read its CPU time, and a task that ended just before a cancel is still a zombie
        holding its pid, so the signal cannot reach another process."""
        self._cancel.set()
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The task's whole environment: nothing of the agent's (keys, tokens) leaks in."""
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home),
                "TMPDIR": "/tmp" if self.bwrap else str(self.root), "LANG": "C.UTF-8",
                "BLENDER_USER_RESOURCES": str(self.home / "blender"), **(extra or {})}

    def start(self, argv: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        """Start `argv` in the sandbox without feeding it yet: a warm worker imports bpy
        while the agent waits for a lease, and gets its task on stdin later."""
        full_env = self.env(env)
        if self.bwrap:
            command = _bwrap_argv(self.bwrap, read_only=[*self.read_only, self.given],
                                  writable=[self.out, self.home], workdir=self.out,
                                  limits=self.limits)
            for key, value in full_env.items():
                command += ["--setenv", key, value]
            command += ["--", *argv]
        else:
            command = list(argv)
        stderr_path = self.root / "stderr.log"
        self._stderr = stderr_path.open("w+")
        if self._as_nobody:
            os.chown(stderr_path, NOBODY, NOBODY)
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            text=True, env=full_env, cwd=self.out, start_new_session=True,
            preexec_fn=_rlimits(self.limits, drop_to_nobody=self._as_nobody))

    @property
    def started(self) -> bool:
        return self._process is not None

    def run(self, argv: Sequence[str] | None = None, *,
            on_line: Callable[[str], None] | None = None, env: dict[str, str] | None = None,
            stdin: str = "") -> Run:
        """Run `argv` (or the process `start` began) to its end, `stdin` written to it; the
        wall clock starts now. `on_line` sees each stdout line as it comes."""
        if argv is not None:
            self.start(argv, env=env)
        process, stderr = self._process, self._stderr
        assert process is not None and stderr is not None and process.stdin is not None
        began = time.perf_counter()
        finished = threading.Event()
        watchdog = threading.Thread(target=self._watch, args=(process.pid, began, finished),
                                    name="sandbox-watchdog", daemon=True)
        watchdog.start()
        try:
            with contextlib.suppress(BrokenPipeError):
                process.stdin.write(stdin)
                process.stdin.close()
            assert process.stdout is not None
            for line in process.stdout:
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            _, status, usage = os.wait4(process.pid, 0)  # the task's own CPU time
            returncode = process.returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
        finally:
            finished.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # stray children of the task
        stderr.seek(0)
        tail = stderr.read()[-4000:]
        stderr.close()
        seconds = time.perf_counter() - began
        written, largest, entries = _tree_bytes(self.out)
        if entries > self.limits.output_files and self._breach is None:
            self._breach = Outcome.OUTPUT
        run = Run(outcome=Outcome.OK, returncode=returncode, stderr_tail=tail, seconds=seconds,
                  output_bytes=written)
        run.outcome, run.detail = self._judge(returncode, tail, seconds, written, largest, cpu)
        return run

    def _watch(self, pid: int, began: float, finished: threading.Event) -> None:
        """The wall clock and the process count (threads included) of the task's whole tree,
        checked four times a second: RLIMIT_NPROC does not bind a root agent's sandbox (its
        uid 65534 maps to root outside) and counts all of a user's processes otherwise. The
        output dir, on the agent's own disk, is measured every second: RLIMIT_FSIZE bounds
        one file, not how many a task writes, so a disk filler is stopped as it writes."""
        ticks = 0
        while not finished.wait(0.25):
            ticks += 1
            if time.perf_counter() - began >= self.limits.wall_s:
                self._breach = Outcome.WALL
            elif _tree_threads(pid) > self.limits.processes:
                self._breach = Outcome.PROCESSES
            elif ticks % 4 == 0 and self._output_breached():
                self._breach = Outcome.OUTPUT
            else:
                continue
            self.cancel()
            return

    def _output_breached(self) -> bool:
        written, _, entries = _tree_bytes(self.out)
        return written > self.limits.output_bytes or entries > self.limits.output_files

    def give(self, inputs: Mapping[str, Path]) -> None:
        """Lay out a scene's pack under the input dir (read-only inside), so that a .blend there
        reads each file by its relative path: `inputs` maps a pack path (`protocol.packs`) to
        a hash-checked file in the agent's cache, linked or copied. Every path is checked
        before anything is written; each directory on the way must be a real one made here,
        never a symlink or a file; nothing is written outside the input dir (UnsafeInput)."""
        total = sum(source.stat().st_size for source in inputs.values())
        if total > self.limits.pack_bytes:
            raise UnsafeInput(f"the pack holds {total} bytes; at most {self.limits.pack_bytes}")
        for name in inputs:
            problem = asset_path_problem(name)
            if problem is not None:
                raise UnsafeInput(f"pack path {name!r}: {problem}")
        for name, source in sorted(inputs.items()):
            *folders, leaf = name.split("/")
            target = self.given
            for part in folders:
                target = target / part
                with contextlib.suppress(FileNotFoundError):
                    if not stat.S_ISDIR(os.lstat(target).st_mode):
                        raise UnsafeInput(f"pack path {name!r} runs through a file or symlink")
                    continue
                target.mkdir()
            target = target / leaf
            if os.path.lexists(target):
                raise UnsafeInput(f"pack path {name!r} is laid out twice")
            try:
                os.link(source, target, follow_symlinks=False)
            except OSError:
                shutil.copyfile(source, target, follow_symlinks=False)

    def output_path(self, name: str) -> Path:
        """The task's output `name` as a path the agent may read: inside the output dir (no
        absolute name, no `..`), every part a real directory or, last, a regular file, never
        a symlink. Raises UnsafeOutput, or FileNotFoundError when it is missing."""
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or any(
                part in ("..", ".") for part in parts):
            raise UnsafeOutput(f"output {name!r} leaves the output directory")
        path = self.out
        for index, part in enumerate(parts):
            path = path / part
            mode = os.lstat(path).st_mode
            last = index == len(parts) - 1
            if stat.S_ISLNK(mode):
                raise UnsafeOutput(f"output {name!r} is a symlink")
            if (last and not stat.S_ISREG(mode)) or (not last and not stat.S_ISDIR(mode)):
                raise UnsafeOutput(f"output {name!r} is not a regular file")
        return path

    def open_output(self, name: str) -> IO[bytes]:
        """`output_path`, opened without following a symlink swapped in meanwhile (by a
        process of the task that outlived it) and without blocking on a FIFO."""
        path = self.output_path(name)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafeOutput(f"output {name!r} is not a regular file")
        return os.fdopen(fd, "rb")

    def _judge(self, returncode: int, tail: str, seconds: float, written: int, largest: int,
               cpu: float) -> tuple[Outcome, str]:
        limits = self.limits
        if self._breach is Outcome.WALL:
            return Outcome.WALL, f"ran past {limits.wall_s:.0f} s"
        if self._breach is Outcome.PROCESSES:
            return Outcome.PROCESSES, f"more than {limits.processes} processes or threads"
        if self._breach is Outcome.OUTPUT or written > limits.output_bytes:
            return Outcome.OUTPUT, (f"wrote {written} bytes (limits: {limits.output_bytes} "
                                    f"bytes, {limits.output_files} files)")
        if self._cancel.is_set():
            return Outcome.CANCELLED, "stopped by the agent"
        # A file exactly at RLIMIT_FSIZE was cut there (Python and Blender go on and exit 0).
        if ("File too large" in tail or largest >= limits.file_bytes
                or returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ)):
            return Outcome.OUTPUT, f"a file passed {limits.file_bytes} bytes"
        if returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU) or (
                returncode != 0 and cpu >= limits.cpu_s - 0.5):
            return Outcome.CPU, f"used its {limits.cpu_s} s of CPU time"
        if returncode != 0 and any(sign in tail for sign in MEMORY_SIGNS):
            return Outcome.MEMORY, f"address space limit {limits.memory_bytes} bytes"
        if returncode in (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGBUS, 134, 139, 135):
            # bpy under RLIMIT_AS aborts or segfaults instead of raising (TOOLCHAIN.md)
            return Outcome.MEMORY, (f"crashed (exit {returncode}) under the address space "
                                    f"limit of {limits.memory_bytes} bytes")
        if returncode != 0 and any(sign in tail for sign in PROCESS_SIGNS):
            return Outcome.PROCESSES, f"more than {limits.processes} processes or threads"
        if returncode != 0:
            last = tail.strip().splitlines()[-1:] or [""]
            return Outcome.FAILED, f"exit {returncode}: {last[0][:300]}"
        return Outcome.OK, ""
