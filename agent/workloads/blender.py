"""Render one frame (or one tile of a frame) of a .blend with Cycles on CPU, in sample chunks.

A frame's samples are split into fixed chunks (`plan_chunks`); each chunk is rendered with
`use_sample_subset`, written as a linear float EXR, decoded here and handed to `on_chunk` (the
daemon uploads it as a content-addressed checkpoint). The frame is the mean of the chunks
weighted by their true lengths. A resumed frame gets the finished chunks back and renders only
the rest, so a node that dies loses at most the chunk it was rendering. The partition depends
only on the task (samples, chunk_samples), never on the node, so a resumed frame has the same
pixels as an uninterrupted one: chunks are bit-reproducible (same Blender build, same CPU
kernel) and the merge adds them in offset order.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.sandbox import Outcome, Run, Sandbox, UnsafeInput, UnsafeOutput, task_python
from agent.workloads import blender_worker
from orchestrator.domain.checkpointing import plan_chunks
from orchestrator.domain.verification import window_rows
from protocol.client import sha256_file
from protocol.images import OutputInvalid, exr_pixels, image_size, write_exr

WORKER = Path(blender_worker.__file__).resolve()
DEFAULT_SAMPLES = 64


@dataclass(frozen=True, slots=True)
class FrameTask:
    blend: Path
    frame: int
    tile: int = 0
    tiles: int = 1
    samples: int = DEFAULT_SAMPLES
    chunk_samples: int = DEFAULT_SAMPLES
    fmt: str = "png"  # png (8-bit, no dither) or exr (linear float)
    resolution: tuple[int, int] | None = None  # override the file's, e.g. tiny test renders
    threads: int = 2
    assets: tuple[tuple[str, Path], ...] = ()  # the scene's pack: (pack path, cached file)

    @classmethod
    def from_payload(cls, payload: dict[str, Any], blend: Path, threads: int,
                     assets: Mapping[str, Path] | None = None) -> FrameTask:
        resolution = payload.get("resolution")
        return cls(blend=blend, frame=int(payload["frame"]), tile=int(payload.get("tile", 0)),
                   tiles=int(payload.get("tiles", 1)),
                   samples=int(payload.get("samples") or DEFAULT_SAMPLES),
                   chunk_samples=int(payload.get("chunk_samples") or
                                     payload.get("samples") or DEFAULT_SAMPLES),
                   fmt=str(payload.get("format", "png")),
                   resolution=None if resolution is None else (int(resolution[0]),
                                                              int(resolution[1])),
                   threads=threads, assets=tuple(sorted((assets or {}).items())))

    @property
    def chunks(self) -> list[tuple[int, int]]:
        return plan_chunks(self.samples, self.chunk_samples)


def fetch_pack(assets: Mapping[str, str], fetch: Callable[[str], Path], limit: int
               ) -> dict[str, Path]:
    """A scene's pack (`assets`: pack path -> sha256, its job's signed manifest) as local
    files, for `FrameTask.assets`: each fetched in path order by `fetch` (sha256 -> the file,
    downloaded and hash-checked), UnsafeInput before more is fetched once they pass `limit`
    bytes together. What an agent does before a render or a check, and an arbiter before a
    re-render (`mesh arbiter reproduce`)."""
    fetched: dict[str, Path] = {}
    total = 0
    for name, sha256 in sorted(assets.items()):
        fetched[name] = fetch(str(sha256))
        total += fetched[name].stat().st_size
        if total > limit:
            raise UnsafeInput(f"the pack passes {limit} bytes at {name!r}")
    return fetched


tile_row_range = window_rows
"""Rows [top, bottom) of a tile in the top-down frame (`domain.verification.window_rows`:
Blender's border edges, the windows verification re-renders are tiles too)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    offset: int
    length: int
    path: Path
    sha256: str
    seconds: float  # render time of this chunk (0 for one given back from a checkpoint)


@dataclass(slots=True)
class Rendered:
    run: Run
    chunks: list[Chunk]
    frame: Path | None
    ready_s: float  # open the .blend + scene set-up, once the task was given
    import_s: float  # `import bpy` in the sandboxed process (before the task, when warm)
    env: dict[str, str]  # Blender build and CPU kernel (`blender_worker.render_env`)

    @property
    def rendered_chunks(self) -> list[Chunk]:
        return [chunk for chunk in self.chunks if chunk.seconds > 0]


def worker_output(sandbox: Sandbox, path: Path) -> Path:
    """A file the worker named: a regular file directly in its output dir, or OutputInvalid."""
    if path.parent != sandbox.out:
        raise OutputInvalid(f"the worker named a file outside its output: {path}")
    try:
        return sandbox.output_path(path.name)
    except (UnsafeOutput, OSError) as exc:
        raise OutputInvalid(f"the worker's {path.name}: {exc}") from None


def start_worker(sandbox: Sandbox, *, cpu_kernel: str | None = None) -> None:
    """Start the Blender worker in `sandbox` so that it imports bpy before its task arrives
    (the sandbox must have `WORKER.parent` among its read-only paths). `cpu_kernel="sse42"`
    makes Cycles skip its AVX2 kernel."""
    env = {"PYTHONNOUSERSITE": "1"}
    if cpu_kernel == "sse42":
        env["CYCLES_CPU_NO_AVX2"] = "1"
    sandbox.start([task_python(), str(WORKER), "-"], env=env)


def render(task: FrameTask, sandbox: Sandbox, *, done: Sequence[Chunk] = (),
           on_chunk: Callable[[Chunk], None] | None = None) -> Rendered:
    """Render the chunks of `task` not in `done` and merge all of them, in `sandbox` (whose
    worker may already be warm, see `start_worker`)."""
    plan = task.chunks
    have = {(chunk.offset, chunk.length) for chunk in done}
    if not have <= set(plan):
        raise ValueError("the checkpoint's chunks do not belong to this task's plan")
    given = sandbox.given
    kept = sandbox.root / "chunks"  # canonical chunk files, out of the task's reach
    kept.mkdir(exist_ok=True)
    done_paths = []
    for chunk in sorted(done, key=lambda c: c.offset):
        target = given / chunk.path.name
        if chunk.path != target:
            target.write_bytes(chunk.path.read_bytes())
        done_paths.append([str(target), chunk.length])
    blend = given / "scene.blend"  # the sandbox sees its own dir, not the agent's cache
    try:
        os.link(task.blend, blend)
    except OSError:
        shutil.copyfile(task.blend, blend)
    sandbox.give(dict(task.assets))  # beside it, as the scene's relative paths name them
    spec = {"blend": str(blend), "frames": [task.frame], "tile": task.tile,
            "tiles": task.tiles, "samples": task.samples, "threads": task.threads,
            "resolution": list(task.resolution) if task.resolution else None,
            "format": task.fmt, "out": str(sandbox.out), "done": done_paths,
            "todo": [list(c) for c in plan if c not in have]}
    chunks = [Chunk(c.offset, c.length, c.path, c.sha256, 0.0) for c in done]  # not redone
    frame: list[Path] = []
    ready = [0.0, 0.0]
    env: dict[str, str] = {}
    shape: list[tuple[int, ...]] = [exr_pixels(c.path).shape for c in done[:1]]

    def line(text: str) -> None:
        if not text.startswith(blender_worker.MARK):
            return
        event = json.loads(text[len(blender_worker.MARK):])
        path = Path(event.get("path", ""))
        if event["event"] == "ready":
            ready[:] = [float(event["seconds"]), float(event["import_s"])]
            env.update({str(k): str(v) for k, v in dict(event.get("env") or {}).items()})
        elif event["event"] == "chunk":
            path = worker_output(sandbox, path)
            pixels = exr_pixels(path)  # decoded here: a truncated file fails now, not later
            if shape and pixels.shape != shape[0]:
                raise OutputInvalid(f"{path.name} is {pixels.shape}, the others {shape[0]}")
            shape[:] = [pixels.shape]
            canonical = write_exr(kept / path.name, pixels)
            chunk = Chunk(int(event["offset"]), int(event["length"]), canonical,
                          sha256_file(canonical), float(event["seconds"]))
            chunks.append(chunk)
            if on_chunk is not None:
                on_chunk(chunk)
        elif event["event"] == "frame":
            frame.append(worker_output(sandbox, path))

    if not sandbox.started:
        start_worker(sandbox)
    run = sandbox.run(on_line=line, stdin=json.dumps(spec))
    result = Rendered(run=run, chunks=sorted(chunks, key=lambda c: c.offset),
                      frame=frame[0] if frame else None, ready_s=ready[0], import_s=ready[1],
                      env=env)
    if run.outcome is Outcome.OK:
        check_frame(result, task)
    return result


def check_frame(result: Rendered, task: FrameTask) -> None:
    """A finished render must have every chunk of the plan and a decodable frame of the
    chunks' size; otherwise the run counts as failed whatever the exit code said."""
    if [(c.offset, c.length) for c in result.chunks] != task.chunks:
        result.run.outcome, result.run.detail = Outcome.FAILED, "chunks missing from the render"
        return
    if result.frame is None:
        result.run.outcome, result.run.detail = Outcome.FAILED, "no frame written"
        return
    try:
        width, height = image_size(result.frame)
        chunk_h, chunk_w, _ = exr_pixels(result.chunks[0].path).shape
    except OutputInvalid as exc:
        result.run.outcome, result.run.detail = Outcome.OUTPUT, str(exc)
        return
    if (width, height) != (chunk_w, chunk_h):
        result.run.outcome, result.run.detail = (
            Outcome.FAILED, f"frame {width}x{height} differs from chunks {chunk_w}x{chunk_h}")
