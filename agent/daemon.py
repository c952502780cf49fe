"""`mesh agent run`: a provider's machine on the grid.

It registers its node and logs in (wallet-signed, naming an ephemeral session key that lives
only in this process: the orchestrator's proof that a reconnect after a network cut is the same
process, see `orchestrator.domain.continuity`), heartbeats with a session token, sends
pynvml telemetry when there is a GPU, answers probes and, when asked to, the PoPW handshake,
pulls leases and runs each task in the sandbox. A Blender frame is rendered in sample chunks;
every chunk is uploaded and recorded as the task's checkpoint (a manifest naming the chunks by
hash), so a frame resumed elsewhere redoes at most one chunk. A finished result goes to the
spool first and leaves it only when the orchestrator has acknowledged it. Network and server
errors are retried with capped exponential backoff. A chunk whose checkpoint cannot be sent
(a network cut) is kept in the spool; the first heartbeat that gets through again shows those
chunks, uploaded and signed with the session key, so the orchestrator does not take a process
that rendered on through the cut for one that left (`POST /v1/nodes/{id}/progress`).
SIGTERM drains: no new leases, the running frame stops after its next checkpoint and is handed
back (`fail(drain)`), the orchestrator is told (`POST .../drain`), then the agent exits.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import random
import signal
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from eth_account.signers.local import LocalAccount

from agent.sandbox import Limits, Outcome, Sandbox, UnsafeOutput, isolation, task_python
from agent.spool import OfflineChunk, Pending, Spool
from agent.telemetry import GpuTelemetry, Sampler
from agent.workloads import blender
from orchestrator.domain import popw
from orchestrator.domain.continuity import ChunkMark, session_address, sign_progress
from protocol.client import ApiCallError, Wallet, expect, sha256_file
from protocol.images import OutputInvalid, exr_pixels
from protocol.session import NodeSession

log = logging.getLogger("mesh.agent")
T = TypeVar("T")
MANIFEST_KIND = "mesh-blender-chunks/1"


@dataclass(frozen=True, slots=True)
class AgentConfig:
    orchestrator: str
    node_id: str
    state_dir: Path
    chain_id: int = 31337
    orchestrator_id: str = "depin-mesh-orchestrator"
    region: str = "local"
    price_per_gpu_hour: int = 100
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    limits: Limits = field(default_factory=Limits)
    heartbeat_s: float = 1.0
    poll_s: float = 1.0
    popw_class: str | None = None  # answer a PoPW handshake of this GPU class at start
    max_backoff_s: float = 30.0
    exit_when_idle_s: float | None = None  # leave after this long without work (bench, tests)
    cpu_kernel: str | None = None  # "sse42": Cycles without its AVX2 kernel (a cross-kernel grid)


class Draining(Exception):
    """SIGTERM arrived: stop taking work."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Agent:
    def __init__(self, config: AgentConfig, account: LocalAccount) -> None:
        self.config = config
        self.wallet = Wallet.connect(config.orchestrator, bytes(account.key),
                                     chain_id=config.chain_id,
                                     orchestrator_id=config.orchestrator_id)
        self.spool = Spool(config.state_dir / "spool")
        self.cache = config.state_dir / "blobs"
        self.cache.mkdir(parents=True, exist_ok=True)
        (config.state_dir / "tmp").mkdir(exist_ok=True)
        self.gpu = GpuTelemetry()
        self.sampler = Sampler(self.gpu)
        self.draining = threading.Event()
        self._stop_beats = threading.Event()
        self._session_key = os.urandom(32)  # never written anywhere: a restart makes a new one
        self.session = NodeSession(self.wallet, config.node_id,
                                   session_key=session_address(self._session_key))
        self._progress_lock = threading.Lock()  # one showing of the offline chunks at a time
        self._sandbox: Sandbox | None = None
        self._spare: Sandbox | None = None  # a Blender worker already past `import bpy`
        self.tasks_done = 0

    # ----- plumbing --------------------------------------------------------------------------
    def retry(self, what: str, call: Callable[[], T]) -> T:
        """`call` until it does not fail on the network or with a 5xx; backoff with jitter."""
        delay = 0.25
        while True:
            try:
                return call()
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}"
            except ApiCallError as exc:
                if exc.status < 500:
                    raise
                problem = f"HTTP {exc.status}"
            log.warning("%s: %s; retrying in %.1f s", what, problem, delay)
            time.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.config.max_backoff_s)

    def call(self, what: str, method: str, path: str, **kwargs: Any) -> Any:
        response = self.retry(what, lambda: self.session.request(method, path, **kwargs))
        return response.json() if response.content else None

    # ----- joining ---------------------------------------------------------------------------
    def join(self) -> None:
        config = self.config
        log.info("agent %s for node %s at %s", self.wallet.address, config.node_id,
                 config.orchestrator)
        log.info("sandbox: %s", isolation())
        if self.gpu.available:
            log.info("GPU telemetry: NVML, %s", ", ".join(self.gpu.names))
        else:
            log.warning("%s; reporting CPU facts only (%s)", self.gpu.unavailable,
                        self.sampler.cpu["cpu_model"])
        gpu_model = self.gpu.names[0].replace(" ", "-")[:64] if self.gpu.available else "cpu"
        vram = 0
        if self.gpu.available:
            readings = self.gpu.read()
            vram = int(readings[0].memory_total_mb // 1024) if readings else 0
        registration = {"node_id": config.node_id, "gpu_model": gpu_model, "vram_gb": vram,
                        "compute_capability": 0.0, "region": config.region,
                        "price_per_gpu_hour": config.price_per_gpu_hour, "slots": 1}
        self.retry("register", lambda: expect(self.wallet.send("POST", "/v1/nodes",
                                                                registration)))
        self.retry("login", self.session.login)
        log.info("registered %s (%s, %d GB) and logged in", config.node_id, gpu_model, vram)
        self.show_progress()  # an earlier process's: refused, its session key died with it
        self.sampler.start()
        threading.Thread(target=self._beat, name="heartbeat", daemon=True).start()
        if config.popw_class:
            try:
                self.handshake(config.popw_class)
            except ApiCallError as exc:  # no high-priority tier for now; normal work goes on
                log.warning("PoPW handshake: failed (%s)", exc.code or exc)

    def handshake(self, gpu_class: str) -> None:
        node = self.config.node_id
        challenge = expect(self.wallet.send("POST", f"/v1/nodes/{node}/popw/challenge",
                                            {"gpu_class": gpu_class}))
        answer = popw.solve(popw.KernelSpec(bytes.fromhex(challenge["nonce"][2:]),
                                            challenge["size"], challenge["rounds"],
                                            challenge["spot_checks"]))
        for _ in range(int(challenge["ping_rounds"])):
            self.answer_probe()
        under_load = [r.api_sample() for r in self.gpu.read()]
        verdict = expect(self.wallet.send("POST", f"/v1/nodes/{node}/popw/answer", {
            "nonce": challenge["nonce"], "answer": base64.b64encode(answer.to_bytes()).decode(),
            "gpu_under_load": under_load}))
        log.info("PoPW handshake: passed=%s tier=%s %s", verdict["passed"], verdict["tier"],
                 ",".join(verdict["reasons"]))

    def answer_probe(self, client: httpx.Client | None = None) -> None:
        node = self.config.node_id
        nonce = self.session.request("POST", f"/v1/nodes/{node}/probe", http=client).json()["nonce"]
        self.session.request("POST", f"/v1/nodes/{node}/probe/echo", json={"nonce": nonce},
                     http=client)

    def _beat(self) -> None:
        """Heartbeats every `heartbeat_s`; GPU samples every 5 s when there is a GPU; a probe
        every 10 s (the orchestrator times the round trip)."""
        node = self.config.node_id
        beats = 0
        with httpx.Client(base_url=self.config.orchestrator, timeout=10.0) as client:
            while not self._stop_beats.wait(self.config.heartbeat_s):
                beats += 1
                try:
                    self.session.request("POST", f"/v1/nodes/{node}/heartbeat", http=client)
                    self.show_progress(client)
                    if beats % 5 == 0 and self.gpu.available:
                        samples = [r.api_sample() for r in self.sampler.drain()][-120:]
                        if samples:
                            self.session.request("POST", f"/v1/nodes/{node}/telemetry/gpu",
                                         json={"samples": samples}, http=client)
                    if beats % 10 == 0:
                        self.answer_probe(client)
                except (httpx.TransportError, ApiCallError) as exc:
                    log.debug("heartbeat: %s", exc)  # the failure detector judges the gaps

    def show_progress(self, client: httpx.Client | None = None) -> None:
        """Show the chunks rendered while the orchestrator could not be reached, per task:
        upload them, sign them with this process's session key, post them. Whatever the
        verdict (withdrawn, nothing pending, refused), they are shown once; a network error
        keeps them for the next heartbeat."""
        with self._progress_lock:
            by_task: dict[int, list[tuple[OfflineChunk, Path]]] = {}
            for chunk, path in self.spool.offline():
                by_task.setdefault(chunk.task_id, []).append((chunk, path))
            for task_id, chunks in sorted(by_task.items()):
                try:
                    self._show_task_progress(task_id, chunks, client)
                except ApiCallError as exc:
                    if exc.status >= 500:
                        log.warning("task %s: progress through the cut not shown yet (%s)",
                                    task_id, exc)
                        return
                    log.warning("task %s: progress through the cut refused: %s", task_id,
                                exc.code or exc)
                    self.spool.shown([c for c, _ in chunks])
                except httpx.TransportError as exc:
                    log.warning("task %s: progress through the cut not shown yet (%s)",
                                task_id, type(exc).__name__)
                    return

    def _show_task_progress(self, task_id: int, chunks: list[tuple[OfflineChunk, Path]],
                            client: httpx.Client | None) -> None:
        for chunk, path in chunks:
            self.session.request("PUT", f"/v1/blobs/{chunk.sha256}", content=path.read_bytes(),
                         http=client)
        marks = [ChunkMark(bytes.fromhex(c.sha256), c.rendered_at) for c, _ in chunks]
        proof = sign_progress(self._session_key, self.config.node_id, str(task_id), marks,
                              time.time())
        answer = self.session.request("POST", f"/v1/nodes/{self.config.node_id}/progress",
                              http=client, json={
            "task_id": task_id, "resumed_at": proof.resumed_at,
            "signature": "0x" + proof.signature.hex(),
            "chunks": [{"sha256": c.sha256, "rendered_at": c.rendered_at, "offset": c.offset,
                        "length": c.length} for c, _ in chunks]}).json()
        log.info("task %s: progress through the cut shown: %s (%d of %d chunks credited)",
                 task_id, answer["verdict"], answer["chunks_credited"], len(chunks))
        self.spool.shown([c for c, _ in chunks])

    # ----- blobs -----------------------------------------------------------------------------
    def upload(self, path: Path, sha256: str) -> None:
        data = path.read_bytes()
        if sha256_bytes(data) != sha256:
            raise ValueError(f"{path} changed on disk")
        self.call(f"upload {sha256[:12]}", "PUT", f"/v1/blobs/{sha256}", content=data)

    def fetch(self, sha256: str, suffix: str = "") -> Path:
        """A blob in the local cache, downloaded and hash-checked if missing."""
        target = self.cache / f"{sha256}{suffix}"
        if target.is_file() and sha256_file(target) == sha256:
            return target
        response = self.retry(f"download {sha256[:12]}",
                              lambda: self.session.request("GET", f"/v1/blobs/{sha256}"))
        if sha256_bytes(response.content) != sha256:
            raise ApiCallError(f"blob {sha256} arrived with other content")
        partial = target.with_suffix(target.suffix + ".partial")
        partial.write_bytes(response.content)
        os.replace(partial, target)
        return target

    # ----- the work loop ---------------------------------------------------------------------
    def run(self) -> int:
        """Serve until drained (SIGTERM) or idle past `exit_when_idle_s`; returns tasks done."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.begin_drain())
        self.join()
        self.warm()
        idle_since = time.monotonic()
        try:
            while not self.draining.is_set():
                self.deliver_spooled()
                if self.run_check():
                    idle_since = time.monotonic()
                    continue
                lease = self.retry("pull a lease", lambda: self.session.request(
                    "POST", f"/v1/nodes/{self.config.node_id}/lease", ok=(200, 204)))
                if lease.status_code == 204:
                    limit = self.config.exit_when_idle_s
                    if limit is not None and time.monotonic() - idle_since > limit:
                        log.info("idle for %.0f s: leaving", limit)
                        break
                    self.draining.wait(self.config.poll_s)
                    continue
                self.work(lease.json())
                idle_since = time.monotonic()
        finally:
            self.leave()
        return self.tasks_done

    def begin_drain(self) -> None:
        if self.draining.is_set():
            return
        log.info("SIGTERM: draining (no new leases; the running frame checkpoints and goes "
                 "back)")
        self.draining.set()

    def leave(self) -> None:
        if self.draining.is_set():
            try:
                self.session.request("POST", f"/v1/nodes/{self.config.node_id}/drain")
                log.info("drained: the orchestrator was told")
            except (httpx.TransportError, ApiCallError) as exc:
                log.warning("drain: could not tell the orchestrator: %s", exc)
        if self._spare is not None:
            self._spare.close()
        self._stop_beats.set()
        self.sampler.stop()
        self.wallet.close()

    def work(self, lease: dict[str, Any]) -> None:
        task_id = int(lease["task_id"])
        payload = lease["payload"]
        log.info("lease %s: task %s %s", lease["lease_id"], task_id,
                 json.dumps({k: payload.get(k) for k in ("kind", "frame", "tile", "shard")}))
        try:
            self.call("start", "POST", f"/v1/tasks/{task_id}/progress",
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
            self.call("give back", "POST", f"/v1/tasks/{task_id}/fail",
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
        self.warm()
        box, self._spare = self._spare, None
        assert box is not None
        return box

    def render(self, lease: dict[str, Any]) -> None:
        task_id = int(lease["task_id"])
        payload = lease["payload"]
        blend = self.fetch(str(payload["blend_sha256"]), ".blend")
        task = blender.FrameTask.from_payload(payload, blend, self.config.threads)
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
                    self.session.request("PUT", f"/v1/blobs/{name}", content=path.read_bytes())
                    uploaded.add(name)
                self.session.request("PUT", f"/v1/blobs/{digest}", content=body)
                self.session.request("POST", f"/v1/tasks/{task_id}/checkpoints", json={
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
                    if self._sandbox is not None:
                        self._sandbox.cancel()
                else:
                    log.warning("task %s: checkpoint deferred (%s)", task_id, exc)
            if self.draining.is_set() and self._sandbox is not None:
                self._sandbox.cancel()

        uploaded = {c.sha256 for c in done}
        pending_chunks: list[blender.Chunk] = []
        with self.take_warm() as box:
            self._sandbox = box
            try:
                rendered = blender.render(task, box, done=done, on_chunk=checkpoint)
            finally:
                self._sandbox = None
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
            self.finish(lease, rendered.frame, render=render,
                        parts=[(c.sha256, c.path) for c in rendered.chunks
                               if c.sha256 not in uploaded])

    def run_check(self) -> bool:
        """Re-render a window of another provider's result when the orchestrator has one for
        this node (`blender` checks), send the chunk and frame files; False: none waits."""
        node = self.config.node_id
        response = self.retry("pull a check", lambda: self.session.request(
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
            blend = self.fetch(str(payload["blend_sha256"]), ".blend")
            task = blender.FrameTask.from_payload(payload, blend, self.config.threads)
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
                    self.upload(chunk.path, chunk.sha256)
                frame_sha = sha256_file(rendered.frame)
                self.upload(rendered.frame, frame_sha)
            verdict = self.call("check result", "POST", f"/v1/checks/{check_id}/result",
                                json={
                                    "chunks": [{"offset": c.offset, "length": c.length,
                                                "sha256": c.sha256} for c in rendered.chunks],
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
                self.upload(archive, sha)
            verdict = self.call("check result", "POST", f"/v1/checks/{check_id}/result",
                                json={"result_sha256": sha})
            log.info("check %s: %s", check_id, verdict["status"])
        except ApiCallError as exc:
            log.warning("check %s: %s", check_id, exc)

    def resume_chunks(self, manifest_sha: str | None, task: blender.FrameTask
                      ) -> list[blender.Chunk]:
        """The chunks a checkpoint names, downloaded and decoded; none when it does not fit
        this task (then the frame starts over, which is safe)."""
        if not manifest_sha:
            return []
        manifest = json.loads(self.fetch(manifest_sha, ".json").read_text())
        if (manifest.get("kind") != MANIFEST_KIND or manifest.get("samples") != task.samples
                or manifest.get("chunk_samples") != task.chunk_samples):
            log.warning("checkpoint %s does not fit this task; starting over", manifest_sha)
            return []
        chunks = []
        for entry in manifest["chunks"]:
            path = self.fetch(str(entry["sha256"]), ".exr")
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
            self.finish(lease, archive)

    @contextlib.contextmanager
    def run_command(self, payload: dict[str, Any]) -> Iterator[tuple[Path | None, str]]:
        """(the result tar, "") or (None, why it failed), inside the task's sandbox."""
        inputs = []
        env = {"MESH_SHARD": str(payload.get("shard", 0)),
               "MESH_SHARDS": str(payload.get("shards", 1)), "MESH_PYTHON": task_python()}
        if payload.get("input_sha256"):
            source = self.fetch(str(payload["input_sha256"]))
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

    # ----- results ---------------------------------------------------------------------------
    def finish(self, lease: dict[str, Any], result: Path, *, render: dict[str, Any] | None = None,
               parts: list[tuple[str, Path]] | None = None) -> None:
        """Spool the result (with the chunk files not uploaded yet), then deliver it."""
        sha = sha256_file(result)
        pending = self.spool.keep(task_id=int(lease["task_id"]), lease_id=int(lease["lease_id"]),
                                  sha256=sha, source=result, render=render, parts=parts or [])
        log.info("task %s: result %s kept in the spool", pending.task_id, sha[:12])
        self.deliver(pending)

    def deliver(self, pending: Pending) -> None:
        try:
            for part in pending.parts:
                self.upload(self.spool.root / part, part.split(".")[0])
            self.upload(self.spool.path(pending), pending.sha256)
            body: dict[str, Any] = {"result_sha256": pending.sha256}
            if pending.render is not None:
                body["render"] = pending.render
            self.call("complete", "POST", f"/v1/tasks/{pending.task_id}/complete",
                      json=body)
        except ApiCallError as exc:
            if exc.status not in (404, 409):
                raise
            log.warning("task %s: result %s refused (%s); dropped from the spool",
                        pending.task_id, pending.sha256[:12], exc.code)
        else:
            self.tasks_done += 1
            log.info("task %s: result %s acknowledged", pending.task_id, pending.sha256[:12])
        self.spool.acknowledged(pending)

    def deliver_spooled(self) -> None:
        for pending in self.spool.pending():
            log.info("task %s: delivering spooled result %s", pending.task_id,
                     pending.sha256[:12])
            self.deliver(pending)
