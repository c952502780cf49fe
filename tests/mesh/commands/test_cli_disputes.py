"""`mesh dispute` and `mesh arbiter` as processes, end to end: the service under uvicorn,
agents that render a tiny real frame of a packed scene, the contracts on anvil. The customer
disputes the settlement with its own keystore, the arbiter reads the bundle (proofs checked
on chain), re-renders the tile from the job's scene and pack, and rules; the service's own
indexer reflects each step with no block mined by hand (a local dev chain is final at once),
and the job follows. Errors are one line, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from eth_account.signers.local import LocalAccount

from mesh.localgrid import ORCHESTRATOR_ID, Grid, wait_for
from mesh.pack import Pack, pack_scene, upload
from mesh.scene_check import read_scene
from orchestrator.chain.anvil import Anvil, dev_account
from orchestrator.db import jobs as job_db
from orchestrator.db.models import DisputeRow
from orchestrator.db.session import make_engine, make_session_factory
from protocol import keystore
from tests.mesh.test_pack import build_scene

pytestmark = [pytest.mark.anvil, pytest.mark.slow]


def key_file(tmp: Path, name: str, account: LocalAccount) -> Path:
    path = tmp / f"{name}.json"
    keystore.create(path, f"{name}-pw", bytes(account.key))
    (tmp / f"{name}.pw").write_text(f"{name}-pw")
    return path


def mesh(grid: Grid, anvil: Anvil, who: Path | None, *args: str, stdin: str = ""
         ) -> subprocess.CompletedProcess[str]:
    """A mesh command at 80 columns; `who` signs it (None: the command names no wallet)."""
    wallet = [] if who is None else ["--keystore", str(who), "--password-file",
                                     str(who.with_suffix(".pw"))]
    return subprocess.run(
        [sys.executable, "-m", "mesh.cli", *args, *wallet, "--orchestrator", grid.url,
         "--rpc-url", anvil.rpc_url, "--data-dir", str(grid.data_dir),
         "--orchestrator-id", ORCHESTRATOR_ID],
        capture_output=True, text=True, timeout=300, check=False, input=stdin,
        env={**os.environ, "COLUMNS": "80"})


def human(done: subprocess.CompletedProcess[str]) -> str:
    """A command's output for people: tables and lines, no Python dict, no wei, no unix time."""
    assert done.returncode == 0, done.stderr
    assert "{" not in done.stdout and "': " not in done.stdout, done.stdout
    assert max(map(len, done.stdout.splitlines())) <= 80, done.stdout
    return done.stdout


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


def submit_packed(grid: Grid, blend: Path, tmp: Path, **workload: Any) -> tuple[str, Pack]:
    """Pack `blend` and upload what the orchestrator lacks as `mesh job submit` does, then
    submit a render job of it whose spec names the pack; the job id and the pack."""
    assert grid.customer is not None
    pack = pack_scene(blend, read_scene(blend, remap_dir=tmp / "scenes"))
    started = time.perf_counter()
    sent = upload(grid.customer, pack, show_progress=False)
    print(f"\npack: {len(pack.files)} files, {pack.total_bytes} bytes; sent "
          f"{sent.sent_bytes} bytes in {time.perf_counter() - started:.2f} s")
    assert pack.manifest is not None
    return grid.submit_workload({"kind": "blender", "blend_sha256": pack.blend.sha256,
                                 "assets": pack.manifest, **workload}), pack


