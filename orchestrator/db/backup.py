"""Backup and restore of the orchestrator's database, and the marker a restore leaves.

SQLite is copied with its online backup API (consistent while the service writes, WAL
included); PostgreSQL with `pg_dump -Fc` / `pg_restore --clean`. A restored database is older
than the chain: `restore` leaves the `restore-reconcile` marker, and the service sends no
transaction while it stands (see `main._periodic_jobs`): the indexer first re-reads every
event since the backup's cursor, the truth for money.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from orchestrator.db.models import LeaderLock

RECONCILE_MARKER = "restore-reconcile"  # a leader_locks name no periodic job uses


class BackupError(Exception):
    """A backup or restore that cannot run (missing file or tool, a refusing server)."""


def backup(url: str, path: Path) -> None:
    """Write a consistent copy of the database at `url` to `path`."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        _sqlite_copy(_sqlite_file(url, must_exist=True), path)
    else:
        _run("pg_dump", "-Fc", "--no-owner", f"--file={path}", f"--dbname={_libpq(url)}")


def restore(url: str, path: Path) -> None:
    """Replace the database at `url` with the backup at `path` (the service should be down)."""
    if not path.is_file():
        raise BackupError(f"no backup file {path}")
    if make_url(url).get_backend_name() == "sqlite":
        _sqlite_copy(path, _sqlite_file(url, must_exist=False))
    else:
        _run("pg_restore", "--clean", "--if-exists", "--no-owner", "--single-transaction",
             f"--dbname={_libpq(url)}", str(path))


def mark_restored(session: Session) -> None:
    """Leave the marker: send nothing until the indexer has caught up with the chain."""
    if session.get(LeaderLock, RECONCILE_MARKER) is None:
        session.add(LeaderLock(name=RECONCILE_MARKER, holder="restore",
                               expires_at=float("inf")))


def reconcile_pending(session: Session) -> bool:
    return session.scalars(select(LeaderLock.name).where(
        LeaderLock.name == RECONCILE_MARKER)).first() is not None


def clear_restored(session: Session) -> bool:
    """Drop the marker; True when there was one."""
    return session.execute(delete(LeaderLock).where(
        LeaderLock.name == RECONCILE_MARKER)).rowcount > 0  # type: ignore[attr-defined]


def _sqlite_file(url: str, *, must_exist: bool) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise BackupError("an in-memory SQLite database has nothing to back up")
    path = Path(database)
    if must_exist and not path.is_file():
        raise BackupError(f"no database file {path}")
    return path


def _sqlite_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{source} is not a SQLite database ({exc})") from None
    finally:
        dst.close()
        src.close()


def _libpq(url: str) -> str:
    """The SQLAlchemy URL as libpq reads it (no `+driver`)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _run(tool: str, *args: str) -> None:
    binary = shutil.which(tool)
    if binary is None:
        raise BackupError(f"{tool} not found on PATH; install the PostgreSQL client tools "
                          "(same major version as the server)")
    done = subprocess.run([binary, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise BackupError(f"{tool} failed: {lines[-1] if lines else f'exit {done.returncode}'}")
