"""`mesh bench verify`: how well each sampling policy catches each cheater, what it costs, and
whether it ever rejects an honest node, over real renders of the sample scene.

A pool is rendered once with bpy (Cycles on CPU, the agent's worker): every frame honestly on
the AVX2 kernel and on the SSE4.2 kernel, lazily (a quarter of the samples), stale (another
frame), and every window of every frame as a checker renders it (a border render). Each
(frame, window) of each node model is compared with the checker's render by the service's
rule (`domain.pixel_comparison.compare`: exact for the same kernel, the cross-kernel tolerance
otherwise), so which windows a check would flag is a measured fact. Many epochs of sampling
decisions are then simulated over that pool per policy: draws as the service makes them (each
window independently, at the policy's rate for the provider's record), costs as the renders
measured them. Overhead = checker render seconds / useful render seconds."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from agent.workloads import blender_worker
from agent.workloads.blender import FrameTask
from mesh.bench import cheaters
from orchestrator.domain.checkpointing import plan_chunks
from orchestrator.domain.pixel_comparison import CROSS_KERNEL, EXACT, Tolerance, compare
from orchestrator.domain.verification import (
    ProviderRecord,
    SamplingPolicy,
    window_rows,
    windows_for,
)
from protocol.images import exr_pixels

POLICIES = ("fixed-2%", "fixed-5%", "fixed-10%", "adaptive-4%", "adaptive")
TAMPER_SHARE = 0.10
TRUSTED = ProviderRecord(consecutive_valid=10**6)


@dataclass
class Render:
    chunks: dict[tuple[int, int], np.ndarray]
    frame: np.ndarray  # 8-bit RGBA
    seconds: float  # render seconds of its chunks


def _worker(scene: Path, out: Path, frames: list[int], *, samples: int, chunk_samples: int,
            resolution: tuple[int, int], tile: int = 0, tiles: int = 1,
            sse42: bool = False) -> dict[int, Render]:
    """Frames rendered in one bpy process with the agent's worker; pixels and chunk seconds."""
    out.mkdir(parents=True)
    spec = {"blend": str(scene), "frames": frames, "tile": tile, "tiles": tiles,
            "samples": samples, "threads": 1, "resolution": list(resolution), "format": "png",
            "out": str(out), "done": [],
            "todo": [list(c) for c in plan_chunks(samples, chunk_samples)]}
    (out / "spec.json").write_text(json.dumps(spec))
    env = {"BLENDER_USER_RESOURCES": str(out / "blender"), "PATH": "/usr/bin:/bin"}
    if sse42:
        env["CYCLES_CPU_NO_AVX2"] = "1"
    done = subprocess.run([sys.executable, blender_worker.__file__, str(out / "spec.json")],
                          capture_output=True, text=True, timeout=3600, env=env, check=True)
    renders: dict[int, Render] = {}
    for line in done.stdout.splitlines():
        if not line.startswith(blender_worker.MARK):
            continue
        event = json.loads(line[len(blender_worker.MARK):])
        frame = int(event.get("frame", 0))
        if event["event"] == "chunk":
            render = renders.setdefault(frame, Render({}, np.zeros(0), 0.0))
            render.chunks[(int(event["offset"]), int(event["length"]))] = exr_pixels(
                Path(event["path"]))
            render.seconds += float(event["seconds"])
        elif event["event"] == "frame":
            renders[frame].frame = np.asarray(Image.open(event["path"]).convert("RGBA"))
    return renders


def _window_mismatch(node: Render, checker: Render, rows: tuple[int, int],
                     tolerance: Tolerance) -> tuple[bool, float, float]:
    """(flagged, max abs, share over) of one window: any chunk or the frame differing."""
    top, bottom = rows
    worst, share, flagged = 0.0, 0.0, False
    pairs = [(node.frame[top:bottom], checker.frame)]
    pairs += [(node.chunks[key][top:bottom], checker.chunks[key]) for key in checker.chunks]
    for claimed, checked in pairs:
        result = compare(claimed, checked, tolerance)
        flagged |= not result.match
        worst, share = max(worst, result.max_abs), max(share, result.share_over)
    return flagged, worst, share


def _relabelled(lazy: Render, plan: list[tuple[int, int]]) -> Render:
    return Render(dict(zip(plan, [lazy.chunks[k] for k in sorted(lazy.chunks)], strict=True)),
                  lazy.frame, lazy.seconds)


