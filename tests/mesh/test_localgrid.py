"""The folder a local grid runs in (`grid_folder`): one grid at a time, and a new grid clears
the last one's state but never its agents' wallets."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mesh.localgrid import LOCK_FILE, FolderInUse, grid_folder


def last_run(out: Path) -> dict[str, bytes]:
    files = {"node-1/key.json": b'{"address": "ab"}', "node-1/password": b"pw",
             "node-1/agent.log": b"log", "node-1/state/spool/task-1.json": b"{}",
             "orchestrator/mesh.db": b"db", "frames/0001.png": b"png"}
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    return files


def tree(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*")
            if p.is_file() and p.name != LOCK_FILE}


def test_a_new_grid_clears_the_last_runs_state_and_keeps_its_wallets(tmp_path: Path) -> None:
    out = tmp_path / "up"
    last_run(out)
    with grid_folder(out):
        assert tree(out) == {"node-1/key.json": b'{"address": "ab"}', "node-1/password": b"pw"}
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE, "node-1"]


def test_a_second_grid_in_a_held_folder_is_refused_and_touches_nothing(tmp_path: Path) -> None:
    out = tmp_path / "up"
    with grid_folder(out):
        files = last_run(out)  # the running grid's database, logs and wallets
        with pytest.raises(FolderInUse, match=r"already running in .* \(pid \d+\)"), \
                grid_folder(out):
            pass
        assert tree(out) == files
    with grid_folder(out):  # released with the grid
        pass


def test_a_killed_grid_leaves_its_folder_free(tmp_path: Path) -> None:
    out = tmp_path / "up"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from mesh.localgrid import grid_folder\n"
         "with grid_folder(Path(sys.argv[1])):\n print('held', flush=True); time.sleep(60)",
         str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUse, match=f"pid {holder.pid}"), grid_folder(out):
            pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    finally:
        if holder.poll() is None:
            holder.kill()
    with grid_folder(out):
        pass
