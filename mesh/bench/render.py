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
from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import pairwise
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
from orchestrator.db import history
from orchestrator.db.session import make_engine, make_session_factory
from orchestrator.domain.checkpointing import plan_chunks

CHUNK_LINE = re.compile(r"chunk (\d+)\+(\d+) rendered in ([0-9.]+) s")
TASK_CHUNK_LINE = re.compile(
    r"lease \d+: task (\d+) |task (\d+): chunk \d+\+\d+ rendered in ([0-9.]+) s")
STAGES = ("placement", "pull_to_start", "start_and_checkpoints", "delivery", "between_tasks",
          "rechecks", "verification")
"""Where a task's time goes, from the service's records (`history.job_times`) and the chunk
render times the agents log:
- placement: the task ready (new, or back in the queue) -> its lease reserved (placement,
  the wait for a faster node);
- pull_to_start: reserved -> started (the lease reaching the agent, its start report);
- start_and_checkpoints: started -> last checkpoint, less the chunks' renders (the scene
  fetch, the worker and scene start, the checkpoint uploads and records the render did not
  hide: the worker renders the next chunk while the agent uploads the last one);
- delivery: last checkpoint -> done (the frame merged, the result uploaded and completed);
- between_tasks: a node's task done -> its next lease reserved, less the re-checks it ran
  meanwhile (poll sleeps, pulls that found nothing);
- rechecks: re-checks of the job's results, leased -> decided (a node's time they take);
- verification: done -> verified (the wait for the re-checks; a task not drawn is verified
  when its job is)."""


def stage_times(times: history.JobTimes,
                chunk_s: Mapping[tuple[str, int], Sequence[float]]) -> dict[str, Any]:
    """Seconds per stage (`STAGES`) summed over the job's tasks, from the service's record of
    one finished job and the chunk render seconds of each task's last lease on each node (by
    node and task id, `chunk_seconds`);
    with the render time itself and the job's own waits (submitted -> first lease, last task
    done -> settlement queued)."""
    moves: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    for move in times.moves:
        moves[(move.entity, move.entity_id)].append((move.to_status, move.at))
    checkpoints: dict[int, list[float]] = defaultdict(list)
    for point in times.checkpoints:
        if not point.is_result:
            checkpoints[point.task_id].append(point.created_at)
    totals = dict.fromkeys(STAGES, 0.0)
    done_at: dict[int, float] = {}
    rendered: list[tuple[str, int]] = []  # (node, task) of each completing lease
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)  # node -> (reserved, done)
    for task in times.tasks:
        lease = next((lease for lease in reversed(times.leases)
                      if lease.task_id == task.id and lease.release_reason == "completed"), None)
        if lease is None:
            continue
        history_of = moves[("task", str(task.id))]
        ready = max([at for status, at in history_of if status == "retry" and
                     at <= lease.created_at], default=task.created_at)
        started = min(at for status, at in history_of
                      if status == "running" and at >= lease.created_at)
        done = max(at for status, at in history_of if status == "done")
        points = sorted(at for at in checkpoints[task.id] if started <= at <= done)
        renders = list(chunk_s.get((lease.node_id, task.id), ()))
        totals["placement"] += lease.created_at - ready
        totals["pull_to_start"] += started - lease.created_at
        if points and renders:
            totals["start_and_checkpoints"] += points[-1] - started - sum(renders)
            totals["delivery"] += done - points[-1]
        verified = [at for status, at in history_of if status == "verified"]
        if verified:
            totals["verification"] += verified[-1] - done
        done_at[task.id] = done
        rendered.append((lease.node_id, task.id))
        runs[lease.node_id].append((lease.created_at, done))
    checks: dict[str, list[tuple[float, float]]] = defaultdict(list)  # node -> (leased, done)
    for check in times.checks:
        leased = [at for status, at in moves[("check", str(check.id))] if status == "leased"]
        if check.checker_node is not None and leased and check.done_at is not None:
            checks[check.checker_node].append((leased[-1], check.done_at))
            totals["rechecks"] += check.done_at - leased[-1]
    for node, spans in runs.items():
        spans.sort()
        for (_, free), (next_lease, _) in pairwise(spans):
            busy = sum(min(end, next_lease) - max(begin, free) for begin, end in checks[node]
                       if begin < next_lease and end > free)
            totals["between_tasks"] += next_lease - free - busy
    job_moves = moves[("job", times.tasks[0].job_id)] if times.tasks else []
    submitted = min((at for _, at in job_moves), default=None)
    first_lease = min((lease.created_at for lease in times.leases), default=None)
    settling = [at for status, at in job_moves if status == "settling"]
    last_done = max(done_at.values(), default=None)
    return {
        "tasks": len(done_at),
        "render_s": round(sum(sum(chunk_s.get((node, task), ())) for node, task in rendered),
                          3),
        "stages_s": {name: round(value, 3) for name, value in totals.items()},
        "submitted_to_first_lease_s": None if submitted is None or first_lease is None
        else round(first_lease - submitted, 3),
        "last_done_to_settlement_s": None if not settling or last_done is None
        else round(settling[-1] - last_done, 3),
    }


def chunk_seconds(logs: Mapping[str, str]) -> dict[tuple[str, int], list[float]]:
    """The chunk render seconds of each task's last lease on each node, from the agents' logs
    (by node id): a lease lost and taken again starts the count over."""
    found: dict[tuple[str, int], list[float]] = {}
    for node, log in logs.items():
        for match in TASK_CHUNK_LINE.finditer(log):
            leased, task, seconds = match.groups()
            if leased is not None:
                found[(node, int(leased))] = []
            else:
                found.setdefault((node, int(task)), []).append(float(seconds))
    return found


SETTLED = {"settling", "settled"}  # verified, its settlement queued or confirmed


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
            wait_for("the job's settlement", lambda: grid.job(job)["status"] in SETTLED,
                     timeout_s=600)
            logs = {w.name: w.log() for w in workers}
            chunk_times = [float(m.group(3)) for log in logs.values()
                           for m in CHUNK_LINE.finditer(log)]
            ready = [float(x) for log in logs.values()
                     for x in re.findall(r"scene ready in ([0-9.]+) s", log)]
            for worker in workers:
                worker.terminate()
            engine = make_engine(grid.database_url)
            try:
                with make_session_factory(engine)() as session:
                    stages = stage_times(history.job_times(session, job_id=job),
                                         chunk_seconds(logs))
            finally:
                engine.dispose()

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
        **stages,
    }