def test_a_customer_disputes_and_the_arbiter_reproduces_the_tile_and_rules(
        grid: Grid, anvil: Anvil, tmp_path: Path) -> None:
    """The scene is a packed production-style one (textures by relative, absolute and
    outside paths, UDIM, a sequence, a linked library): the arbiter's re-render reads exactly
    the job's pack, so it matches the provider's tile (without it, the tile would differ)."""
    blend = build_scene(tmp_path / "artist", tmp_path / "elsewhere")
    grid.start(MESH_VERIFICATION_POLICY="fixed-1%")  # mostly trusted; a drawn window has a checker
    agents = [grid.agent(name).start() for name in ("renderer", "checker")]
    grid.wait_logged_in(agents)
    job_id, pack = submit_packed(grid, blend, tmp_path, frames={"start": 2, "end": 2},
                                 samples=8, chunk_samples=4, resolution=[32, 24])
    wait_for("the job settled on chain", lambda: grid.job(job_id)["status"] == "settled",
             timeout_s=240)
    customer = key_file(tmp_path, "customer", dev_account(4))
    arbiter = key_file(tmp_path, "arbiter", dev_account(3))
    stranger = key_file(tmp_path, "stranger", dev_account(7))

    bundle = answer(mesh(grid, anvil, customer, "dispute", "evidence", "--job", job_id,
                         "--json"))
    summary = human(mesh(grid, anvil, customer, "dispute", "evidence", "--job", job_id))
    assert "verified on chain (" in summary and "NOT verified" not in summary, summary
    assert len(summary.splitlines()) < 60, summary
    assert bundle["verification_on_chain"]["verified"], bundle["verification_on_chain"]
    (provider,) = bundle["providers"]

    dispute_args = ("dispute", "open", "--job", job_id, "--against", provider, "--amount",
                    "0.000000000000001", "--reason", "frame 2 looks wrong")
    declined = mesh(grid, anvil, customer, *dispute_args, stdin="n\n")
    assert declined.returncode == 2 and "posts a bond of 10 tokens" in declined.stderr
    assert "nothing sent: the dispute was not opened" in declined.stderr
    assert grid.chain.dispute_of(1) is None

    started = time.perf_counter()
    opening = mesh(grid, anvil, customer, *dispute_args, "--yes", "--json")
    assert "posts a bond of 10 tokens" in opening.stderr
    opened = answer(opening)
    dispute_id = int(opened["dispute_id"])
    assert opened["status"] == "open" and opened["frozen_amount"] == "1000"
    reflected(grid, job_id, dispute_id, ("disputed", "open"))

    listed = answer(mesh(grid, anvil, arbiter, "arbiter", "list", "--json"))
    assert [d["dispute_id"] for d in listed] == [dispute_id]
    table = human(mesh(grid, anvil, arbiter, "arbiter", "list"))
    assert "0.000000000000001" in table and job_id[:20] in table
    shown_table = human(mesh(grid, anvil, arbiter, "arbiter", "show", str(dispute_id)))
    assert "10 tokens" in shown_table and " UTC" in shown_table
    assert "open: 0.000000000000001 tokens of the settlement" in shown_table  # not 1000 (wei)
    shown = answer(mesh(grid, anvil, arbiter, "arbiter", "show", str(dispute_id), "--json"))
    assert shown["evidence"]["verification_on_chain"]["verified"]
    (task,) = shown["evidence"]["tasks"]
    assert task["recipe"]["blender"] and task["recipe"]["samples"] == 8
    assert task["recipe"]["assets"] == pack.manifest  # the signed spec's, exactly

    reproduced = answer(mesh(grid, anvil, arbiter, "arbiter", "reproduce", str(dispute_id),
                             "--workdir", str(tmp_path / "reproduce"), "--threads", "1",
                             "--json"))
    assert reproduced["match"] and reproduced["tolerance"] == "exact", reproduced
    assert sorted(p.name for p in (tmp_path / "reproduce/pack").iterdir()) == sorted(
        set((pack.manifest or {}).values()))  # each file of the pack fetched, hash-checked

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
    assert "0.000000000000001 tokens frozen go to" in status["orchestrator"]["outcome"]
    as_written = human(mesh(grid, anvil, None, "dispute", "status", str(dispute_id)))
    assert "dismissed" in as_written and "10 tokens" in as_written
    again = mesh(grid, anvil, arbiter, "arbiter", "rule", str(dispute_id), "--grant")
    assert again.returncode == 2 and "DisputesNotOpen" in again.stderr
    print(f"\ndispute {dispute_id} through the CLI: opened -> reproduced -> ruled -> "
          f"reflected in {elapsed:.1f} s (render {reproduced['render_s']} s)")
