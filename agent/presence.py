"""How the node joins the grid and stays visible on it: it registers and logs in, answers the
PoPW handshake when asked to, heartbeats with its session token, sends pynvml telemetry when
there is a GPU and answers the orchestrator's timed probes.

A chunk whose checkpoint could not be sent (a network cut) waits in the spool; the first
heartbeat that gets through again shows those chunks, uploaded and signed with the session
key, so the orchestrator does not take a process that rendered on through the cut for one
that left (`POST /v1/nodes/{id}/progress`).
"""

from __future__ import annotations

import base64
import logging
import threading
from pathlib import Path

import httpx

from agent.config import AgentConfig
from agent.connection import Connection
from agent.spool import OfflineChunk, Spool
from agent.telemetry import GpuTelemetry, Sampler
from orchestrator.domain import popw
from orchestrator.domain.continuity import ChunkMark
from protocol.client import ApiCallError, expect

log = logging.getLogger("mesh.agent")


class Presence:
    """The node of `config` on `connection`; the chunks it shows come from `spool`."""

    def __init__(self, config: AgentConfig, connection: Connection, spool: Spool) -> None:
        self.config = config
        self.connection = connection
        self.spool = spool
        self.gpu = GpuTelemetry()
        self.sampler = Sampler(self.gpu)
        self._stop_beats = threading.Event()
        self._progress_lock = threading.Lock()  # one showing of the offline chunks at a time

    def join(self) -> None:
        """Register and log in (retried), show what an earlier process left, then heartbeat in
        the background and, with `popw_class`, take the PoPW handshake."""
        config, wallet, session = self.config, self.connection.wallet, self.connection.session
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
        self.connection.retry("register", lambda: expect(wallet.send("POST", "/v1/nodes",
                                                                     registration)))
        self.connection.retry("login", session.login)
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
        node, wallet = self.config.node_id, self.connection.wallet
        challenge = expect(wallet.send("POST", f"/v1/nodes/{node}/popw/challenge",
                                       {"gpu_class": gpu_class}))
        answer = popw.solve(popw.KernelSpec(bytes.fromhex(challenge["nonce"][2:]),
                                            challenge["size"], challenge["rounds"],
                                            challenge["spot_checks"]))
        for _ in range(int(challenge["ping_rounds"])):
            self.answer_probe()
        under_load = [r.api_sample() for r in self.gpu.read()]
        verdict = expect(wallet.send("POST", f"/v1/nodes/{node}/popw/answer", {
            "nonce": challenge["nonce"], "answer": base64.b64encode(answer.to_bytes()).decode(),
            "gpu_under_load": under_load}))
        log.info("PoPW handshake: passed=%s tier=%s %s", verdict["passed"], verdict["tier"],
                 ",".join(verdict["reasons"]))

    def answer_probe(self, client: httpx.Client | None = None) -> None:
        node, session = self.config.node_id, self.connection.session
        nonce = session.request("POST", f"/v1/nodes/{node}/probe", http=client).json()["nonce"]
        session.request("POST", f"/v1/nodes/{node}/probe/echo", json={"nonce": nonce},
                        http=client)

    def _beat(self) -> None:
        """Heartbeats every `heartbeat_s`; GPU samples every 5 s when there is a GPU; a probe
        every 10 s (the orchestrator times the round trip)."""
        node, session = self.config.node_id, self.connection.session
        beats = 0
        with httpx.Client(base_url=self.config.orchestrator, timeout=10.0) as client:
            while not self._stop_beats.wait(self.config.heartbeat_s):
                beats += 1
                try:
                    session.request("POST", f"/v1/nodes/{node}/heartbeat", http=client)
                    self.show_progress(client)
                    if beats % 5 == 0 and self.gpu.available:
                        samples = [r.api_sample() for r in self.sampler.drain()][-120:]
                        if samples:
                            session.request("POST", f"/v1/nodes/{node}/telemetry/gpu",
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
        session = self.connection.session
        for chunk, path in chunks:
            session.request("PUT", f"/v1/blobs/{chunk.sha256}", content=path.read_bytes(),
                            http=client)
        marks = [ChunkMark(bytes.fromhex(c.sha256), c.rendered_at) for c, _ in chunks]
        proof = self.connection.prove_progress(task_id, marks)
        answer = session.request("POST", f"/v1/nodes/{self.config.node_id}/progress",
                                 http=client, json={
            "task_id": task_id, "resumed_at": proof.resumed_at,
            "signature": "0x" + proof.signature.hex(),
            "chunks": [{"sha256": c.sha256, "rendered_at": c.rendered_at, "offset": c.offset,
                        "length": c.length} for c, _ in chunks]}).json()
        log.info("task %s: progress through the cut shown: %s (%d of %d chunks credited)",
                 task_id, answer["verdict"], answer["chunks_credited"], len(chunks))
        self.spool.shown([c for c, _ in chunks])

    def leave(self) -> None:
        """Stop the heartbeats and the telemetry sampler."""
        self._stop_beats.set()
        self.sampler.stop()
