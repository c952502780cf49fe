"""The customer's side: tile assembly on real Cycles tiles (bpy in the sandbox, tiny): the
frame assembled from its border-render strips has exactly the pixels of the frame rendered
whole, in PNG (8-bit) and in EXR (linear float: exact on CPU, TOOLCHAIN.md); and a submission
retried through the orchestrator's 503s while its chain is away."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from eth_utils import keccak
from PIL import Image

from agent.sandbox import Limits, Outcome, Sandbox
from agent.workloads.blender import WORKER, FrameTask, render
from mesh.customer import assemble_tiles, finished_frames, submit_job
from mesh.cutproxy import CutProxy
from mesh.localgrid import PAYMENT, Grid
from orchestrator.api.schemas import JobSpec
from orchestrator.chain.anvil import Anvil, dev_account
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import connect
from protocol.client import ApiCallError
from protocol.images import exr_pixels

RESOLUTION = (32, 25)  # 25 rows: strips of unequal heights at Blender's edges


def rendered(task: FrameTask, tmp: Path, target: Path) -> Path:
    with Sandbox(limits=Limits(wall_s=300), read_only=[task.blend, WORKER.parent],
                 parent_dir=tmp) as box:
        result = render(task, box)
        assert result.run.outcome is Outcome.OK and result.frame is not None, result.run
        shutil.copyfile(result.frame, target)
    return target


def pixels(path: Path) -> np.ndarray:
    return exr_pixels(path) if path.suffix == ".exr" else np.asarray(Image.open(path))


@pytest.mark.parametrize("fmt", ["exr", "png"])
def test_assembled_tiles_equal_the_frame_rendered_whole(scene: Path, tmp_path: Path,
                                                        fmt: str) -> None:
    out = tmp_path / "download"
    out.mkdir()
    task = {"blend": scene, "frame": 9, "samples": 8, "chunk_samples": 4, "fmt": fmt,
            "resolution": RESOLUTION, "threads": 1}
    whole = rendered(FrameTask(**task), tmp_path, tmp_path / f"whole.{fmt}")  # type: ignore[arg-type]
    results = []
    for tile in range(3):
        name = f"frame-0009-tile-{tile:02d}.{fmt}"
        rendered(FrameTask(**task, tile=tile, tiles=3), tmp_path, out / name)  # type: ignore[arg-type]
        results.append({"name": name, "frame": 9, "tile": tile, "tiles": 3})

    (frame,) = assemble_tiles(results[::-1], out)  # in any order

    assert frame == out / f"frame-0009.{fmt}"
    assert pixels(frame).shape == pixels(whole).shape
    assert np.array_equal(pixels(frame), pixels(whole))


def test_a_frame_with_a_tile_missing_is_not_assembled(tmp_path: Path) -> None:
    results = [{"name": f"frame-0001-tile-0{t}.exr", "frame": 1, "tile": t, "tiles": 3}
               for t in (0, 2)]
    assert assemble_tiles(results, tmp_path) == []


def test_finishedFrames_areTheWholeFramesAndTheAssembledOnes_byFrame(tmp_path: Path) -> None:
    """What `mesh job download --json` lists as frames: before, only frames assembled from
    tiles, so a job rendered whole listed `"frames": []`."""
    results = [{"name": "frame-0003.png", "frame": 3, "tile": 0, "tiles": 1},
               {"name": "frame-0001.png", "frame": 1},
               *({"name": f"frame-0002-tile-0{t}.png", "frame": 2, "tile": t, "tiles": 3}
                 for t in (0, 2))]  # tile 1 missing: frame 2 is not finished
    assert finished_frames(results, tmp_path) == [tmp_path / "frame-0001.png",
                                                  tmp_path / "frame-0003.png"]


@pytest.fixture
def grid_behind_a_cut(tmp_path: Path) -> Iterator[tuple[Grid, CutProxy]]:
    """The orchestrator reading the chain through a proxy the test can cut: while it is cut,
    the service cannot check an escrow and answers a submission 503."""
    with Anvil() as anvil:
        w3 = connect(anvil.rpc_url)
        deployment = deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                                  slasher=dev_account(2).address, arbiter=dev_account(3).address)
        chain = MeshChain(w3, deployment)
        chain.account(dev_account(0)).mint(dev_account(4).address, 3 * PAYMENT)
        proxy = CutProxy(int(anvil.rpc_url.rsplit(":", 1)[1])).restore()
        grid = Grid(chain, tmp_path / "grid", rpc_url=proxy.url)
        try:
            yield grid.start(), proxy
        finally:
            proxy.cut()
            grid.close()


WORKLOAD = {"kind": "command", "command": ["{python}", "-c", "print(1)"], "count": 1}


@pytest.mark.anvil
@pytest.mark.slow
def test_a_submission_answered_503_while_the_chain_is_away_is_retried_into_one_job(
        grid_behind_a_cut: tuple[Grid, CutProxy]) -> None:
    grid, proxy = grid_behind_a_cut
    proxy.cut()
    threading.Timer(2.0, proxy.restore).start()  # back between the second and third attempt

    job_id = grid.submit_workload(WORKLOAD)

    job = grid.job(job_id)
    assert job["job_id"] == job_id and sum(job["tasks"].values()) == 1


@pytest.mark.anvil
@pytest.mark.slow
def test_a_submission_still_answered_503_after_every_attempt_raises_that_refusal(
        grid_behind_a_cut: tuple[Grid, CutProxy]) -> None:
    grid, proxy = grid_behind_a_cut
    spec = {"workload": WORKLOAD, "deadline": int(time.time()) + 3600}
    job_id = keccak(text="never accepted")
    grid.chain.account(dev_account(4)).create_job(
        job_id, PAYMENT, spec["deadline"], JobSpec.model_validate(spec).canonical_hash())
    proxy.cut()
    assert grid.customer is not None

    with pytest.raises(ApiCallError) as refused:
        submit_job(grid.customer, {"job_id": "0x" + job_id.hex(), "spec": spec}, attempts=2)

    assert (refused.value.status, refused.value.code) == (503, "chain_unavailable")
    proxy.restore()
    with pytest.raises(ApiCallError) as unknown:
        grid.job("0x" + job_id.hex())
    assert unknown.value.status == 404  # no job was created by the refused attempts
