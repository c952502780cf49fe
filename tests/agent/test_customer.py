"""The customer's tile assembly on real Cycles tiles (bpy in the sandbox, tiny): the frame
assembled from its border-render strips has exactly the pixels of the frame rendered whole, in
PNG (8-bit) and in EXR (linear float: exact on CPU, TOOLCHAIN.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agent.customer import assemble_tiles
from agent.sandbox import Limits, Outcome, Sandbox
from agent.workloads.blender import WORKER, FrameTask, exr_pixels, render

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
