"""A packed production-style scene through real agents (issue 35): `mesh job submit` sends the
.blend with its textures, UDIM tiles, image sequence and linked library, or with textures
outside its folder (absolute and `//../` paths, which the .blend packed points into the pack);
the agent lays the pack out beside the .blend in its sandbox; the frame it renders has the
pixels of a direct bpy render of the artist's unpacked scene in place (the agent's own Blender
worker, run on the original folder outside any sandbox), and not those of the .blend alone."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.workloads.blender import WORKER
from mesh.localgrid import ORCHESTRATOR_ID, Grid
from orchestrator.chain.anvil import dev_account
from protocol.images import image_pixels
from tests.mesh.commands.conftest import Mesh
from tests.mesh.test_pack import build_scene

pytestmark = [pytest.mark.anvil, pytest.mark.slow]
SAMPLES, SIZE = 8, (32, 24)


def render_in_place(blend: Path, out: Path) -> np.ndarray:
    """Frame 1 of `blend` where it lies, by the worker agents render with (same settings)."""
    out.mkdir(parents=True)
    spec = {"blend": str(blend), "frames": [1], "tile": 0, "tiles": 1, "samples": SAMPLES,
            "threads": 2, "resolution": list(SIZE), "format": "png", "out": str(out),
            "done": [], "todo": [[0, SAMPLES]]}
    (out / "spec.json").write_text(json.dumps(spec))
    subprocess.run([sys.executable, str(WORKER), str(out / "spec.json")], check=True,
                   capture_output=True, timeout=300, cwd=out)
    return image_pixels(next(out.glob("*1.png")))


def rendered_on_the_grid(grid: Grid, on_chain: Mesh, blend: Path, out: Path
                         ) -> tuple[np.ndarray, dict[str, Any]]:
    """Frame 1 of `blend` as two real agents render it through `mesh job submit --wait
    --out`, and the submit's answer (its quote included)."""
    grid.start()
    agents = [grid.agent(f"renders-{i}") for i in range(2)]
    for agent in agents:
        agent.start()
    grid.wait_logged_in(agents)
    on_chain.env.update({"MESH_ORCHESTRATOR_URL": grid.url,
                         "MESH_ORCHESTRATOR_ID": ORCHESTRATOR_ID})
    key = on_chain.root / "customer.key"
    key.write_text(bytes(dev_account(4).key).hex())
    assert on_chain.signed("wallet", "import", "customer", "--key-file", str(key)).exit_code == 0
    started = time.monotonic()
    done = on_chain.signed(
        "job", "submit", "--yes", str(blend), "--frames", "1", "--samples", str(SAMPLES),
        "--resolution", "x".join(map(str, SIZE)), "--budget", "2", "--wallet", "customer",
        "--wait", "--out", str(out), "--json")
    assert done.exit_code == 0, done.output + "".join(a.log()[-2000:] for a in agents)
    job = json.loads(done.stdout)
    assert job["status"] in ("completed", "settling", "settled") and job["downloaded"] == 1
    quote = job["quote"]
    print(f"quoted: done in {quote['completion_s']} s, p(deadline) {quote['p_deadline']}; "
          f"submit to download: {time.monotonic() - started:.1f} s")
    return image_pixels(out / "frame-0001.png"), job


def alone(blend: Path, tmp_path: Path) -> np.ndarray:
    """Frame 1 of the .blend copied alone into an empty folder (none of its files found)."""
    folder = tmp_path / "alone"
    folder.mkdir()
    (folder / "scene.blend").write_bytes(blend.read_bytes())
    return render_in_place(folder / "scene.blend", tmp_path / "alone-out")


def test_a_packed_scene_renders_on_the_grid_as_it_does_on_the_artists_machine(
        grid: Grid, on_chain: Mesh, tmp_path: Path) -> None:
    blend = build_scene(tmp_path / "artist", tmp_path / "elsewhere")
    on_grid, _ = rendered_on_the_grid(grid, on_chain, blend, tmp_path / "frames")
    assert np.array_equal(on_grid, render_in_place(blend, tmp_path / "local"))
    assert not np.array_equal(on_grid, alone(blend, tmp_path))


def test_textures_outside_the_scenes_folder_render_on_the_grid_as_on_the_artists_machine(
        grid: Grid, on_chain: Mesh, tmp_path: Path) -> None:
    """An absolute path and a `//../` one: the .blend packed (Blender's copy pointing them into
    the pack) finds both on the provider."""
    subprocess.run([sys.executable, "-m", "tests.mesh.outside_scene", str(tmp_path / "artist"),
                    str(tmp_path / "elsewhere")], check=True, capture_output=True, timeout=120)
    blend = tmp_path / "artist/scene.blend"
    on_grid, job = rendered_on_the_grid(grid, on_chain, blend, tmp_path / "frames")
    assert np.array_equal(on_grid, render_in_place(blend, tmp_path / "local"))
    for folder in ("elsewhere", "shared"):  # without them the frame differs: they show in it
        (tmp_path / folder).rename(tmp_path / f"{folder}-gone")
    assert not np.array_equal(on_grid, render_in_place(blend, tmp_path / "without"))
    assert job["pack"]["files"] == 3
    quote = job["quote"]
    assert quote["nodes"] >= 1 and 0.0 < quote["p_deadline"] <= 1.0 and quote["warning"] is None
