"""The node's work: each lease runs in its own sandbox, a Blender frame in a Blender worker
that is already past `import bpy` when the lease arrives.

A frame is rendered in sample chunks; every chunk is uploaded and recorded as the task's
checkpoint (a manifest naming the chunks by hash), so a frame resumed elsewhere redoes at most
one chunk. A chunk whose checkpoint cannot be sent (a network cut) is kept in the spool and the
render goes on. When the lease is gone the frame is abandoned; when the agent drains, the
frame stops after its next checkpoint and is handed back (`fail(drain)`). A command task runs
a subprocess whose declared outputs are packed into a reproducible tar. Re-checks of another
provider's result (`blender` windows, `command` results) run the same way. Results leave
through `agent.delivery`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from agent.config import AgentConfig
from agent.connection import Connection, sha256_bytes
from agent.delivery import Delivery
from agent.sandbox import Outcome, Sandbox, UnsafeOutput, task_python
from agent.spool import OfflineChunk, Spool
from agent.workloads import blender
from protocol.client import ApiCallError, sha256_file
from protocol.images import OutputInvalid, exr_pixels

log = logging.getLogger("mesh.agent")
MANIFEST_KIND = "mesh-blender-chunks/1"


class Worker:
    """Runs the leases and re-checks of the node of `config`: blobs through `connection`,
    deferred chunks into `spool`, results to `delivery`; once `draining` is set it warms no
    more Blender workers and stops a running frame at its next checkpoint."""

    def __init__(self, config: AgentConfig, connection: Connection, spool: Spool,
                 delivery: Delivery, draining: threading.Event) -> None:
        self.config = config
        self.connection = connection
        self.spool = spool
        self.delivery = delivery
        self.draining = draining
        (config.state_dir / "tmp").mkdir(exist_ok=True)
        self._running: Sandbox | None = None  # the sandbox of the frame being rendered
        self._spare: Sandbox | None = None  # a Blender worker already past `import bpy`

    def work(self, lease: dict[str, Any]) -> None:
        """Tell the orchestrator the lease's task started, then run it by its kind."""
        task_id = int(lease["task_id"])
        payload = lease["payload"]
        log.info("lease %s: task %s %s", lease["lease_id"], task_id,
                 json.dumps({k: payload.get(k) for k in ("kind", "frame", "tile", "shard")}))
        try:
            self.connection.call("start", "POST", f"/v1/tasks/{task_id}/progress",
                                 json={"progress": float(lease.get("resume_progress") or 0.0)})
        except ApiCallError as exc:
            if exc.status not in (404, 409):
                raise
            # cut off between the lease and its start: the lease lapsed meanwhile
            log.warning("task %s: the lease was gone before it started (%s); not run",
                        task_id, exc.code)
            return
        try:
            if payload["kind"] == "blender":
                self.render(lease)
            elif payload["kind"] == "command":
                self.command(lease)
            else:
                self.give_back(task_id, "error", f"unknown workload {payload['kind']!r}")
        except (OutputInvalid, ValueError) as exc:
            self.give_back(task_id, "error", f"output_invalid: {exc}")
        except ApiCallError as exc:
            log.warning("task %s: the orchestrator refused: %s", task_id, exc)

    def give_back(self, task_id: int, reason: str, message: str) -> None:
        log.warning("task %s handed back (%s): %s", task_id, reason, message)
        try:
            self.connection.call("give back", "POST", f"/v1/tasks/{task_id}/fail",
                                 json={"reason": reason, "message": message[:1000]})
        except ApiCallError as exc:
            log.warning("task %s: hand-back refused: %s", task_id, exc)

    def sandbox(self, read_only: list[Path]) -> Sandbox:
        return Sandbox(limits=self.config.limits, read_only=read_only,
                       parent_dir=self.config.state_dir / "tmp")

    def warm(self) -> None:
        """Have a fresh sandbox with a Blender worker importing bpy (about 0.45 s, more on a
        busy machine) ready for the next lease; each task still gets its own process."""
        if self._spare is None and not self.draining.is_set():
            box = self.sandbox([blender.WORKER.parent])
            blender.start_worker(box, cpu_kernel=self.config.cpu_kernel)
            self._spare = box

    def take_warm(self) -> Sandbox:
        """The warm worker for the task about to run; the next one starts importing bpy now,
        while this one renders, so the next lease does not wait for it."""
        self.warm()
        box, self._spare = self._spare, None
        assert box is not None
        self.warm()
        return box

    def render(self, lease: dict[str, Any]) -> None:
        task_id = int(lease["task_id"])
        payload = lease["payload"]
        session = self.connection.session
        blend = self.connection.fetch(str(payload["blend_sha256"]), ".blend")
        task = blender.FrameTask.from_payload(payload, blend, self.config.threads,
                                              self.fetch_pack(payload))
        done = self.resume_chunks(lease.get("resume_from_sha256"), task)
        plan = task.chunks
        manifest: list[dict[str, Any]] = [
            {"offset": c.offset, "length": c.length, "sha256": c.sha256} for c in done]
        if done:
            log.info("task %s: resumes with %d of %d chunks from checkpoint %s", task_id,
                     len(done), len(plan), str(lease["resume_from_sha256"])[:12])

        lost: list[str] = []

        def checkpoint(chunk: blender.Chunk) -> None:
            """Upload the chunk and a manifest of every chunk so far, then record it. One try:
            a network cut must not stop the render (the next checkpoint names every chunk)."""
            began = time.perf_counter()
            manifest.append({"offset": chunk.offset, "length": chunk.length,
                             "sha256": chunk.sha256})
            body = json.dumps({"kind": MANIFEST_KIND, "frame": task.frame, "tile": task.tile,
                               "samples": task.samples, "chunk_samples": task.chunk_samples,
                               "chunks": sorted(manifest, key=lambda c: c["offset"])},
                              sort_keys=True).encode()
            digest = sha256_bytes(body)
            progress = len(manifest) / len(plan)
            log.info("task %s: chunk %d+%d rendered in %.3f s", task_id, chunk.offset,
                     chunk.length, chunk.seconds)
            try:
                for name in {m["sha256"] for m in manifest} - uploaded:
                    path = next(c.path for c in (*done, *pending_chunks, chunk)
                                if c.sha256 == name)
                    session.request("PUT", f"/v1/blobs/{name}", content=path.read_bytes())
                    uploaded.add(name)
                session.request("PUT", f"/v1/blobs/{digest}", content=body)
                session.request("POST", f"/v1/tasks/{task_id}/checkpoints", json={
                    "sha256": digest, "progress": progress,
                    "cost_s": max(time.perf_counter() - began, 1e-6)})
                log.info("task %s: checkpoint %d/%d %s", task_id, len(manifest), len(plan),
                         digest[:12])
            except httpx.TransportError as exc:
                pending_chunks.append(chunk)
                self.spool.keep_offline(OfflineChunk(task_id, chunk.sha256, chunk.offset,
                                                     chunk.length, time.time()), chunk.path)
                log.warning("task %s: checkpoint %d/%d deferred (%s); rendering on", task_id,
                            len(manifest), len(plan), type(exc).__name__)
            except ApiCallError as exc:
                pending_chunks.append(chunk)
                if exc.status in (404, 409):  # the lease is gone: stop, deliver nothing
                    lost.append(exc.code)
                    if self._running is not None:
                        self._running.cancel()
                else:
                    log.warning("task %s: checkpoint deferred (%s)", task_id, exc)
            if self.draining.is_set() and self._running is not None:
                self._running.cancel()

        uploaded = {c.sha256 for c in done}
        pending_chunks: list[blender.Chunk] = []
        with self.take_warm() as box:
            self._running = box
            try:
                rendered = blender.render(task, box, done=done, on_chunk=checkpoint)
            finally:
                self._running = None
                self.warm()
            run = rendered.run
            if lost:
                log.warning("task %s: lease lost (%s); frame abandoned", task_id, lost[0])
                return
            if run.outcome is Outcome.CANCELLED and self.draining.is_set():
                self.give_back(task_id, "drain", f"drained after {len(manifest)} chunks")
                return
            if run.outcome is not Outcome.OK or rendered.frame is None:
                self.give_back(task_id, "error", run.reason)
                return
            log.info("task %s: frame rendered (%d chunks here, bpy import %.2f s before the "
                     "task, scene ready in %.2f s, %.2f s in the sandbox)", task_id,
                     len(rendered.rendered_chunks), rendered.import_s, rendered.ready_s,
                     run.seconds)
            render = None if not rendered.env else {
                **rendered.env, "chunks": [{"offset": c.offset, "length": c.length,
                                            "sha256": c.sha256} for c in rendered.chunks]}
            self.delivery.finish(lease, rendered.frame, render=render,
                                 parts=[(c.sha256, c.path) for c in rendered.chunks
                                        if c.sha256 not in uploaded])

    def run_check(self) -> bool:
        """Re-render a window of another provider's result when the orchestrator has one for
        this node (`blender` checks), send the chunk and frame files; False: none waits."""
        node, session = self.config.node_id, self.connection.session
        response = self.connection.retry("pull a check", lambda: session.request(
            "POST", f"/v1/nodes/{node}/checks/lease", ok=(200, 204)))
        if response.status_code == 204:
            return False
        check = response.json()
        check_id, payload = int(check["check_id"]), check["payload"]
        if payload.get("kind") == "command":
            self.command_check(check_id, payload)
            return True
        if payload.get("kind") != "blender":
            log.warning("check %s: cannot re-run %r work; it lapses", check_id,
                        payload.get("kind"))
            return False
        log.info("check %s (%s): frame %s window %s", check_id, check["role"],
                 payload.get("frame"), check["window"])
        try:
            blend = self.connection.fetch(str(payload["blend_sha256"]), ".blend")
            task = blender.FrameTask.from_payload(payload, blend, self.config.threads,
                                                  self.fetch_pack(payload))
            with self.take_warm() as box:
                try:
                    rendered = blender.render(task, box)
                finally:
                    self.warm()
                if rendered.run.outcome is not Outcome.OK or rendered.frame is None:
                    log.warning("check %s: render failed (%s); it lapses", check_id,
                                rendered.run.reason)
                    return True
                for chunk in rendered.chunks:
                    self.connection.upload(chunk.path, chunk.sha256)
                frame_sha = sha256_file(rendered.frame)
                self.connection.upload(rendered.frame, frame_sha)
            verdict = self.connection.call(
                "check result", "POST", f"/v1/checks/{check_id}/result", json={
                    "chunks": [{"offset": c.offset, "length": c.length, "sha256": c.sha256}
                               for c in rendered.chunks],
                    "frame_sha256": frame_sha, "render": rendered.env or None,
                    "render_s": sum(c.seconds for c in rendered.chunks)})
            log.info("check %s: %s", check_id, verdict["status"])
        except (ApiCallError, OutputInvalid, ValueError) as exc:
            log.warning("check %s: %s", check_id, exc)
        return True

    def command_check(self, check_id: int, payload: dict[str, Any]) -> None:
        """Re-run a command task and send its result's hash (the tar is reproducible)."""
        try:
            with self.run_command(payload) as (archive, problem):
                if archive is None:
                    log.warning("check %s: the command failed (%s); it lapses", check_id,
                                problem)
                    return
                sha = sha256_file(archive)
                self.connection.upload(archive, sha)
            verdict = self.connection.call("check result", "POST",
                                           f"/v1/checks/{check_id}/result",
                                           json={"result_sha256": sha})
            log.info("check %s: %s", check_id, verdict["status"])
        except ApiCallError as exc:
            log.warning("check %s: %s", check_id, exc)

    def fetch_pack(self, payload: dict[str, Any]) -> dict[str, Path]:
        """The scene's pack the payload names (`assets`), each file downloaded into the cache
        and hash-checked (`Connection.fetch`), at most `Limits.pack_bytes` together
        (`blender.fetch_pack`)."""
        return blender.fetch_pack(payload.get("assets") or {}, self.connection.fetch,
                                  self.config.limits.pack_bytes)

    def resume_chunks(self, manifest_sha: str | None, task: blender.FrameTask
                      ) -> list[blender.Chunk]:
        """The chunks a checkpoint names, downloaded and decoded; none when it does not fit
        this task (then the frame starts over, which is safe)."""
        if not manifest_sha:
            return []
        manifest = json.loads(self.connection.fetch(manifest_sha, ".json").read_text())
        if (manifest.get("kind") != MANIFEST_KIND or manifest.get("samples") != task.samples
                or manifest.get("chunk_samples") != task.chunk_samples):
            log.warning("checkpoint %s does not fit this task; starting over", manifest_sha)
            return []
        chunks = []
        for entry in manifest["chunks"]:
            path = self.connection.fetch(str(entry["sha256"]), ".exr")
            exr_pixels(path)  # decodes, or raises OutputInvalid
            chunks.append(blender.Chunk(int(entry["offset"]), int(entry["length"]), path,
                                        str(entry["sha256"]), 0.0))
        return chunks

    def command(self, lease: dict[str, Any]) -> None:
        """A generic subprocess: argv from the job, the input blob at $MESH_INPUT, its declared
        outputs under $MESH_OUT, packed into a reproducible tar as the result."""
        task_id = int(lease["task_id"])
        with self.run_command(lease["payload"]) as (archive, problem):
            if archive is None:
                self.give_back(task_id, "error", problem)
                return
            self.delivery.finish(lease, archive)

    @contextlib.contextmanager
    def run_command(self, payload: dict[str, Any]) -> Iterator[tuple[Path | None, str]]:
        """(the result tar, "") or (None, why it failed), inside the task's sandbox."""
        inputs = []
        env = {"MESH_SHARD": str(payload.get("shard", 0)),
               "MESH_SHARDS": str(payload.get("shards", 1)), "MESH_PYTHON": task_python()}
        if payload.get("input_sha256"):
            source = self.connection.fetch(str(payload["input_sha256"]))
            inputs.append(source)
            env["MESH_INPUT"] = str(source)
        with self.sandbox(inputs) as box:
            env["MESH_OUT"] = str(box.out)
            argv = [part.replace("{python}", task_python()) for part in payload["command"]]
            run = box.run(argv, env=env)
            if run.outcome is not Outcome.OK:
                yield None, run.reason
                return
            archive = box.root / "result.tar"
            try:
                with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
                    for name in sorted(payload["outputs"]):
                        with box.open_output(name) as handle:  # never a link out of the box
                            info = tar.gettarinfo(fileobj=handle, arcname=name)
                            info.mtime, info.uid, info.gid = 0, 0, 0
                            info.uname, info.gname, info.mode = "", "", 0o644
                            tar.addfile(info, handle)
            except FileNotFoundError:
                missing = [n for n in payload["outputs"] if not (box.out / n).exists()]
                yield None, f"declared outputs missing: {missing}"
                return
            except UnsafeOutput as exc:
                yield None, str(exc)
                return
            yield archive, ""

    def close(self) -> None:
        """Stop the spare Blender worker."""
        if self._spare is not None:
            self._spare.close()
