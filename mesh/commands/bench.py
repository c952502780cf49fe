"""`mesh bench ...`: the speed, gas and reliability targets, measured on real parts. Each
prints tables, or one JSON document with `--json` (what CI and the records keep)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mesh.commands.common import JsonFlag, emit, user_errors

app = typer.Typer(help="Benchmarks: tables, or one JSON document with --json.",
                  no_args_is_help=True)


def show_result(result: dict[str, Any]) -> None:
    """Scalars in one table, each nested mapping (or list of mappings) in a table of its own."""
    from mesh.commands.common import print_table

    flat = {k: v for k, v in result.items() if not isinstance(v, dict | list)}
    if flat:
        print_table(flat)
    for key, value in result.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            print_table([{"": name, **row} for name, row in value.items()], title=key)
        elif value and (isinstance(value, dict) or (isinstance(value, list)
                        and all(isinstance(v, dict) for v in value))):
            print_table(value, title=key)
        elif isinstance(value, list):
            print_table({key: value})


def _show_gas(result: dict[str, Any]) -> None:
    """Gas per money path against its target, then the per-job breakdown of a settle batch."""
    from mesh.commands.common import print_table

    targets, met = result["targets"], result["met"]
    print_table([{"operation": name, "gas": f"{gas:,}",
                  "target": f"{targets[name]:,}" if name in targets else "",
                  "met": ("yes" if met[name] else "NO") if name in met else ""}
                 for name, gas in result.items() if isinstance(gas, int)], title="gas")
    for name, parts in result["breakdown_per_job"].items():
        print_table({part: f"{gas:,}" for part, gas in parts.items()}, title=name,
                    header=("part", "gas per job"))


@app.command("gas")
def bench_gas(as_json: JsonFlag = False) -> None:
    """Deploy the contracts on a fresh anvil and measure the gas of every money path."""
    from mesh.bench import gas

    with user_errors("bench gas", as_json=as_json):
        result = gas.run()
    emit(result, as_json, _show_gas)


@app.command("reorg")
def bench_reorg(seed: int = 17, rounds: int = 25, margin: int = 6,
                as_json: JsonFlag = False) -> None:
    """Settlements and commitments under injected reorgs on a fresh anvil: events lost,
    duplicated and double payments against the final canonical chain."""
    from mesh.bench import reorg

    with user_errors("bench reorg", as_json=as_json):
        result = reorg.run(seed=seed, rounds=rounds, margin=margin)
    emit(result, as_json, show_result)


@app.command("schedule")
def bench_schedule(
    nodes: int = 10_000,
    tasks: int = 100_000,
    backends: Annotated[
        str, typer.Option(help="Comma-separated: sqlite,postgresql")
    ] = "sqlite,postgresql",
    pls: Annotated[bool, typer.Option(
        help="Place through the PLS gate (engine ranking, collateral locks)")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Placements committed to the DB per second, with p50/p99 decision latency."""
    from mesh.bench import schedule

    with user_errors("bench schedule", as_json=as_json):
        result = schedule.run(nodes=nodes, tasks=tasks, backends=backends.split(","), pls=pls)
    emit(result, as_json, show_result)


@app.command("ingest")
def bench_ingest(nodes: int = 10_000, seconds: float = 10.0, as_json: JsonFlag = False) -> None:
    """Signed heartbeats per second through real HTTP on loopback."""
    from mesh.bench import ingest

    with user_errors("bench ingest", as_json=as_json):
        result = ingest.run(nodes=nodes, seconds=seconds)
    emit(result, as_json, show_result)


@app.command("replicas")
def bench_replicas(samples: int = 40, postgres_url: str | None = None,
                   as_json: JsonFlag = False) -> None:
    """How long an observation one orchestrator replica received takes to reach another's
    scores (two processes on a fresh PostgreSQL database; default MESH_TEST_POSTGRES_URL)."""
    from mesh.bench import replicas

    with user_errors("bench replicas", as_json=as_json):
        result = replicas.run(postgres_url=postgres_url, samples=samples)
    emit(result, as_json, show_result)


@app.command("scaleout")
def bench_scaleout(
    replicas: Annotated[int, typer.Option(help="Orchestrator processes (at least 2).")] = 2,
    nodes: Annotated[int, typer.Option(help="Simulated nodes, each request to a random "
                                       "replica.")] = 40,
    jobs: int = 20,
    tasks_per_job: int = 500,
    kill_at: Annotated[float, typer.Option(help="Share of the tasks done when the first "
                                           "replica is SIGKILLed.")] = 0.5,
    restart: Annotated[bool, typer.Option(help="Start the killed replica again.")] = True,
    seed: int = 1,
    pls: Annotated[bool, typer.Option(help="Place through the PLS gate (stake, RS, "
                                      "collateral on chain), as the service runs.")] = True,
    postgres_url: str | None = None,
    as_json: JsonFlag = False,
) -> None:
    """Replicas on one fresh PostgreSQL database and anvil under jobs x tasks-per-job
    placements, one replica killed mid-way: double leases, lost tasks, leader and sender
    overlaps, takeover time, then the history checker; exits 1 on any violation."""
    from mesh.bench import scaleout

    with user_errors("bench scaleout", as_json=as_json):
        result = scaleout.run(postgres_url=postgres_url, replicas=replicas, nodes=nodes,
                              jobs=jobs, tasks_per_job=tasks_per_job, kill_at=kill_at,
                              restart=restart, seed=seed, pls=pls)
    emit(result, as_json, show_result)
    if scaleout.failed(result):
        raise typer.Exit(1)


