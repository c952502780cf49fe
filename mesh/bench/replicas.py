"""PLS score sharing between replicas, through real processes: two `mesh orchestrator serve`
processes on one fresh PostgreSQL database, nodes registered and reporting on each, and how
long an observation one replica received takes to show in the other's scores.

The signal is the thermal factor of `GET /v1/nodes/{id}/score`: it moves with every GPU
sample of a distinct temperature and does not depend on when it is read, so the writer's own
answer (right after its commit) is exactly what the reader must show once it applied the
sample. Lag = from the writer's answer to the reader's first equal one (polled every 5 ms).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount

from mesh.processes import OrchestratorProcess
from orchestrator.config import Settings
from orchestrator.db.session import (
    create_scratch_database,
    drop_database,
    make_engine,
    upgrade_to_head,
)
from protocol.client import Wallet, expect

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
POLL_S = 0.005


@contextlib.contextmanager
def scratch_database(base_url: str) -> Iterator[str]:
    """A migrated, empty PostgreSQL database beside `base_url`'s, dropped afterwards."""
    name = f"mesh_replicas_{uuid.uuid4().hex[:12]}"
    url = create_scratch_database(base_url, name)
    try:
        engine = make_engine(url)
        upgrade_to_head(engine)
        engine.dispose()
        yield url
    finally:
        drop_database(base_url, name)


@contextlib.contextmanager
def serve_replicas(url: str, scratch: Path, count: int = 2, env: Mapping[str, str] | None = None
                   ) -> Iterator[list[OrchestratorProcess]]:
    """`count` orchestrator processes on the database at `url`, one session secret and one
    data folder (blobs, deployment) between them (a token or an upload at one is good at the
    other), periodic jobs on, no chain unless `env` names one. The list may be changed (a
    replica killed and started again): whatever it holds at the end is stopped."""
    shared = {"MESH_DATABASE_URL": url, "MESH_SESSION_SECRET": secrets.token_hex(32),
              "MESH_PERIODIC_ENABLED": "true", "MESH_JSON_LOGS": "false",
              "MESH_NODE_STAKE": "0",  # no chain here: registering asks for no stake
              "MESH_DATA_DIR": str(scratch / "data"), **(env or {})}
    processes: list[OrchestratorProcess] = []
    try:
        for index in range(count):
            processes.append(OrchestratorProcess(
                shared, scratch / f"replica-{index}.log",
                serve_args=["--no-access-log", "--log-level", "warning"]).__enter__())
        yield processes
    finally:
        for process in processes:
            process.stop()


def gpu_samples(temperatures: Sequence[float], *, throttled: bool = False) -> dict[str, Any]:
    """A telemetry body: one GPU sample per temperature, 10 ms apart, the last one now."""
    now = time.time()
    return {"samples": [
        {"at": now - 0.01 * (len(temperatures) - i), "temperature_c": t,
         "sm_clock_mhz": 1800.0 if throttled else 2500.0, "max_sm_clock_mhz": 2500.0,
         "throttle_reasons": 0x20 if throttled else 0, "utilization_pct": 95.0,
         "memory_used_mb": 8000.0, "memory_total_mb": 24000.0, "power_w": 300.0,
         "power_limit_w": 450.0} for i, t in enumerate(temperatures)]}


