"""The Blender add-on (issue 35): the zip `mesh addon build` makes holds a valid Blender 4.2
extension manifest and installs through Blender's own extension API in the pinned headless
bpy; its buttons refuse in one report line (no wallet, no budget, no orchestrator), and
against a local grid (a real orchestrator on anvil, real agents) it quotes, submits, follows
the job frame by frame and downloads the frame of a packed production-style scene into the
scene's output folder, with the pixels of the artist's local render."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mesh.localgrid import ORCHESTRATOR_ID, Grid
from orchestrator.chain.anvil import dev_account
from protocol import keystore
from protocol.images import image_pixels
from protocol.packs import outside_name
from tests.mesh.addon.blender_session import MARK
from tests.mesh.commands.conftest import PASSWORD, Mesh
from tests.mesh.commands.test_job_render_pack import SAMPLES, SIZE, alone, render_in_place
from tests.mesh.packed_scene import FILES
from tests.mesh.test_pack import build_scene

DOWN = "http://127.0.0.1:9"  # nothing answers there


@pytest.fixture
def addon_zip(mesh: Mesh, tmp_path: Path) -> Path:
    done = mesh("addon", "build", "--out", str(tmp_path / "mesh_blender.zip"), "--json")
    assert done.exit_code == 0, done.output
    return Path(json.loads(done.stdout)["zip"])


def session(plan: dict[str, Any], root: Path, env: dict[str, str]) -> dict[str, Any]:
    """The answers of `tests.mesh.addon.blender_session` for `plan`, with its own $HOME (the
    extension installs there), and no traceback anywhere in its output."""
    (root / "plan.json").write_text(json.dumps(plan))
    done = subprocess.run(
        [sys.executable, "-m", "tests.mesh.addon.blender_session", str(root / "plan.json")],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, **env, "HOME": str(root / "home")})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith(MARK))
    return dict(json.loads(line[len(MARK):]))


def test_the_zip_holds_a_blender_extension_manifest(addon_zip: Path) -> None:
    with zipfile.ZipFile(addon_zip) as archive:
        assert sorted(archive.namelist()) == ["__init__.py", "blender_manifest.toml"]
        manifest = tomllib.loads(archive.read("blender_manifest.toml").decode())
    assert manifest["schema_version"] == "1.0.0"
    assert (manifest["id"], manifest["type"], manifest["blender_version_min"]) == (
        "depin_mesh", "add-on", "4.2.0")
    assert manifest["version"] == "0.1.0" and manifest["maintainer"] and manifest["name"]
    assert 0 < len(manifest["tagline"]) <= 64 and not manifest["tagline"].endswith(".")
    assert all(name.startswith("SPDX:") for name in manifest["license"])


def test_each_button_refuses_in_one_report_line(addon_zip: Path, scene: Path, tmp_path: Path
                                                 ) -> None:
    wallet = tmp_path / "customer.json"
    keystore.create(wallet, PASSWORD, scrypt_n=2**10)
    refused = session({
        "zip": str(addon_zip), "blend": str(scene), "save_as": str(tmp_path / "shot.blend"),
        "render": {"filepath": "//frames/"},
        "prefs": {"python": sys.executable, "orchestrator_url": DOWN, "rpc_url": DOWN,
                  "data_dir": str(tmp_path / "data")},
        "presses": [
            {"operator": "mesh_grid.quote", "job": {"budget": 0.0}},
            {"operator": "mesh_grid.quote", "job": {"budget": 1.0}},
            {"operator": "mesh_grid.submit", "properties": {"password": PASSWORD}},
            {"operator": "mesh_grid.download", "properties": {"password": PASSWORD},
             "job": {"job_id": "0x" + "ab" * 32}},
            {"operator": "mesh_grid.submit", "properties": {"password": PASSWORD},
             "prefs": {"keystore": str(wallet)}, "job": {"budget": 0.0}},
            {"operator": "mesh_grid.submit", "properties": {"password": "wrong"},
             "job": {"budget": 1.0}},
            {"operator": "mesh_grid.submit", "properties": {"password": PASSWORD}},
            {"operator": "mesh_grid.download", "properties": {"password": PASSWORD}},
            {"operator": "mesh_grid.pack", "prefs": {"python": str(tmp_path / "no-python")}},
        ]}, tmp_path, {"MESH_WALLET_DIR": str(tmp_path / "wallets")})
    reports = [press["report"] for press in refused["presses"]]
    for report in reports:
        assert report is not None and len(report.strip().splitlines()) == 1, report
    down = ("Error: no orchestrator answers ([Errno 111] Connection refused); start one "
            "(`mesh orchestrator serve`) or pass --orchestrator / MESH_ORCHESTRATOR_URL")
    no_wallet = ("Error: set the wallet: a keystore file in the add-on's preferences "
                 "(`mesh wallet new NAME` makes one)")
    no_budget = "Error: set a budget above 0 tokens (the most the job may spend)"
    assert [report.strip() for report in reports] == [
        no_budget, down, no_wallet, no_wallet, no_budget, f"Error: wrong password for {wallet}",
        down, down, f"Error: the add-on's Python {tmp_path / 'no-python'} does not run: No "
        "such file or directory"]
    assert all(press["job_id"] in ("", "0x" + "ab" * 32) for press in refused["presses"])
    assert refused["output_folder"] == str(tmp_path / "frames")
    assert refused["output"] == []  # nothing downloaded


@pytest.mark.anvil
@pytest.mark.slow
def test_quote_submit_follow_and_download_a_packed_scene_from_blender(
        addon_zip: Path, grid: Grid, on_chain: Mesh, tmp_path: Path) -> None:
    """A production-style scene (`tests.mesh.packed_scene`: textures by relative and absolute
    path, outside its folder, UDIM, a sequence, a linked library with its own texture): the
    add-on packs it all, and the frame it downloads has the pixels of the artist's render of
    the scene in place, not those of the .blend alone."""
    scene = build_scene(tmp_path / "artist", tmp_path / "elsewhere")
    grid.start()
    agents = [grid.agent(f"renders-{i}") for i in range(2)]  # a second re-checks the frame
    for agent in agents:
        agent.start()
    grid.wait_logged_in(agents)
    key = tmp_path / "customer.key"
    key.write_text(bytes(dev_account(4).key).hex())
    assert on_chain.signed("wallet", "import", "customer", "--key-file", str(key)).exit_code == 0
    wallet = Path(on_chain.env["MESH_WALLET_DIR"]) / "customer.json"
    shot = scene.with_name("shot.blend")  # beside it: its relative paths stay as they are
    answers = session({
        "zip": str(addon_zip), "blend": str(scene), "save_as": str(shot),
        "render": {"resolution_x": SIZE[0], "resolution_y": SIZE[1],
                   "resolution_percentage": 100, "filepath": "//frames/"},
        "prefs": {"python": sys.executable, "orchestrator_url": grid.url,
                  "orchestrator_id": ORCHESTRATOR_ID, "rpc_url": on_chain.env["MESH_RPC_URL"],
                  "data_dir": on_chain.env["MESH_DATA_DIR"], "keystore": str(wallet)},
        "presses": [
            {"operator": "mesh_grid.quote",
             "job": {"frames": "1", "budget": 2.0, "samples": SAMPLES}},
            {"operator": "mesh_grid.pack"},
            {"operator": "mesh_grid.submit", "properties": {"password": PASSWORD}},
            {"operator": "mesh_grid.download", "properties": {"password": PASSWORD}},
        ]}, tmp_path, {k: on_chain.env[k] for k in ("MESH_WALLET_DIR", "MESH_CHAIN_ID")})
    quoted, packed, submitted, downloaded = answers["presses"]
    assert [press["report"] for press in answers["presses"]] == [None] * 4
    dry_run = packed["state"]["pack"]
    absolute = outside_name((tmp_path / "elsewhere/abs.png").resolve().as_posix())
    assert sorted(f["path"] for f in dry_run["files"]) == sorted(
        ["shot.blend", *FILES, absolute])
    assert dry_run["missing"] == []
    quote = quoted["state"]["quote"]
    sent = submitted["state"]["submitted"]["pack"]
    print(f"\nadd-on pack: {len(dry_run['files'])} files, {dry_run['total_bytes']} bytes in "
          f"{dry_run['pack_s']} s; sent {sent}; quoted: done in {quote['completion_s']} s; "
          f"the add-on's submit to the job finished: {submitted['seconds']} s, download "
          f"{downloaded['seconds']} s")
    assert quote["tasks"] == 1 and quote["nodes"] >= 1 and 0.0 < quote["p_deadline"] <= 1.0
    job = submitted["state"]
    assert job["error"] is None and job["status"] in ("completed", "settling", "settled")
    assert job["frames"] == {"1": "done"}
    assert submitted["job_id"] == job["job_id"] == job["submitted"]["job_id"]  # the timer's
    assert sent["sent_files"] == len({f["sha256"] for f in dry_run["files"]})  # all: new
    frames = shot.parent / "frames"
    assert answers["output_folder"] == str(frames)
    assert downloaded["state"]["downloaded"] == [str(frames / "frame-0001.png")]
    assert "frame-0001.png" in answers["output"]
    on_grid = image_pixels(frames / "frame-0001.png")
    assert np.array_equal(on_grid, render_in_place(shot, tmp_path / "local"))
    assert not np.array_equal(on_grid, alone(shot, tmp_path))  # the pack shows in the frame
