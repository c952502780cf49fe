"""`reproduce`: a disputed tile re-rendered from its recipe with the agent's renderer (real
Cycles in the sandbox, tiny) matches the honest result bit for bit and catches a tampered one."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agent.sandbox import Limits, Outcome, Sandbox
from agent.workloads.blender import WORKER, render
from mesh.reproduce import ReproduceError, reproduce, task_of

RECIPE = {"scene_sha256": "unused here", "frame": 3, "tile": 1, "tiles": 2, "samples": 8,
          "chunk_samples": 4, "resolution": [32, 24], "format": "png", "seed": "scene"}


def delivered(scene: Path, tmp: Path) -> tuple[Path, dict[str, str]]:
    """The provider's result: the same recipe rendered once, as the agent delivers it."""
    task = task_of(RECIPE, scene, threads=1)
    with Sandbox(limits=Limits(memory_bytes=3 << 30, wall_s=300),
                 read_only=[scene, WORKER.parent], parent_dir=tmp) as box:
        rendered = render(task, box)
        assert rendered.run.outcome is Outcome.OK and rendered.frame is not None
        target = tmp / "result.png"
        shutil.copyfile(rendered.frame, target)
        return target, rendered.env


def test_an_honest_tile_reproduces_bit_for_bit_and_a_tampered_one_does_not(
        scene: Path, tmp_path: Path) -> None:
    result, env = delivered(scene, tmp_path)
    recipe = {**RECIPE, **env}  # the bundle names the build and kernel the node used

    honest = reproduce(recipe, scene=scene, result=result, workdir=tmp_path, threads=1)

    assert honest.match and honest.max_abs == 0.0 and honest.tolerance == "exact", honest
    assert honest.render_s > 0
    pixels = np.asarray(Image.open(result).convert("RGBA")).copy()
    pixels[5, 7, 0] ^= 0x40  # one channel of one pixel
    tampered = tmp_path / "tampered.png"
    Image.fromarray(pixels).save(tampered)
    caught = reproduce(recipe, scene=scene, result=tampered, workdir=tmp_path, threads=1)
    assert not caught.match and caught.max_abs > 0.2


def test_a_scene_that_does_not_render_is_one_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.blend"
    broken.write_bytes(b"not a blend file")
    with pytest.raises(ReproduceError, match="the render failed"):
        reproduce(RECIPE, scene=broken, result=broken, workdir=tmp_path, threads=1)


def test_a_pack_other_than_the_recipes_is_refused(scene: Path, tmp_path: Path) -> None:
    """The re-render reads exactly the files the recipe's pack names, or does not run."""
    named = {**RECIPE, "assets": {"tex/rel.png": "ab" * 32}}
    with pytest.raises(ReproduceError, match="the recipe's pack names 1 files, 0 are given"):
        reproduce(named, scene=scene, result=scene, workdir=tmp_path, threads=1)
    with pytest.raises(ReproduceError, match="names 0 files, 1 are given"):
        task_of(RECIPE, scene, 1, {"tex/rel.png": scene})
