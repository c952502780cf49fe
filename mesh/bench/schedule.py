"""Placement throughput: tasks placed and committed per second, with decision latency.

The fleet and the queue are written first (not timed); then one placement pass, the one the
service runs (`services.placement.PlacementPass`), drains the queue into reservations.
`placements_per_s` counts only committed reservations. With `pls`, the pass's gate is the PLS
service: the engine ranks the candidates of each kind of need, and every placement locks its
collateral (a row and an outbox action) in the same batch.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db import pls as pls_store
from orchestrator.db.session import (
    create_scratch_database,
    drop_database,
    make_engine,
    make_session_factory,
    upgrade_to_head,
)
from orchestrator.domain.chain_views import ProviderStake
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.pls_engine import PlsConfig
from orchestrator.domain.types import NodeSpec, TaskNeeds, Tier
from orchestrator.services.placement import BATCH, PlacementPass
from orchestrator.services.pls import PlsService
from orchestrator.services.pls_placement import PlsPlacement
from orchestrator.telemetry.metrics import MeshMetrics

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
GPUS = [("RTX4090", 24), ("RTX3090", 24), ("A100", 80), ("L4", 24), ("RTX3060", 12)]
REGIONS = ["eu", "us", "asia"]
NEEDS = [TaskNeeds(), TaskNeeds(min_vram_gb=24), TaskNeeds(regions=frozenset({"eu", "us"})),
         TaskNeeds(min_vram_gb=16, max_price_per_gpu_hour=300)]
TASKS_PER_JOB = 1_000


def _fleet(nodes: int, slots: int, rng: random.Random) -> list[NodeSpec]:
    fleet = []
    for i in range(nodes):
        gpu, vram = GPUS[i % len(GPUS)]
        fleet.append(NodeSpec(node_id=f"bench-{i}", provider=f"0x{i % 500:040x}", gpu_model=gpu,
                              vram_gb=vram, compute_capability=8.0, region=REGIONS[i % 3],
                              price_per_gpu_hour=rng.randint(50, 400), slots=slots,
                              tier=Tier.STANDARD))
    return fleet


class _Bonded:
    """Every provider has bonded plenty (the chain is not what this measures)."""

    def provider_stake(self, provider: str) -> ProviderStake:
        return ProviderStake(provider=provider, bonded=10**24, locked=0, unbonding=0, tier=1)


def _pls_gate(factory: Any) -> PlsPlacement:
    pls = PlsService(PlsConfig(), stake_reader=_Bonded, metrics=MeshMetrics())
    with factory.begin() as session:
        for node in pls_store.all_nodes(session):
            pls.ingest.node_registered(session, node=node, now=0.0)
    return pls.placement


def _run_backend(url: str, nodes: int, tasks: int, pls: bool = False) -> dict[str, Any]:
    engine = make_engine(url)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    rng = random.Random(7)
    slots = max(1, math.ceil(tasks / nodes))
    with factory.begin() as session:
        node_db.bulk_register_nodes(session, specs=_fleet(nodes, slots, rng), now=0.0)
    for job in range(math.ceil(tasks / TASKS_PER_JOB)):
        count = min(TASKS_PER_JOB, tasks - job * TASKS_PER_JOB)
        with factory.begin() as session:
            job_db.create_job(session, NewJob(
                job_id=f"0x{job:064x}", customer=f"0x{1:040x}", spec={}, spec_hash="0x" + "0" * 64,
                amount=10**18, deadline=1e12, needs=NEEDS[job % len(NEEDS)],
                payloads=tuple({"frame": f} for f in range(count))), now=0.0,
                status=JobStatus.FUNDED)
    placement = PlacementPass(factory, gate=_pls_gate(factory) if pls else None,
                              reservation_ttl_s=30.0, lead_ttl_s=3600.0, idle_gap_s=1.0,
                              metrics=MeshMetrics(),
                              clock=lambda: 60.0)
    started = time.perf_counter()
    result = placement.run()
    elapsed = time.perf_counter() - started
    assert result is not None  # the only process: it leads
    with factory() as session:
        locks = pls_store.lock_count(session)
    engine.dispose()
    decisions_ms = np.array(result.decision_s) * 1000.0 if result.decision_s else np.zeros(1)
    return {"placements": len(result.placed), "seconds": round(elapsed, 3),
            "placements_per_s": round(len(result.placed) / elapsed, 1),
            "p50_ms": round(float(np.percentile(decisions_ms, 50)), 4),
            "p99_ms": round(float(np.percentile(decisions_ms, 99)), 4),
            "conflicts": result.conflicts, "unplaced": tasks - len(result.placed),
            "batch_size": BATCH, "locks": locks}


def run(nodes: int = 10_000, tasks: int = 100_000,
        backends: list[str] | None = None, pls: bool = False) -> dict[str, Any]:
    """One measurement per backend on a fresh database; returns JSON-ready numbers."""
    results: dict[str, Any] = {"nodes": nodes, "tasks": tasks, "pls": pls}
    for backend in backends or ["sqlite", "postgresql"]:
        if backend == "sqlite":
            with tempfile.TemporaryDirectory() as scratch:
                results["sqlite"] = _run_backend(f"sqlite:///{Path(scratch) / 'bench.db'}",
                                                 nodes, tasks, pls)
        elif backend == "postgresql":
            base = os.environ.get("MESH_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
            name = f"mesh_bench_{uuid.uuid4().hex[:10]}"
            url = create_scratch_database(base, name)
            try:
                results["postgresql"] = _run_backend(url, nodes, tasks, pls)
            finally:
                drop_database(base, name)
        else:
            raise ValueError(f"unknown backend {backend!r} (sqlite, postgresql)")
    return results