@app.command("churn")
def bench_churn(
    trace: Annotated[Path | None, typer.Option(help="CSV: node_id,online_at,offline_at")] = None,
    profiles: Annotated[Path | None, typer.Option(help="CSV: node_id,gpu,vram_gb,...")] = None,
    nodes: int = 1_000,
    days: float = 7.0,
    jobs: int = 2_000,
    seed: int = 1,
    population: Annotated[str, typer.Option(
        help="Generated hosts (without --trace): seti, combos, homes, homes-short, churn-mix"
    )] = "seti",
    plots: Annotated[Path | None, typer.Option(help="Folder for PNG plots")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Replay churn through the real scheduling code under four policies."""
    from mesh.bench import churn

    # bad trace/profile files or arguments: one line
    with user_errors("bench churn", as_json=as_json):
        result = churn.run(trace=trace, profiles=profiles, nodes=nodes, days=days, jobs=jobs,
                           seed=seed, plots=plots, population=population)
    emit(result, as_json, show_result)


@app.command("render")
def bench_render(
    frames: int = 8,
    samples: int = 256,
    chunk_samples: int = 64,
    width: int = 160,
    height: int = 120,
    agents: Annotated[int, typer.Option(help="Local agents, one render thread each.")] = 2,
    as_json: JsonFlag = False,
) -> None:
    """The sample scene rendered directly with bpy and through the grid (anvil, the service,
    local agents), then a kill mid-frame: overhead, pixel identity, rework."""
    from mesh.bench import render

    with user_errors("bench render", as_json=as_json):
        result = render.run(frames=frames, samples=samples, chunk_samples=chunk_samples,
                            resolution=(width, height), agents=agents)
    emit(result, as_json, show_result)


@app.command("sandbox")
def bench_sandbox(
    pairs: Annotated[int, typer.Option(help="Alternating direct/sandboxed render pairs.")] = 5,
    frames: int = 2,
    samples: int = 64,
    width: int = 160,
    height: int = 120,
    threads: int = 2,
    as_json: JsonFlag = False,
) -> None:
    """The same bpy render of the sample scene run directly and inside the agent's sandbox:
    `sandbox_overhead` is the median ratio of the pairs' wall times (target <= 1.03),
    `sandbox_cpu_overhead` of their CPU times (steady on a loaded machine)."""
    from mesh.bench import sandbox

    with user_errors("bench sandbox", as_json=as_json):
        result = sandbox.run(pairs=pairs, frames=frames, samples=samples,
                             resolution=(width, height), threads=threads)
    emit(result, as_json)


@app.command("verify")
def bench_verify(
    frames: int = 6,
    samples: int = 32,
    chunk_samples: int = 16,
    width: int = 128,
    height: int = 96,
    tasks: Annotated[int, typer.Option(help="Tasks a provider delivers in one epoch.")] = 300,
    trials: Annotated[int, typer.Option(help="Simulated epochs per policy and cheater.")] = 2000,
    policy: Annotated[list[str] | None, typer.Option(
        help="fixed-N%, adaptive-F% or adaptive; repeat for several (default: a set).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Sampling policies against cheaters over real renders of the sample scene: detection,
    overhead (checker render s / useful render s), false rejections."""
    from mesh.bench import verify
    from orchestrator.domain.verification import SamplingPolicy

    names = tuple(policy or verify.POLICIES)
    with user_errors("bench verify", as_json=as_json):
        for name in names:
            SamplingPolicy.parse(name)  # an unknown policy: one line naming the known ones
        result = verify.run(frames=frames, samples=samples, chunk_samples=chunk_samples,
                            resolution=(width, height), tasks=tasks, trials=trials,
                            policies=names)
    emit(result, as_json, show_result)


@app.command("chaos")
def bench_chaos(
    seed: int = 1,
    kills: Annotated[int, typer.Option(help="Orchestrator SIGKILLs (one a round).")] = 200,
    jobs: Annotated[int, typer.Option(help="Command jobs submitted between the kills.")] = 20,
    agents: Annotated[int, typer.Option(help="Local agents; one of them is killed at times.")] = 3,
    postgres: Annotated[bool, typer.Option(
        "--postgres", help="Run the service on a private PostgreSQL server (the machine's "
                           "server binaries) and restart it as one more fault.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The local stack under seeded faults (orchestrator and agent kills, RPC outages and
    slowdowns, agent partitions, chain reorgs, PostgreSQL restarts), then the history
    checker; exits 1 on any violation."""
    from mesh.bench import chaos

    with user_errors("bench chaos", as_json=as_json):
        result = chaos.run(seed=seed, kills=kills, jobs=jobs, agents=agents, postgres=postgres)
    emit(result, as_json, show_result)
    if any(result["violations"].values()) or result["jobs_unfinished"]:
        raise typer.Exit(1)
