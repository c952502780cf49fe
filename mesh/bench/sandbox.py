"""`mesh bench sandbox`: the sandbox's render overhead. The same bpy render of the sample
scene (the agent's Blender worker, spec on stdin, CPU) run directly and inside the agent's
sandbox (`agent.sandbox`: bubblewrap where installed), in alternating pairs so that load on
the machine hits both sides alike; `sandbox_overhead` is the median of the pairs' ratios
(sandboxed / direct seconds, 1.03 = 3 % slower). `sandbox_cpu_overhead` is the same for the
render process's own CPU time (every thread; the worker reports it with each frame), which
other work on the machine barely moves: on a loaded machine the wall clock's noise hides a
few per cent, the CPU time's does not."""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from agent.sandbox import Limits, Outcome, Sandbox, isolation, task_python
from agent.workloads.blender import WORKER
from agent.workloads.blender_worker import MARK
from mesh.bench.render import sample_scene
from orchestrator.domain.checkpointing import plan_chunks


def _spec(scene: Path, out: Path, *, frames: int, samples: int,
          resolution: tuple[int, int], threads: int) -> str:
    return json.dumps({"blend": str(scene), "frames": list(range(1, frames + 1)), "tile": 0,
                       "tiles": 1, "samples": samples, "threads": threads,
                       "resolution": list(resolution), "format": "png", "out": str(out),
                       "done": [], "todo": [list(c) for c in plan_chunks(samples, samples)]})


class Timing(NamedTuple):
    wall_s: float
    cpu_s: float  # the render process's own, every thread


def _direct(scene: Path, root: Path, **render: Any) -> Timing:
    """The render run as a plain child process."""
    out = Path(tempfile.mkdtemp(dir=root))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(out), "LANG": "C.UTF-8",
           "BLENDER_USER_RESOURCES": str(out / "blender")}
    began = time.perf_counter()
    done = subprocess.run([task_python(), str(WORKER), "-"], input=_spec(scene, out, **render),
                          text=True, check=True, capture_output=True, env=env, cwd=out,
                          timeout=3600)
    return Timing(time.perf_counter() - began, _render_cpu_s(done.stdout.splitlines()))


def _sandboxed(scene: Path, root: Path, **render: Any) -> Timing:
    """The render run in the agent's sandbox."""
    lines: list[str] = []
    with Sandbox(limits=Limits(), read_only=[WORKER.parent, scene.parent],
                 parent_dir=root) as sandbox:
        began = time.perf_counter()
        run = sandbox.run([task_python(), str(WORKER), "-"], on_line=lines.append,
                          stdin=_spec(scene, sandbox.out, **render))
        seconds = time.perf_counter() - began
        if run.outcome is not Outcome.OK:
            raise RuntimeError(f"the sandboxed render failed: {run.reason}")
    return Timing(seconds, _render_cpu_s(lines))


def _render_cpu_s(stdout: list[str]) -> float:
    """The worker's CPU time at its last frame (bwrap does not hand its task's CPU time up to
    the agent: its init inside the namespace is never reaped by the outer process)."""
    frames = [json.loads(line[len(MARK):]) for line in stdout if line.startswith(MARK)]
    return float([event for event in frames if event["event"] == "frame"][-1]["cpu_s"])


def run(*, pairs: int = 5, frames: int = 2, samples: int = 64,
        resolution: tuple[int, int] = (160, 120), threads: int = 2) -> dict[str, Any]:
    render = {"frames": frames, "samples": samples, "resolution": resolution,
              "threads": threads}
    with tempfile.TemporaryDirectory(prefix="mesh-bench-sandbox-") as tmp:
        root = Path(tmp)
        (root / "scene").mkdir()  # its own dir: the sandbox binds it read-only
        scene = sample_scene(root / "scene")
        _direct(scene, root, **render)  # warm the page cache for both sides
        direct: list[Timing] = []
        sandboxed: list[Timing] = []
        for pair in range(pairs):
            order = (_direct, _sandboxed) if pair % 2 == 0 else (_sandboxed, _direct)
            for measure in order:
                (direct if measure is _direct else sandboxed).append(
                    measure(scene, root, **render))
    ratios = [s.wall_s / d.wall_s for s, d in zip(sandboxed, direct, strict=True)]
    cpu_ratios = [s.cpu_s / d.cpu_s for s, d in zip(sandboxed, direct, strict=True)]
    return {"isolation": isolation(), "pairs": pairs, "render": {**render,
            "resolution": list(resolution)},
            "direct_s": [round(d.wall_s, 3) for d in direct],
            "sandboxed_s": [round(s.wall_s, 3) for s in sandboxed],
            "direct_cpu_s": [round(d.cpu_s, 3) for d in direct],
            "sandboxed_cpu_s": [round(s.cpu_s, 3) for s in sandboxed],
            "pair_ratios": [round(r, 4) for r in ratios],
            "cpu_pair_ratios": [round(r, 4) for r in cpu_ratios],
            "sandbox_overhead": round(statistics.median(ratios), 4),
            "sandbox_cpu_overhead": round(statistics.median(cpu_ratios), 4),
            "target": 1.03}
