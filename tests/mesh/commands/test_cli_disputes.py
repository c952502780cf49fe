"""`mesh dispute` and `mesh arbiter` as processes, end to end: the service under uvicorn, an
agent that renders a tiny real frame, the contracts on anvil. The customer disputes the
settlement with its own keystore, the arbiter reads the bundle (proofs checked on chain),
re-renders the tile, and rules; the service's own indexer reflects each step with no block
mined by hand (a local dev chain is final at once), and the job follows. Errors are one
line, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from eth_account.signers.local import LocalAccount

from mesh.localgrid import ORCHESTRATOR_ID, Grid, wait_for
from orchestrator.chain.anvil import Anvil, dev_account
from orchestrator.db import jobs as job_db
from orchestrator.db.models import DisputeRow
from orchestrator.db.session import make_engine, make_session_factory
from protocol import keystore

pytestmark = [pytest.mark.anvil, pytest.mark.slow]


def key_file(tmp: Path, name: str, account: LocalAccount) -> Path:
    path = tmp / f"{name}.json"
    keystore.create(path, f"{name}-pw", bytes(account.key))
    (tmp / f"{name}.pw").write_text(f"{name}-pw")
    return path


def mesh(grid: Grid, anvil: Anvil, who: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mesh.cli", *args, "--keystore", str(who),
         "--password-file", str(who.with_suffix(".pw")), "--orchestrator", grid.url,
         "--rpc-url", anvil.rpc_url, "--data-dir", str(grid.data_dir),
         "--orchestrator-id", ORCHESTRATOR_ID],
        capture_output=True, text=True, timeout=300, check=False)


def answer(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def db_state(grid: Grid, job_id: str, dispute_id: int) -> tuple[str, str] | None:
    """The job's and the dispute's status in the service's database (None: not indexed)."""
    engine = make_engine(f"sqlite:///{grid.data_dir / 'mesh.db'}")
    try:
        with make_session_factory(engine)() as session:
            job = job_db.get_job(session, job_id=job_id)
            row = session.get(DisputeRow, dispute_id)
            return None if job is None or row is None else (job.status, row.status)
    finally:
        engine.dispose()


def reflected(grid: Grid, job_id: str, dispute_id: int, state: tuple[str, str]) -> None:
    """Wait for the service's own indexer to show `state`, with no block mined by hand: a
    local dev chain's events are final at once."""
    wait_for(f"the service to show {state}",
             lambda: db_state(grid, job_id, dispute_id) == state, timeout_s=60)


def test_a_customer_disputes_and_the_arbiter_reproduces_the_tile_and_rules(
        grid: Grid, anvil: Anvil, scene: Path, tmp_path: Path) -> None:
    grid.start(MESH_VERIFICATION_POLICY="fixed-1%")  # mostly trusted; a drawn window has a checker
    agents = [grid.agent(name).start() for name in ("renderer", "checker")]
    grid.wait_logged_in(agents)
    job_id = grid.submit(scene, frames={"start": 2, "end": 2}, samples=8, chunk_samples=4,
                         resolution=[32, 24])
    wait_for("the job settled on chain", lambda: grid.job(job_id)["status"] == "settled",
             timeout_s=240)
    customer = key_file(tmp_path, "customer", dev_account(4))
    arbiter = key_file(tmp_path, "arbiter", dev_account(3))
    stranger = key_file(tmp_path, "stranger", dev_account(7))

    bundle = answer(mesh(grid, anvil, customer, "dispute", "evidence", "--job", job_id,
                         "--json"))
    assert bundle["verification_on_chain"]["verified"], bundle["verification_on_chain"]
    (provider,) = bundle["providers"]

    started = time.perf_counter()
    opened = answer(mesh(grid, anvil, customer, "dispute", "open", "--job", job_id,
                         "--against", provider, "--amount", "0.000000000000001", "--reason",
                         "frame 2 looks wrong", "--json"))
    dispute_id = int(opened["dispute_id"])
    assert opened["status"] == "open" and opened["frozen_amount"] == "1000"
    reflected(grid, job_id, dispute_id, ("disputed", "open"))

    listed = answer(mesh(grid, anvil, arbiter, "arbiter", "list", "--json"))
    assert [d["dispute_id"] for d in listed] == [dispute_id]
    shown = answer(mesh(grid, anvil, arbiter, "arbiter", "show", str(dispute_id), "--json"))
    assert shown["evidence"]["verification_on_chain"]["verified"]
    (task,) = shown["evidence"]["tasks"]
    assert task["recipe"]["blender"] and task["recipe"]["samples"] == 8

    reproduced = answer(mesh(grid, anvil, arbiter, "arbiter", "reproduce", str(dispute_id),
                             "--workdir", str(tmp_path / "reproduce"), "--threads", "1",
                             "--json"))
    assert reproduced["match"] and reproduced["tolerance"] == "exact", reproduced

    refused = mesh(grid, anvil, stranger, "arbiter", "rule", str(dispute_id), "--grant")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.count("\n") == 1 and "this wallet is not an arbiter" in refused.stderr

    ruled = answer(mesh(grid, anvil, arbiter, "arbiter", "rule", str(dispute_id), "--dismiss",
                        "--reason", "re-rendered: bit-identical", "--json"))
    assert ruled["status"] == "dismissed"
    reflected(grid, job_id, dispute_id, ("settled", "dismissed"))
    elapsed = time.perf_counter() - started

    status = answer(mesh(grid, anvil, customer, "dispute", "status", str(dispute_id), "--json"))
    assert status["chain"]["status"] == "dismissed"
    assert "frozen goes to" in status["orchestrator"]["outcome"]
    again = mesh(grid, anvil, arbiter, "arbiter", "rule", str(dispute_id), "--grant")
    assert again.returncode == 2 and "DisputesNotOpen" in again.stderr
    print(f"\ndispute {dispute_id} through the CLI: opened -> reproduced -> ruled -> "
          f"reflected in {elapsed:.1f} s (render {reproduced['render_s']} s)")
