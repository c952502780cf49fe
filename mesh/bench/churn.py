"""`mesh bench churn`: the same trace, jobs and seed replayed under four placement policies.

random: any matching node. uptime: what uptime staking rewards (observed uptime share, then
stake). pls: DePIN Mesh as built. oracle: knows every future departure (upper bound).
random and uptime share the failure detector, verification and resume-from-checkpoint with
pls but checkpoint at a fixed 10-minute interval, as a typical grid does, and revoke a lease
when the detector has called its node dead for the lone grace every policy gets (the service's
sweep: `LeaseHold.lone_grace_s`; pls may hold it longer through a silence its peers share)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from mesh.simulation.engine import FraudSlashing, PolicyResult, Simulation
from mesh.simulation.jobs import generate_jobs
from mesh.simulation.metrics import classify_nodes, completion_times, summarise
from mesh.simulation.models import GPU_CLASSES, POPULATIONS, NodeProfile, population_models
from mesh.simulation.models import generate_profiles as draw_profiles
from mesh.simulation.pls_driver import PlsDriver, handshake_tier, provider_address
from mesh.simulation.policies import OraclePolicy, Policy, RandomPolicy, UptimePolicy
from mesh.simulation.traces import (
    Trace,
    TraceError,
    generate_trace,
    parse_profiles_csv,
    parse_trace_csv,
)
from mesh.simulation.world import World
from orchestrator.domain.pls import LeaseHold
from orchestrator.domain.popw import PopwConfig
from orchestrator.domain.types import NodeSpec

DAY_S = 86_400.0
POLICY_ORDER = ("random", "uptime", "pls", "oracle")


def _streams(seed: int) -> dict[str, np.random.Generator]:
    """Independent seeded streams, so adding a draw in one place never shifts another."""
    names = ("trace", "profiles", "world", "jobs", *POLICY_ORDER, "pls-telemetry")
    children = np.random.SeedSequence(seed).spawn(len(names))
    return {name: np.random.default_rng(child) for name, child in zip(names, children, strict=True)}


def _node_specs(profiles: list[NodeProfile]) -> list[NodeSpec]:
    popw = PopwConfig()
    return [
        NodeSpec(node_id=p.node_id, provider=provider_address(i), gpu_model=p.gpu,
                 vram_gb=p.vram_gb, compute_capability=8.6, region=p.region,
                 price_per_gpu_hour=p.price_per_gpu_hour, slots=1, tier=handshake_tier(p, popw))
        for i, p in enumerate(profiles)
    ]


def build_inputs(trace_path: Path | None, profiles_path: Path | None, nodes: int,
                 horizon_s: float, streams: dict[str, np.random.Generator],
                 population: str = "seti") -> tuple[Trace, list[NodeProfile]]:
    """The trace (read, or generated from the published models for `population`, one of
    `POPULATIONS`) and one profile per node."""
    if trace_path is not None:
        trace = parse_trace_csv(trace_path)
    else:
        if nodes < 1:
            raise TraceError("--nodes must be at least 1")
        if population not in POPULATIONS:
            raise TraceError(f"unknown --population {population!r}; known: "
                             f"{', '.join(sorted(POPULATIONS))}")
        chosen = POPULATIONS[population]
        node_ids = [f"node-{i:05d}" for i in range(nodes)]
        trace, _ = generate_trace(population_models(), chosen.mix, node_ids,
                                  streams["trace"], horizon_s, chosen)
    node_ids = sorted(trace)
    if profiles_path is not None:
        given = parse_profiles_csv(profiles_path, streams["profiles"])
        missing = [n for n in node_ids if n not in given]
        if missing:
            raise TraceError(f"{profiles_path}: no profile for {len(missing)} trace node(s), "
                             f"e.g. {missing[:3]}")
        profiles = [given[n] for n in node_ids]
    else:
        drawn = draw_profiles(streams["profiles"], node_ids)
        profiles = [drawn[n] for n in node_ids]
    return trace, profiles


def run(trace: Path | None = None, profiles: Path | None = None, nodes: int = 1_000,
        days: float = 7.0, jobs: int = 2_000, seed: int = 1, plots: Path | None = None,
        population: str = "seti") -> dict[str, Any]:
    if days <= 0:
        raise TraceError("--days must be positive")
    if jobs < 0:
        raise TraceError("--jobs must not be negative")
    started = time.perf_counter()
    horizon_s = days * DAY_S
    streams = _streams(seed)
    node_trace, node_profiles = build_inputs(trace, profiles, nodes, horizon_s, streams,
                                               population)
    world = World(node_trace, {p.node_id: p for p in node_profiles}, horizon_s, streams["world"])
    job_list = generate_jobs(streams["jobs"], jobs, horizon_s)
    specs = _node_specs(node_profiles)
    classes = classify_nodes(node_trace, node_profiles, horizon_s)
    timelines = [world.timelines[p.node_id] for p in node_profiles]

    reports: dict[str, dict[str, Any]] = {}
    results: list[PolicyResult] = []
    completion: dict[str, np.ndarray] = {}
    for name in POLICY_ORDER:
        rng = streams[name]
        extra: dict[str, Any] = {}
        policy: Policy
        observers: list[Any] = []
        if name == "random":
            policy = RandomPolicy(rng)
            observers = [FraudSlashing()]
        elif name == "uptime":
            policy = UptimePolicy([p.stake for p in node_profiles])
            observers = [FraudSlashing()]
        elif name == "pls":
            driver = PlsDriver(node_profiles, specs, streams["pls-telemetry"], seed)
            policy, observers = driver, [driver]
        else:
            policy = OraclePolicy(timelines, [p.effective_speed for p in node_profiles],
                                  [p.cheater for p in node_profiles])
        result = Simulation(world, node_profiles, specs, job_list, policy, rng, observers,
                            lone_grace_s=LeaseHold().lone_grace_s).run()
        if isinstance(policy, PlsDriver):
            extra["slashes_by_reason"] = dict(policy.slashes_by_reason)
            extra["prior_refits"] = policy.prior_refits
        reports[name] = summarise(result, job_list, horizon_s, node_profiles, classes, extra)
        results.append(result)
        completion[name] = completion_times(result, job_list, horizon_s)

    oracle_waste = reports["oracle"]["wasted_gpu_s"]
    for name in POLICY_ORDER:
        reports[name]["waste_vs_oracle"] = (round(reports[name]["wasted_gpu_s"] / oracle_waste, 3)
                                            if oracle_waste > 0 else None)
    report: dict[str, Any] = {
        "policies": reports,
        "population": population if trace is None else None,
        "nodes": len(node_profiles),
        "days": days,
        "seed": seed,
        "jobs": len(job_list),
        "tasks": sum(len(j.task_work_s) for j in job_list),
        "world": {
            "detector_false_departures": world.false_departures,
            "outages": len(world.outages),
            "gpu_classes": sorted(GPU_CLASSES),
            "cheaters": sum(p.cheater for p in node_profiles),
        },
    }
    if plots is not None:
        from mesh.simulation.plots import write_plots

        report["plots"] = [str(p) for p in write_plots(plots, reports, completion, results)]
    report["wall_s"] = round(time.perf_counter() - started, 2)
    return report
