"""The people and machines of the demo grid, talking to the orchestrator over real HTTP.

Wallets sign with `orchestrator.api.auth.sign_request`, exactly as agents and customers do.
`ScriptedNode` plays a provider's node from a script: it registers, heartbeats, reports
telemetry, answers probes and the PoPW handshake with the real `popw.solve`, and works its
leases with small deterministic payloads. The real agent (pynvml, sandboxed Blender renders)
replaces it in the next milestone.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from typing import Any

import httpx

from agent.client import ApiCallError, Wallet, expect
from orchestrator.domain import popw

__all__ = ["DemoError", "ScriptedNode", "Wallet", "expect"]

DemoError = ApiCallError  # the service answered something the flow does not expect


def gpu_sample(at: float) -> dict[str, float | int]:
    """A healthy RTX 4090 reading as pynvml would give it (the scripted node has no GPU)."""
    return {"at": at, "temperature_c": 62.0, "sm_clock_mhz": 2520.0, "max_sm_clock_mhz": 2520.0,
            "throttle_reasons": 0, "utilization_pct": 97.0, "memory_used_mb": 9000.0,
            "memory_total_mb": 24564.0, "power_w": 330.0, "power_limit_w": 450.0}


class ScriptedNode:
    """One provider node, driven by the demo script instead of the agent daemon."""

    def __init__(self, node_id: str, wallet: Wallet, heartbeat_every_s: float = 0.5) -> None:
        self.node_id = node_id
        self.wallet = wallet
        self._token = ""
        self._heartbeat_every_s = heartbeat_every_s
        self._silenced = threading.Event()
        self._beater: threading.Thread | None = None
        self.heartbeats_sent = 0

    # ----- joining the grid --------------------------------------------------------------
    def register(self, *, gpu_model: str, vram_gb: int, region: str,
                 price_per_gpu_hour: int) -> Any:
        node = expect(self.wallet.send("POST", "/v1/nodes", {
            "node_id": self.node_id, "gpu_model": gpu_model, "vram_gb": vram_gb,
            "compute_capability": 8.9, "region": region,
            "price_per_gpu_hour": price_per_gpu_hour, "slots": 1}))
        self._token = expect(self.wallet.send("POST", "/v1/auth/login",
                                              {"node_id": self.node_id}))["token"]
        return node

    def post(self, path: str, payload: Any = None, client: httpx.Client | None = None
             ) -> httpx.Response:
        """A session-token request (heartbeats, telemetry, leases, tasks)."""
        return (client or self.wallet.http).post(
            path, json=payload, headers={"authorization": f"Bearer {self._token}"})

    def start_heartbeats(self) -> None:
        self._beater = threading.Thread(target=self._beat, name=f"beat-{self.node_id}",
                                        daemon=True)
        self._beater.start()

    def _beat(self) -> None:
        with httpx.Client(base_url=str(self.wallet.http.base_url), timeout=10.0) as client:
            while not self._silenced.is_set():
                try:
                    if self.post(f"/v1/nodes/{self.node_id}/heartbeat",
                                 client=client).status_code == 200:
                        self.heartbeats_sent += 1
                except httpx.TransportError:
                    pass  # the failure detector judges the gaps; keep beating
                self._silenced.wait(self._heartbeat_every_s)

    def go_silent(self) -> None:
        """Simulate a crash: no more heartbeats (and, from the script, no more reports)."""
        self._silenced.set()
        if self._beater is not None:
            self._beater.join(timeout=5)

    # ----- Predictive Latency Staking inputs ------------------------------------------------
    def report_gpu(self, samples: int) -> int:
        now = time.time()
        batch = [gpu_sample(now - (samples - i)) for i in range(samples)]
        return int(expect(self.post(f"/v1/nodes/{self.node_id}/telemetry/gpu",
                                    {"samples": batch}))["accepted"])

    def answer_probes(self, rounds: int) -> list[float]:
        """Ping-pong rounds the orchestrator times itself (echo at once)."""
        rtts = []
        for _ in range(rounds):
            nonce = expect(self.post(f"/v1/nodes/{self.node_id}/probe"))["nonce"]
            echo = expect(self.post(f"/v1/nodes/{self.node_id}/probe/echo", {"nonce": nonce}))
            rtts.append(float(echo["rtt_ms"]))
        return rtts

    def handshake(self, gpu_class: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The PoPW handshake: solve the challenge's kernel, answer the timed probe rounds,
        send the answer with telemetry under load. Returns (challenge, verdict)."""
        challenge = expect(self.wallet.send("POST", f"/v1/nodes/{self.node_id}/popw/challenge",
                                            {"gpu_class": gpu_class}))
        answer = popw.solve(popw.KernelSpec(bytes.fromhex(challenge["nonce"][2:]),
                                            challenge["size"], challenge["rounds"],
                                            challenge["spot_checks"]))
        self.answer_probes(challenge["ping_rounds"])
        verdict = expect(self.wallet.send("POST", f"/v1/nodes/{self.node_id}/popw/answer", {
            "nonce": challenge["nonce"],
            "answer": base64.b64encode(answer.to_bytes()).decode(),
            "gpu_under_load": [gpu_sample(time.time())]}))
        return challenge, verdict

    # ----- work ----------------------------------------------------------------------------
    def pull_lease(self) -> dict[str, Any] | None:
        response = self.post(f"/v1/nodes/{self.node_id}/lease")
        if response.status_code == 204:
            return None
        return dict(expect(response))

    def upload(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        expect(self.wallet.http.put(f"/v1/blobs/{digest}", content=data,
                                    headers={"authorization": f"Bearer {self._token}"}))
        return digest

    def progress(self, task_id: int, progress: float) -> Any:
        return expect(self.post(f"/v1/tasks/{task_id}/progress", {"progress": progress}))

    def checkpoint(self, task_id: int, data: bytes, progress: float) -> str:
        digest = self.upload(data)
        expect(self.post(f"/v1/tasks/{task_id}/checkpoints",
                         {"sha256": digest, "progress": progress}))
        return digest

    def complete(self, task_id: int, result: bytes) -> tuple[str, str]:
        digest = self.upload(result)
        done = expect(self.post(f"/v1/tasks/{task_id}/complete", {"result_sha256": digest}))
        return digest, str(done["status"])