def _tampered(honest: Render, rows: tuple[int, int]) -> Render:
    top, bottom = rows

    def darken(pixels: np.ndarray) -> np.ndarray:
        out = pixels.copy()
        out[top:bottom, :, :3] = (out[top:bottom, :, :3].astype(np.float64)
                                  * cheaters.TAMPER_GAIN).astype(out.dtype)
        return out

    return Render({k: darken(v) for k, v in honest.chunks.items()}, darken(honest.frame),
                  honest.seconds)


@dataclass(frozen=True)
class Pool:
    frames: list[int]
    windows: int
    task_s: dict[int, float]  # useful render seconds per frame
    window_s: dict[tuple[int, int], float]  # checker render seconds per (frame, window)
    flagged: dict[str, dict[tuple[int, int], bool]]  # node model -> (frame, window) -> flagged
    cross_kernel: dict[str, float]  # measured SSE4.2 against AVX2, worst over the pool


def render_pool(root: Path, *, frames: int, samples: int, chunk_samples: int,
                resolution: tuple[int, int], windows: int) -> Pool:
    scene = root / "scene.blend"
    subprocess.run([sys.executable, "-m", "mesh.sample_scene", str(scene)],
                   check=True, capture_output=True, timeout=300)
    numbers = list(range(1, frames + 1))
    common = {"samples": samples, "chunk_samples": chunk_samples, "resolution": resolution}
    honest = _worker(scene, root / "honest", numbers, **common)  # type: ignore[arg-type]
    sse = _worker(scene, root / "sse42", numbers, sse42=True, **common)  # type: ignore[arg-type]
    task = FrameTask(blend=scene, frame=1, samples=samples, chunk_samples=chunk_samples)
    cheap, _ = cheaters.lazy_task(task)
    lazy = _worker(scene, root / "lazy", numbers, samples=cheap.samples,
                   chunk_samples=cheap.chunk_samples, resolution=resolution)
    stale = _worker(scene, root / "stale", [f + cheaters.STALE_FRAME_OFFSET for f in numbers],
                    **common)  # type: ignore[arg-type]
    height = resolution[1]
    count = windows_for(height, windows)
    checks = {w: _worker(scene, root / f"window-{w}", numbers, tile=w, tiles=count,
                         **common)  # type: ignore[arg-type]
              for w in range(count)}
    plan = task.chunks
    flagged: dict[str, dict[tuple[int, int], bool]] = {
        m: {} for m in ("honest", "honest_sse42", "lazy", "lazy_vs_tolerance", "stale",
                        "tamper")}
    worst, share = 0.0, 0.0
    for frame in numbers:
        for w in range(count):
            rows = window_rows(w, count, height)
            checker = checks[w][frame]
            key = (frame, w)
            flagged["honest"][key] = _window_mismatch(honest[frame], checker, rows, EXACT)[0]
            hit, diff, over = _window_mismatch(sse[frame], checker, rows, CROSS_KERNEL)
            flagged["honest_sse42"][key] = hit
            worst, share = max(worst, diff), max(share, over)
            cheat = _relabelled(lazy[frame], plan)
            flagged["lazy"][key] = _window_mismatch(cheat, checker, rows, EXACT)[0]
            flagged["lazy_vs_tolerance"][key] = _window_mismatch(cheat, checker, rows,
                                                                 CROSS_KERNEL)[0]
            flagged["stale"][key] = _window_mismatch(
                stale[frame + cheaters.STALE_FRAME_OFFSET], checker, rows, EXACT)[0]
            flagged["tamper"][key] = _window_mismatch(_tampered(honest[frame], rows), checker,
                                                      rows, EXACT)[0]
    sse_bits = max(float(np.abs(sse[f].chunks[k] - honest[f].chunks[k]).max())
                   for f in numbers for k in honest[f].chunks)
    over_016 = max(float((np.abs(sse[f].chunks[k] - honest[f].chunks[k])[..., :3].max(-1)
                          > 0.016).mean()) for f in numbers for k in honest[f].chunks)
    return Pool(numbers, count, {f: honest[f].seconds for f in numbers},
                {(f, w): checks[w][f].seconds for f in numbers for w in range(count)},
                flagged, {"max_abs_linear": sse_bits, "share_over_0.016": over_016,
                          "worst_window_share_over_tolerance": share,
                          "worst_window_max_abs": worst})


Behaviour = Callable[[int, int, np.random.Generator], str | None]
"""(task number in the epoch, window, rng) -> the node model whose pixels it delivers there
(a key of `Pool.flagged`), None for honest."""


