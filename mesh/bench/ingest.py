"""Heartbeat ingest through real HTTP: a uvicorn server process on loopback, client
processes each driving many keep-alive HTTP/1.1 connections with asyncio streams
(httpx's pool serialises badly past a few connections and measured the client,
not the server: 965 req/s on 1 connection, 80 req/s on 64).

Nodes are written to the DB before the server starts, and their session tokens are
minted with the server's shared session secret (exactly what `POST /v1/auth/login`
returns), so the timed part is only heartbeats: token HMAC check, write-behind buffer,
batched DB flush every ~100 ms.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mesh.processes import OrchestratorProcess
from orchestrator.api.auth import SessionClaims, issue_token
from orchestrator.db import nodes as node_db
from orchestrator.db.session import make_engine, make_session_factory, upgrade_to_head
from orchestrator.domain.types import NodeSpec

PROVIDER = "0x" + "ab" * 20
CLIENT_PROCESSES = 2
CONNECTIONS_PER_CLIENT = 32


async def _one_connection(host: str, port: int, tokens: list[tuple[str, str]], offset: int,
                          stride: int, deadline: float, latencies: list[float]) -> int:
    """Sequential keep-alive heartbeats on one connection; returns how many failed."""
    reader, writer = await asyncio.open_connection(host, port)
    errors = 0
    index = offset
    try:
        while time.perf_counter() < deadline:
            node_id, token = tokens[index % len(tokens)]
            index += stride
            request = (f"POST /v1/nodes/{node_id}/heartbeat HTTP/1.1\r\nHost: {host}\r\n"
                       f"Authorization: Bearer {token}\r\nContent-Length: 0\r\n\r\n").encode()
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            errors += not head.startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
    return errors


async def _hammer(host: str, port: int, tokens: list[tuple[str, str]], seconds: float
                  ) -> tuple[list[float], int, float, float]:
    latencies: list[float] = []
    began = time.time()
    deadline = time.perf_counter() + seconds
    errors = await asyncio.gather(*(
        _one_connection(host, port, tokens, i, CONNECTIONS_PER_CLIENT, deadline, latencies)
        for i in range(CONNECTIONS_PER_CLIENT)))
    return latencies, sum(errors), began, time.time()


def _client(args: tuple[str, int, list[tuple[str, str]], float]
            ) -> tuple[list[float], int, float, float]:
    return asyncio.run(_hammer(*args))


def run(nodes: int = 10_000, seconds: float = 10.0) -> dict[str, Any]:
    secret = secrets.token_hex(32)
    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{Path(scratch) / 'ingest.db'}"
        engine = make_engine(url)
        upgrade_to_head(engine)
        with make_session_factory(engine).begin() as session:
            node_db.bulk_register_nodes(session, now=0.0, specs=[
                NodeSpec(node_id=f"hb-{i}", provider=PROVIDER, gpu_model="RTX4090", vram_gb=24,
                         compute_capability=8.9, region="eu", price_per_gpu_hour=100, slots=1)
                for i in range(nodes)])
        engine.dispose()
        expires = time.time() + 3600
        tokens = [(f"hb-{i}", issue_token(secret.encode(), SessionClaims(PROVIDER, f"hb-{i}",
                                                                          expires)))
                  for i in range(nodes)]
        env = {"MESH_DATABASE_URL": url, "MESH_DATA_DIR": scratch,
               "MESH_SESSION_SECRET": secret, "MESH_PERIODIC_ENABLED": "false"}
        with OrchestratorProcess(env, Path(scratch) / "server.log",
                                 serve_args=["--no-access-log", "--log-level", "warning"]
                                 ) as server:
            shares = [tokens[i::CLIENT_PROCESSES] for i in range(CLIENT_PROCESSES)]
            with multiprocessing.get_context("spawn").Pool(CLIENT_PROCESSES) as pool:
                outcomes = pool.map(_client, [("127.0.0.1", server.port, share, seconds)
                                              for share in shares])
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            seen = node_db.nodes_seen_since(session, since=expires - 3600)
        engine.dispose()
    latencies = np.array([value for outcome in outcomes for value in outcome[0]]) * 1000.0
    errors = sum(outcome[1] for outcome in outcomes)
    window = max(o[3] for o in outcomes) - min(o[2] for o in outcomes)  # union of client runs
    return {"nodes": nodes, "seconds": round(window, 2), "requests": int(latencies.size),
            "heartbeats_per_s": round((latencies.size - errors) / window, 1),
            "nodes_with_heartbeat_in_db": seen,
            "p50_ms": round(float(np.percentile(latencies, 50)), 2),
            "p99_ms": round(float(np.percentile(latencies, 99)), 2), "errors": errors,
            "client_processes": CLIENT_PROCESSES,
            "connections": CLIENT_PROCESSES * CONNECTIONS_PER_CLIENT}
