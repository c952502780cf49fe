"""Dishonest providers, for the verification tests and `mesh bench verify`: each model wraps the
real renderer (`blender.render`) and changes what it renders or delivers, as a provider who
wants to be paid for less work would. `mesh agent run` never uses them; `python -m
mesh.bench.cheating_agent CHEAT agent run ...` is the real agent with one installed in place of
`blender.render` (the verification tests' cheaters, the demo's lazy node).

* `lazy`: fewer samples than asked (a quarter of every chunk), relabelled as the full plan:
  the most profitable cheat, and the hardest to see (flat regions differ by 1e-7).
* `stale`: another frame of the scene delivered (a cached or earlier one).
* `tamper`: an honest render with `share` of its windows altered (tiles from elsewhere).
* `sleeper`: honest for its first `honest_tasks` renders, then lazy.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image

from agent.sandbox import Sandbox
from agent.workloads.blender import Chunk, FrameTask, Rendered
from orchestrator.domain.verification import window_rows, windows_for
from protocol.client import sha256_file
from protocol.images import exr_pixels, write_exr

STALE_FRAME_OFFSET = 12  # half a second of the sample scene: the cube has visibly moved
TAMPER_GAIN = 0.9  # tampered windows come out 10 % darker
WINDOWS = 8  # the orchestrator's default `verification_windows`


class Renderer(Protocol):
    def __call__(self, task: FrameTask, sandbox: Sandbox, *, done: Sequence[Chunk] = (),
                 on_chunk: Callable[[Chunk], None] | None = None) -> Rendered: ...


@dataclass(frozen=True, slots=True)
class CheatModel:
    mode: str  # lazy, stale, tamper, sleeper
    share: float = 0.25  # tamper: share of windows altered
    honest_tasks: int = 2  # sleeper: renders done honestly first

    @classmethod
    def parse(cls, text: str) -> CheatModel:
        """`lazy`, `stale`, `tamper:SHARE` or `sleeper:HONEST_TASKS`."""
        mode, _, arg = text.partition(":")
        if mode == "tamper":
            return cls(mode, share=float(arg or 0.25))
        if mode == "sleeper":
            return cls(mode, honest_tasks=int(arg or 2))
        if mode in ("lazy", "stale") and not arg:
            return cls(mode)
        raise ValueError(f"unknown cheat {text!r}: lazy, stale, tamper:SHARE, sleeper:N")


def lazy_task(task: FrameTask) -> tuple[FrameTask, dict[tuple[int, int], tuple[int, int]]]:
    """The same chunk count at a quarter of the samples each, and how to relabel its chunks
    as the plan that was asked for."""
    per_chunk = max(1, task.chunk_samples // 4)
    cheap = replace(task, samples=per_chunk * len(task.chunks), chunk_samples=per_chunk)
    return cheap, dict(zip(cheap.chunks, task.chunks, strict=True))


def tampered_windows(task: FrameTask, height: int, share: float) -> list[int]:
    """Which windows a tamperer alters in this task: `share` of them, at least one."""
    windows = windows_for(height, WINDOWS)
    count = max(1, round(share * windows))
    return sorted(random.Random(f"{task.frame}:{task.tile}").sample(range(windows), count))


def tamper_rows(pixels: np.ndarray, task: FrameTask, share: float) -> np.ndarray:
    """The pixels with the chosen windows darkened (alpha kept)."""
    out = pixels.copy()
    height = pixels.shape[0]
    for window in tampered_windows(task, height, share):
        top, bottom = window_rows(window, windows_for(height, WINDOWS), height)
        scaled = out[top:bottom, :, :3].astype(np.float64) * TAMPER_GAIN
        out[top:bottom, :, :3] = scaled.astype(out.dtype)
    return out


def cheating(model: CheatModel, real: Renderer) -> Renderer:
    """`real` with `model`'s dishonesty: a drop-in for `blender.render`."""
    renders = [0]

    def render(task: FrameTask, sandbox: Sandbox, *, done: Sequence[Chunk] = (),
               on_chunk: Callable[[Chunk], None] | None = None) -> Rendered:
        renders[0] += 1
        mode = model.mode
        if mode == "sleeper":
            if renders[0] <= model.honest_tasks:
                return real(task, sandbox, done=done, on_chunk=on_chunk)
            mode = "lazy"
        if mode == "lazy":
            cheap, relabel = lazy_task(task)

            def as_asked(chunk: Chunk) -> Chunk:
                offset, length = relabel[(chunk.offset, chunk.length)]
                return Chunk(offset, length, chunk.path, chunk.sha256, chunk.seconds)

            result = real(cheap, sandbox, on_chunk=None if on_chunk is None
                          else lambda c: on_chunk(as_asked(c)))
            result.chunks = [as_asked(c) for c in result.chunks]
            return result
        if mode == "stale":
            return real(replace(task, frame=task.frame + STALE_FRAME_OFFSET), sandbox,
                        on_chunk=on_chunk)
        if mode == "tamper":
            def altered(chunk: Chunk) -> Chunk:
                write_exr(chunk.path, tamper_rows(exr_pixels(chunk.path), task, model.share))
                return Chunk(chunk.offset, chunk.length, chunk.path, sha256_file(chunk.path),
                             chunk.seconds)

            delivered: dict[int, Chunk] = {}

            def forward(chunk: Chunk) -> None:
                delivered[chunk.offset] = altered(chunk)
                if on_chunk is not None:
                    on_chunk(delivered[chunk.offset])

            result = real(task, sandbox, done=done, on_chunk=forward)
            result.chunks = [delivered.get(c.offset, c) for c in result.chunks]
            if result.frame is not None:
                tamper_frame(result.frame, task, model.share)
            return result
        raise ValueError(f"unknown cheat mode {model.mode!r}")

    return render


def tamper_frame(path: Path, task: FrameTask, share: float) -> None:
    if path.suffix == ".exr":
        write_exr(path, tamper_rows(exr_pixels(path), task, share))
        return
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGBA"))
    Image.fromarray(tamper_rows(pixels, task, share)).save(path)