class ReportingNode:
    """A node registered and logged in at one replica, reporting there as an agent does."""

    def __init__(self, base_url: str, node_id: str, *, region: str = "eu",
                 account: LocalAccount | None = None) -> None:
        """`account`: the provider wallet that signs (one with stake, where registration
        asks for it); a fresh one by default."""
        settings = Settings()
        account = account or Account.create()
        self.node_id = node_id
        self.wallet = Wallet.connect(base_url, bytes(account.key), chain_id=settings.chain_id,
                                     orchestrator_id=settings.orchestrator_id)
        expect(self.wallet.send("POST", "/v1/nodes", {
            "node_id": node_id, "gpu_model": "RTX4090", "vram_gb": 24,
            "compute_capability": 8.9, "region": region, "price_per_gpu_hour": 100,
            "slots": 1}))
        token = expect(self.wallet.send("POST", "/v1/auth/login", {"node_id": node_id}))["token"]
        # the session token's header: good at every replica (they share the secret)
        self.auth = {"authorization": f"Bearer {token}"}

    @property
    def http(self) -> httpx.Client:
        return self.wallet.http

    def post(self, path: str, payload: Any = None, *, via: httpx.Client | None = None) -> Any:
        """To this node's replica, or to the one `via` points at."""
        return expect((via or self.http).post(path, json=payload, headers=self.auth))

    def gpu(self, temperatures: Sequence[float], *, throttled: bool = False,
            via: httpx.Client | None = None) -> None:
        self.post(f"/v1/nodes/{self.node_id}/telemetry/gpu", gpu_samples(
            temperatures, throttled=throttled), via=via)

    def probe(self) -> None:
        nonce = self.post(f"/v1/nodes/{self.node_id}/probe")["nonce"]
        self.post(f"/v1/nodes/{self.node_id}/probe/echo", {"nonce": nonce})

    def beat(self) -> None:
        self.post(f"/v1/nodes/{self.node_id}/heartbeat")

    def close(self) -> None:
        self.wallet.close()


def score(http: httpx.Client, node_id: str) -> dict[str, Any] | None:
    """The node's score as this replica sees it; None while it does not know the node."""
    response = http.get(f"/v1/nodes/{node_id}/score")
    if response.status_code == 404:
        return None
    result: dict[str, Any] = expect(response)
    return result


def wait_for(http: httpx.Client, node_id: str, field: str, value: float,
             timeout_s: float) -> float:
    """Seconds until this replica's `field` of the node's score equals `value`."""
    started = time.perf_counter()
    while True:
        seen = score(http, node_id)
        if seen is not None and seen[field] == value:
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError(f"{node_id}: {field} still {seen and seen[field]} after "
                               f"{timeout_s:.0f} s, the other replica has {value}")
        time.sleep(POLL_S)


def propagation_lag(writer: ReportingNode, reader: httpx.Client, temperature: float,
                    timeout_s: float = 30.0, *, via: httpx.Client | None = None) -> float:
    """One GPU sample sent to the writer's replica (or `via`'s): seconds until the reader's
    score has it."""
    http = via or writer.http
    before = score(http, writer.node_id)
    writer.gpu([temperature], via=http)
    after = score(http, writer.node_id)
    if before is None or after is None or after["thermal"] == before["thermal"]:
        raise ValueError(f"a sample at {temperature} C did not move {writer.node_id}'s "
                         f"thermal factor at its own replica")
    return wait_for(reader, writer.node_id, "thermal", after["thermal"], timeout_s)


def run(postgres_url: str | None = None, samples: int = 40) -> dict[str, Any]:
    base = postgres_url or os.environ.get("MESH_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL
    with tempfile.TemporaryDirectory() as scratch, scratch_database(base) as url, \
            serve_replicas(url, Path(scratch)) as (first, second):
        nodes = [ReportingNode(first.base_url, "lag-first"),
                 ReportingNode(second.base_url, "lag-second")]
        readers = [httpx.Client(base_url=second.base_url), httpx.Client(base_url=first.base_url)]
        try:
            for node, reader in zip(nodes, readers, strict=True):
                wait_for(reader, node.node_id, "thermal", 1.0, timeout_s=30.0)
            # each node's samples get warmer: every one moves its short-window mean
            lags = [propagation_lag(nodes[i % 2], readers[i % 2], 82.0 + 0.01 * i)
                    for i in range(samples)]
        finally:
            for node in nodes:
                node.close()
            for reader in readers:
                reader.close()
    ordered = sorted(lags)
    return {"replicas": 2, "backend": "postgresql", "samples": samples,
            "follow_interval_s": Settings().pls_follow_interval_s,
            "lag_p50_ms": round(statistics.median(ordered) * 1000.0, 1),
            "lag_p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000.0, 1),
            "lag_max_ms": round(ordered[-1] * 1000.0, 1),
            "lag_mean_ms": round(statistics.fmean(ordered) * 1000.0, 1)}
