"""A private PostgreSQL server for the benchmarks that restart it (`mesh bench chaos
--postgres`): `initdb` in a scratch directory, on a free loopback port, crashed and recovered
on demand, stopped and removed afterwards. The machine's own server is never touched. The
server binaries come from the machine's PostgreSQL packages (`pg_config --bindir`, else
/usr/lib/postgresql/<newest>/bin); run as root, they run as the `postgres` user."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from contextlib import suppress
from pathlib import Path
from types import TracebackType

SERVER_USER = "postgres"  # initdb refuses to run as root


class ClusterError(RuntimeError):
    """The private server cannot be made or run (binaries missing, a refusing tool)."""


def server_bindir() -> Path:
    """Where initdb and pg_ctl are, or a ClusterError saying what to install."""
    config = shutil.which("pg_config")
    if config is not None:
        found = Path(subprocess.run([config, "--bindir"], capture_output=True, text=True,
                                    check=False).stdout.strip())
        if (found / "initdb").is_file():
            return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda path: int(path.parent.parent.name)
                      if path.parent.parent.name.isdigit() else 0)
    if versions:
        return versions[-1].parent
    raise ClusterError("the PostgreSQL server binaries (initdb, pg_ctl) are not installed: "
                     "install the postgresql package, or run without --postgres")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresCluster:
    """`with PostgresCluster() as db:` a server at `db.url` until the block ends."""

    def __init__(self) -> None:
        self.bindir = server_bindir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="mesh-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_server = ["runuser", "-u", SERVER_USER, "--"] if os.geteuid() == 0 else []

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def __enter__(self) -> PostgresCluster:
        self.root.chmod(0o755)
        if self._as_server:
            server = pwd.getpwnam(SERVER_USER)
            os.chown(self.root, server.pw_uid, server.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8")
        self.start()
        return self

    def start(self) -> None:
        self._pg_ctl("start")

    def stop(self) -> None:
        """Crash the server (`immediate`) and leave it down until `start`."""
        self._pg_ctl("stop", "-m", "immediate")

    def restart(self) -> None:
        """Crash the server (`immediate`: no checkpoint, every connection cut) and start it
        again; it recovers from its write-ahead log, as after a power cut of its process."""
        self._pg_ctl("restart", "-m", "immediate")

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        with suppress(ClusterError):  # not running: nothing to stop
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _pg_ctl(self, action: str, *args: str) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c max_connections=200")
        self._run("pg_ctl", action, "-D", str(self.data), "-w", "-t", "60", "-l",
                  str(self.log), "-o", options, *args)

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self._as_server, str(self.bindir / tool), *args],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ClusterError(f"{tool} {args[0]}: {tail[0]}")
