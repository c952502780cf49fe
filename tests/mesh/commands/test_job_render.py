"""The customer's whole path through real agents: `mesh job submit --wait --out` uploads the
sample scene, escrows, submits, follows the render and downloads frames; with `--providers`
the node of a provider not named never renders or re-checks any of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from mesh.localgrid import ORCHESTRATOR_ID, Grid
from orchestrator.chain.anvil import dev_account
from tests.mesh.commands.conftest import Mesh

pytestmark = [pytest.mark.anvil, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _started(grid: Grid) -> None:
    grid.start()


def test_submitWaitOut_rendersOnlyOnTheNamedProviders_andDownloadsTheFrames(
        grid: Grid, on_chain: Mesh, scene: Path) -> None:
    trusted = [grid.agent(f"trusted-{i}") for i in range(2)]
    outsider = grid.agent("outsider")
    for agent in [*trusted, outsider]:
        agent.start()
    grid.wait_logged_in([*trusted, outsider])
    on_chain.env.update({"MESH_ORCHESTRATOR_URL": grid.url,
                         "MESH_ORCHESTRATOR_ID": ORCHESTRATOR_ID})
    key = on_chain.root / "customer.key"
    key.write_text(bytes(dev_account(4).key).hex())
    assert on_chain.signed("wallet", "import", "customer", "--key-file", str(key)).exit_code == 0
    out = on_chain.root / "frames"

    done = on_chain.signed(
        "job", "submit", "--yes", str(scene), "--frames", "1-2", "--samples", "8", "--resolution",
        "32x24", "--budget", "2", "--wallet", "customer", "--providers",
        ",".join(a.address for a in trusted), "--wait", "--out", str(out), "--json")

    assert done.exit_code == 0, done.output + outsider.log()[-2000:]
    job = json.loads(done.stdout)
    assert job["status"] in ("completed", "settling", "settled") and job["downloaded"] == 2
    assert sorted(p.name for p in out.iterdir()) == ["frame-0001.png", "frame-0002.png"]
    assert Image.open(out / "frame-0001.png").size == (32, 24)
    rendered_by = "\n".join(a.log() for a in trusted)
    assert "frame rendered" in rendered_by
    assert "lease " not in outsider.log() and "check " not in outsider.log()
