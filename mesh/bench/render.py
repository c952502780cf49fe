"""`mesh bench render`: the same frames of the sample scene rendered (a) directly with bpy in
one process and (b) through the grid (anvil, the orchestrator process, two `mesh agent run`
processes) at the same total thread count, then a kill mid-frame to measure the rework."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from agent.workloads import blender_worker
from mesh.localgrid import Grid, wait_for
from orchestrator.chain.anvil import Anvil, dev_account
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import connect
from orchestrator.domain.checkpointing import plan_chunks

CHUNK_LINE = re.compile(r"chunk (\d+)\+(\d+) rendered in ([0-9.]+) s")


def sample_scene(root: Path) -> Path:
    path = root / "scene.blend"
    subprocess.run([sys.executable, "-m", "mesh.sample_scene", str(path)],
                   check=True, capture_output=True, timeout=300)
    return path


def _direct(scene: Path, out: Path, frames: list[int], *, samples: int, chunk_samples: int,
            resolution: tuple[int, int], threads: int) -> float:
    """Every frame in one bpy process, with the grid's chunk plan and merge."""
    out.mkdir()
    spec = {"blend": str(scene), "frames": frames, "tile": 0, "tiles": 1, "samples": samples,
            "threads": threads, "resolution": list(resolution), "format": "png",
            "out": str(out), "done": [], "todo": [list(c) for c in plan_chunks(samples,
                                                                              chunk_samples)]}
    spec_path = out / "spec.json"
    spec_path.write_text(json.dumps(spec))
    began = time.perf_counter()
    subprocess.run([sys.executable, blender_worker.__file__, str(spec_path)], check=True,
                   capture_output=True, timeout=3600,
                   env={"BLENDER_USER_RESOURCES": str(out / "blender"), "PATH": "/usr/bin:/bin"})
    return time.perf_counter() - began


def run(*, frames: int = 8, samples: int = 256, chunk_samples: int = 64,
        resolution: tuple[int, int] = (160, 120), agents: int = 2) -> dict[str, Any]:
    numbers = list(range(1, frames + 1))
    render = {"samples": samples, "chunk_samples": chunk_samples,
              "resolution": list(resolution)}
    chunks = len(plan_chunks(samples, chunk_samples))
    with tempfile.TemporaryDirectory(prefix="mesh-bench-render-") as tmp, Anvil() as anvil:
        root = Path(tmp)
        scene = sample_scene(root)
        direct_s = _direct(scene, root / "direct", numbers, samples=samples,
                           chunk_samples=chunk_samples, resolution=resolution, threads=agents)

        w3 = connect(anvil.rpc_url)
        deployment = deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                                  slasher=dev_account(2).address, arbiter=dev_account(3).address)
        chain = MeshChain(w3, deployment)
        chain.account(dev_account(0)).mint(dev_account(4).address, 10**24)
        grid = Grid(chain, root / "grid", rpc_url=anvil.rpc_url).start()
        try:
            workers = [grid.agent(f"bench-{i}").start() for i in range(agents)]
            grid.wait_logged_in(workers)
            began = time.perf_counter()
            job = grid.submit(scene, frames={"start": 1, "end": frames}, **render)
            wait_for("the grid's frames", lambda: grid.done(job), timeout_s=3600)
            grid_s = time.perf_counter() - began
            identical = True
            assert grid.customer is not None
            for result in grid.results(job)["results"]:
                data = grid.customer.send("GET", f"/v1/jobs/{job}/results/{result['sha256']}")
                grid_path = root / result["name"]
                grid_path.write_bytes(data.content)
                direct_pixels = np.asarray(Image.open(root / "direct" / result["name"]))
                identical &= bool(np.array_equal(np.asarray(Image.open(grid_path)),
                                                 direct_pixels))
            chunk_times = [float(m.group(3)) for w in workers
                           for m in CHUNK_LINE.finditer(w.log())]
            ready = [float(x) for w in workers
                     for x in re.findall(r"scene ready in ([0-9.]+) s", w.log())]
            for worker in workers:
                worker.terminate()

            # second pass: kill a node mid-frame, let another resume from its checkpoint
            job = grid.submit(scene, frames={"start": 1, "end": 1}, **render)
            doomed = grid.agent("doomed").start()
            wait_for("two checkpoints", lambda: f"checkpoint 2/{chunks}" in doomed.log(),
                     timeout_s=3600)
            doomed.kill()
            rescuer = grid.agent("rescuer", threads=agents).start()
            wait_for("the resumed frame", lambda: grid.done(job), timeout_s=3600)
            redone = [(int(m.group(1)), float(m.group(3)))
                      for m in CHUNK_LINE.finditer(rescuer.log())]
            resumed_with = re.search(r"resumes with (\d+) of", rescuer.log())
            kept = int(resumed_with.group(1)) if resumed_with else 0
            in_flight = kept * chunk_samples  # the chunk the doomed node was rendering
            rework_s = sum(seconds for offset, seconds in redone if offset == in_flight)
        finally:
            grid.close()
    return {
        "frames": frames, "samples": samples, "chunk_samples": chunk_samples,
        "resolution": list(resolution), "threads_total": agents,
        "direct_s": round(direct_s, 3), "grid_s": round(grid_s, 3),
        "grid_overhead": round(grid_s / direct_s - 1, 4),
        "pixels_identical": identical,
        "chunk_s": round(statistics.mean(chunk_times), 4) if chunk_times else None,
        "scene_ready_s": round(statistics.mean(ready), 3) if ready else None,
        "max_rework_s_after_kill": round(rework_s, 4),
        "chunks": chunks,
        "chunks_resumed_from_checkpoint": kept,
        "chunks_redone_after_kill": len(redone),
    }
