"""Re-render a disputed tile from its recipe (the evidence bundle's) and compare the pixels
with the stored result, as an arbiter does before ruling (`mesh arbiter reproduce`).

The render is the agent's own (`blender.render` in the sandbox, Cycles on CPU), so it is the
same code path that produced the result; the comparison is verification's (`compare` under
`tolerance_for` the recorded and the local Blender build and kernel)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.sandbox import Limits, Outcome, Sandbox
from agent.workloads.blender import WORKER, FrameTask, render
from orchestrator.domain.pixel_comparison import (
    CROSS_KERNEL,
    RenderEnv,
    compare,
    tolerance_for,
)
from protocol.images import image_pixels

LIMITS = Limits(memory_bytes=4 << 30, wall_s=3600)  # a re-render's sandbox, its pack's size


class ReproduceError(RuntimeError):
    """The recipe cannot be re-rendered here (not a render, or the render failed)."""


@dataclass(frozen=True, slots=True)
class Reproduction:
    match: bool
    max_abs: float
    share_over: float
    detail: str
    tolerance: str  # "exact", "cross-kernel", or "cross-build" (other Blender: indicative only)
    recorded_env: dict[str, str] | None
    local_env: dict[str, str]
    render_s: float

    def as_json(self) -> dict[str, Any]:
        return {"match": self.match, "max_abs": self.max_abs, "share_over": self.share_over,
                "detail": self.detail, "tolerance": self.tolerance,
                "recorded_env": self.recorded_env, "local_env": self.local_env,
                "render_s": round(self.render_s, 3)}


def task_of(recipe: dict[str, Any], scene: Path, threads: int,
            assets: Mapping[str, Path] | None = None) -> FrameTask:
    """The FrameTask a bundle's recipe describes, on the local copy of its scene and of its
    pack (`assets`: each pack path the recipe names -> its hash-checked local file)."""
    resolution = recipe.get("resolution")
    payload = {"frame": recipe["frame"], "tile": recipe["tile"], "tiles": recipe["tiles"],
               "samples": recipe.get("samples"), "chunk_samples": recipe.get("chunk_samples"),
               "format": recipe.get("format", "png"),
               "resolution": None if resolution is None else list(resolution)}
    named, given = dict(recipe.get("assets") or {}), dict(assets or {})
    if set(named) != set(given):
        raise ReproduceError(f"the recipe's pack names {len(named)} files, "
                             f"{len(given)} are given")
    return FrameTask.from_payload(payload, scene, threads, given)


def reproduce(recipe: dict[str, Any], *, scene: Path, result: Path, workdir: Path,
              threads: int = 2, limits: Limits | None = None,
              assets: Mapping[str, Path] | None = None) -> Reproduction:
    """Render the recipe's tile in a fresh sandbox under `workdir`, its pack (`assets`, see
    `task_of`) laid out beside the scene as the agent lays it out (`Sandbox.give`), and
    compare it with `result` (the stored file the provider delivered)."""
    task = task_of(recipe, scene, threads, assets)
    started = time.perf_counter()
    with Sandbox(limits=limits or LIMITS,
                 read_only=[scene, WORKER.parent], parent_dir=workdir) as box:
        rendered = render(task, box)
        if rendered.run.outcome is not Outcome.OK or rendered.frame is None:
            raise ReproduceError(f"the render failed: {rendered.run.outcome.value} "
                                 f"({rendered.run.detail or rendered.run.stderr_tail[-200:]})")
        mine = image_pixels(rendered.frame)
    seconds = time.perf_counter() - started
    claimed = image_pixels(result)
    local = RenderEnv.from_json(rendered.env)
    recorded = RenderEnv.from_json({"blender": recipe.get("blender"),
                                    "kernel": recipe.get("kernel")}
                                   if recipe.get("blender") else None)
    tolerance = None if local is None or recorded is None else tolerance_for(recorded, local)
    if tolerance is None:
        name, tolerance = "cross-build", CROSS_KERNEL
    else:
        name = "exact" if tolerance.exact else "cross-kernel"
    found = compare(claimed, mine, tolerance)
    return Reproduction(found.match, found.max_abs, found.share_over, found.detail, name,
                        None if recorded is None else recorded.as_json(), dict(rendered.env),
                        seconds)
