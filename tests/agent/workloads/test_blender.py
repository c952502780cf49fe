"""Real Cycles renders through bpy in the sandbox, tiny (32x24): chunks, merge, resume, tiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agent.sandbox import Limits, Outcome, Sandbox, UnsafeInput
from agent.workloads.blender import (
    WORKER,
    Chunk,
    FrameTask,
    Rendered,
    fetch_pack,
    plan_chunks,
    render,
    tile_row_range,
)
from protocol.client import sha256_file
from protocol.images import exr_pixels

TINY = (32, 24)
LIMITS = Limits(memory_bytes=3 << 30, wall_s=300)


def run(task: FrameTask, tmp: Path, done: tuple[Chunk, ...] = (),
        limits: Limits = LIMITS) -> tuple[Rendered, np.ndarray, list[np.ndarray]]:
    """Render in a fresh sandbox; the frame's pixels and every chunk's, read before the
    sandbox is wiped."""
    with Sandbox(limits=limits, read_only=[task.blend, WORKER.parent], parent_dir=tmp) as box:
        rendered = render(task, box, done=done)
        assert rendered.run.outcome is Outcome.OK, rendered.run.stderr_tail
        assert rendered.frame is not None
        frame = (exr_pixels(rendered.frame) if task.fmt == "exr"
                 else np.asarray(Image.open(rendered.frame)))
        chunks = [exr_pixels(chunk.path) for chunk in rendered.chunks]
        kept = tmp / f"kept-{len(list(tmp.iterdir()))}"
        kept.mkdir()
        for chunk in rendered.chunks:
            (kept / chunk.path.name).write_bytes(chunk.path.read_bytes())
        rendered.chunks = [Chunk(c.offset, c.length, kept / c.path.name, c.sha256, c.seconds)
                           for c in rendered.chunks]
    return rendered, frame, chunks


def test_plan_chunks_coversEverySampleOnce_lastChunkTakesTheRest() -> None:
    assert plan_chunks(16, 5) == [(0, 5), (5, 5), (10, 5), (15, 1)]
    assert plan_chunks(8, 8) == [(0, 8)]
    with pytest.raises(ValueError):
        plan_chunks(0, 4)


def test_chunks_mergedByTrueLengths_matchOneFullRenderWithinMeasuredTolerance(
        scene: Path, tmp_path: Path) -> None:
    chunked = FrameTask(blend=scene, frame=10, samples=16, chunk_samples=5, fmt="exr",
                        resolution=TINY)
    whole = FrameTask(blend=scene, frame=10, samples=16, chunk_samples=16, fmt="exr",
                      resolution=TINY)

    _, merged, chunks = run(chunked, tmp_path)
    _, full, _ = run(whole, tmp_path)

    assert len(chunks) == 4 and merged.shape == (24, 32, 4)
    relative = np.abs(merged - full) / np.maximum(np.abs(full), 1e-6)
    assert relative.max() < 1e-5  # measured 4e-7 here (TOOLCHAIN.md: 1.4e-6 at 160x120)
    assert not np.array_equal(chunks[0], chunks[1])  # chunks are different samples
    # equal weights would be wrong: the 1-sample chunk would count as much as a 5-sample one
    naive = np.mean(chunks, axis=0)
    assert np.abs(naive - full).max() > 100 * np.abs(merged - full).max()


def test_resumedFrame_rendersOnlyMissingChunks_andEqualsTheUninterruptedFrame(
        scene: Path, tmp_path: Path) -> None:
    task = FrameTask(blend=scene, frame=30, samples=12, chunk_samples=4, resolution=TINY)
    first, frame, _ = run(task, tmp_path)

    resumed, again, _ = run(task, tmp_path, done=tuple(first.chunks[:2]))

    assert [(c.offset, c.length) for c in resumed.rendered_chunks] == [(8, 4)]
    assert np.array_equal(frame, again)
    # chunk files are canonical: the same pixels hash the same on any run
    rerun, _, _ = run(task, tmp_path)
    assert [c.sha256 for c in rerun.chunks] == [c.sha256 for c in first.chunks]


def test_tiles_stitchedAtBlenderEdges_equalTheFullFrame(scene: Path, tmp_path: Path) -> None:
    full_task = FrameTask(blend=scene, frame=5, samples=8, chunk_samples=8, resolution=(32, 25))
    _, full, _ = run(full_task, tmp_path)
    stitched = np.zeros_like(full)
    for tile in range(3):
        task = FrameTask(blend=scene, frame=5, tile=tile, tiles=3, samples=8, chunk_samples=8,
                         resolution=(32, 25))
        _, pixels, _ = run(task, tmp_path)
        top, bottom = tile_row_range(tile, 3, 25)
        assert pixels.shape[0] == bottom - top
        stitched[top:bottom] = pixels

    assert np.array_equal(stitched, full)


def test_render_overItsMemoryLimit_failsWithThatReason(scene: Path, tmp_path: Path) -> None:
    task = FrameTask(blend=scene, frame=1, samples=4, chunk_samples=4, resolution=TINY)
    with Sandbox(limits=Limits(memory_bytes=400 << 20, wall_s=120), parent_dir=tmp_path,
                 read_only=[scene, WORKER.parent]) as box:
        rendered = render(task, box)

    assert rendered.run.outcome is Outcome.MEMORY, rendered.run.stderr_tail
    assert rendered.frame is None or rendered.run.outcome is not Outcome.OK


def test_fetch_pack_takes_each_file_by_hash_in_path_order_and_stops_past_the_limit(
        tmp_path: Path) -> None:
    files = {}
    for name, size in (("a.png", 10), ("b/c.png", 12), ("d.png", 14)):
        path = tmp_path / name.replace("/", "-")
        path.write_bytes(name.encode().ljust(size, b"."))
        files[name] = path
    by_hash = {sha256_file(path): path for path in files.values()}
    manifest = {name: sha256_file(path) for name, path in files.items()}
    asked: list[str] = []

    def fetch(sha256: str) -> Path:
        asked.append(sha256)
        return by_hash[sha256]

    assert fetch_pack(manifest, fetch, 36) == files
    assert asked == [manifest[name] for name in sorted(files)]
    asked.clear()
    with pytest.raises(UnsafeInput, match=r"the pack passes 21 bytes at 'b/c\.png'"):
        fetch_pack(manifest, fetch, 21)
    assert asked == [manifest["a.png"], manifest["b/c.png"]]  # d.png never fetched
    assert fetch_pack({}, fetch, 0) == {}