def _behaviours() -> dict[str, tuple[Behaviour, ProviderRecord]]:
    def lazy(task: int, window: int, rng: np.random.Generator) -> str | None:
        return "lazy"

    def stale(task: int, window: int, rng: np.random.Generator) -> str | None:
        return "stale"

    def tamper(task: int, window: int, rng: np.random.Generator) -> str | None:
        return "tamper" if rng.random() < TAMPER_SHARE else None

    def sleeper(task: int, window: int, rng: np.random.Generator) -> str | None:
        return "lazy" if task >= 20 else None

    # cheaters start trusted (the worst case), the sleeper earns its trust
    return {"lazy": (lazy, TRUSTED), "stale": (stale, TRUSTED),
            "tamper_10pct": (tamper, TRUSTED), "sleeper": (sleeper, ProviderRecord())}


def simulate(pool: Pool, policy: SamplingPolicy, behaviour: Behaviour | None,
             start: ProviderRecord, *, tasks: int, trials: int, seed: int,
             honest_model: str = "honest") -> tuple[float, float, float]:
    """(share of epochs in which a cheat was caught, overhead, share of honest epochs with a
    rejection) over `trials` epochs of `tasks` tasks."""
    rng = np.random.default_rng(seed)
    caught = rejected = 0
    extra = useful = 0.0
    epoch_windows = tasks * pool.windows
    for _ in range(trials):
        record, hit = start, False
        for number in range(tasks):
            frame = pool.frames[int(rng.integers(len(pool.frames)))]
            useful += pool.task_s[frame]
            rate = policy.window_rate(record, epoch_windows=epoch_windows)
            models = [None if behaviour is None else behaviour(number, w, rng)
                      for w in range(pool.windows)]
            for window in np.flatnonzero(rng.random(pool.windows) < rate):
                extra += pool.window_s[(frame, int(window))]
                model = models[window] or honest_model
                if pool.flagged[model][(frame, int(window))]:
                    hit = True
                    record = record.after(False)
                else:
                    record = record.after(True)
            if hit and behaviour is not None:
                break
        if hit:
            caught += behaviour is not None
            rejected += behaviour is None
    return caught / trials, extra / useful if useful else 0.0, rejected / trials


def run(*, frames: int = 6, samples: int = 32, chunk_samples: int = 16,
        resolution: tuple[int, int] = (128, 96), windows: int = 8, tasks: int = 300,
        trials: int = 2000, policies: tuple[str, ...] = POLICIES) -> dict[str, Any]:
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mesh-bench-verify-") as tmp:
        pool = render_pool(Path(tmp), frames=frames, samples=samples,
                           chunk_samples=chunk_samples, resolution=resolution, windows=windows)
    render_s = time.perf_counter() - began
    results: dict[str, Any] = {}
    for index, name in enumerate(policies):
        policy = SamplingPolicy.parse(name)
        by_cheater = {}
        for cheat, (behaviour, start) in _behaviours().items():
            detected, _, _ = simulate(pool, policy, behaviour, start, tasks=tasks,
                                      trials=trials, seed=index)
            by_cheater[cheat] = round(detected, 4)
        _, overhead, false_avx = simulate(pool, policy, None, TRUSTED, tasks=tasks,
                                          trials=trials, seed=index)
        _, overhead_new, false_sse = simulate(pool, policy, None, ProviderRecord(),
                                              tasks=tasks, trials=trials, seed=index,
                                              honest_model="honest_sse42")
        results[name] = {"detection_rate": by_cheater["tamper_10pct"],
                         "overhead": round(overhead, 4),
                         "overhead_new_provider": round(overhead_new, 4),
                         "false_rejection_rate": max(false_avx, false_sse),
                         "detection_by_cheater": by_cheater}
    flagged_share = {model: round(float(np.mean(list(cells.values()))), 4)
                     for model, cells in pool.flagged.items()}
    window_s = float(np.mean(list(pool.window_s.values())))
    task_s = float(np.mean(list(pool.task_s.values())))
    return {"policies": results,
            "pool": {"frames": frames, "samples": samples, "chunk_samples": chunk_samples,
                     "resolution": list(resolution), "windows": pool.windows,
                     "task_render_s": round(task_s, 4), "window_render_s": round(window_s, 4),
                     "window_cost_share": round(window_s / task_s, 4),
                     "windows_flagged": flagged_share,
                     "cross_kernel": {k: round(v, 8) for k, v in pool.cross_kernel.items()},
                     "render_s": round(render_s, 1)},
            "epoch": {"tasks": tasks, "trials": trials, "tamper_share": TAMPER_SHARE,
                      "sleeper_honest_tasks": 20}}

