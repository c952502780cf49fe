"""The `mesh` command line. Subcommands import their modules lazily so that
`mesh --help` stays fast and a missing optional piece fails only its own command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(help="DePIN Mesh: a render grid kept reliable by Predictive Latency Staking.",
                  no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks; each prints one JSON document.", no_args_is_help=True)
orchestrator_app = typer.Typer(help="The orchestrator service.", no_args_is_help=True)
agent_app = typer.Typer(help="The provider agent.", no_args_is_help=True)
job_app = typer.Typer(help="A customer's jobs.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
app.add_typer(orchestrator_app, name="orchestrator")
app.add_typer(agent_app, name="agent")
app.add_typer(job_app, name="job")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print only the JSON result.")]
OrchestratorUrl = Annotated[str, typer.Option("--orchestrator", help="The service's base URL.")]
KeystoreFile = Annotated[Path, typer.Option("--keystore", help="eth-account keystore (JSON).")]
PasswordFile = Annotated[Path | None, typer.Option(
    "--password-file", help="File holding the keystore password (else $MESH_AGENT_PASSWORD, "
    "else a prompt).")]
ChainId = Annotated[int, typer.Option(help="Chain id the orchestrator binds signatures to.")]
OrchestratorId = Annotated[str, typer.Option(help="The orchestrator's id (EIP-712 salt).")]


def _fail(command: str, error: Exception) -> typer.Exit:
    typer.echo(f"mesh {command}: {error}", err=True)
    return typer.Exit(2)


def _account(keystore: Path, password_file: Path | None) -> Any:
    from agent import keystore as keys

    try:
        secret = keys.password(password_file=password_file, prompt=lambda: typer.prompt(
            "keystore password", hide_input=True))
        return keys.load(keystore, secret)
    except keys.KeystoreError as error:
        raise _fail("agent", error) from None


def _emit(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    from rich.console import Console
    from rich.pretty import Pretty

    Console().print(Pretty(result))


@bench_app.command("gas")
def bench_gas(as_json: JsonFlag = False) -> None:
    """Deploy the contracts on a fresh anvil and measure the gas of every money path."""
    from orchestrator.bench import gas

    _emit(gas.run(), as_json)


@bench_app.command("schedule")
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
    from orchestrator.bench import schedule

    _emit(schedule.run(nodes=nodes, tasks=tasks, backends=backends.split(","), pls=pls),
          as_json)


@bench_app.command("ingest")
def bench_ingest(nodes: int = 10_000, seconds: float = 10.0, as_json: JsonFlag = False) -> None:
    """Signed heartbeats per second through real HTTP on loopback."""
    from orchestrator.bench import ingest

    _emit(ingest.run(nodes=nodes, seconds=seconds), as_json)


@bench_app.command("replicas")
def bench_replicas(samples: int = 40, postgres_url: str | None = None,
                   as_json: JsonFlag = False) -> None:
    """How long an observation one orchestrator replica received takes to reach another's
    scores (two processes on a fresh PostgreSQL database; default MESH_TEST_POSTGRES_URL)."""
    from orchestrator.bench import replicas

    _emit(replicas.run(postgres_url=postgres_url, samples=samples), as_json)


@bench_app.command("churn")
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
    from orchestrator.bench import churn

    try:
        result = churn.run(trace=trace, profiles=profiles, nodes=nodes, days=days, jobs=jobs,
                           seed=seed, plots=plots, population=population)
    except ValueError as error:  # bad trace/profile files or arguments: say what, no traceback
        typer.echo(f"mesh bench churn: {error}", err=True)
        raise typer.Exit(2) from None
    _emit(result, as_json)


@bench_app.command("render")
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
    from orchestrator.bench import render

    _emit(render.run(frames=frames, samples=samples, chunk_samples=chunk_samples,
                     resolution=(width, height), agents=agents), as_json)


@bench_app.command("verify")
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
    from orchestrator.bench import verify
    from orchestrator.domain.verification import SamplingPolicy

    names = tuple(policy or verify.POLICIES)
    try:
        for name in names:
            SamplingPolicy.parse(name)
    except ValueError as error:
        typer.echo(f"mesh bench verify: {error}", err=True)
        raise typer.Exit(2) from None
    _emit(verify.run(frames=frames, samples=samples, chunk_samples=chunk_samples,
                     resolution=(width, height), tasks=tasks, trials=trials, policies=names),
          as_json)


@orchestrator_app.command("serve")
def serve(
    host: str = "127.0.0.1",
    port: int = 8400,
    access_log: Annotated[bool, typer.Option(help="One log line per request.")] = True,
    log_level: str = "info",
) -> None:
    """Run the orchestrator API (uvicorn)."""
    import uvicorn

    uvicorn.run("orchestrator.main:app", host=host, port=port, access_log=access_log,
                log_level=log_level)


@agent_app.command("keygen")
def agent_keygen(keystore: KeystoreFile, password_file: PasswordFile = None) -> None:
    """Create a new encrypted keystore and print its address."""
    from agent import keystore as keys

    try:
        secret = keys.password(password_file=password_file, prompt=lambda: typer.prompt(
            "new keystore password", hide_input=True, confirmation_prompt=True))
        typer.echo(keys.create(keystore, secret))
    except keys.KeystoreError as error:
        raise _fail("agent keygen", error) from None


@agent_app.command("run")
def agent_run(
    orchestrator: OrchestratorUrl,
    keystore: KeystoreFile,
    password_file: PasswordFile = None,
    node_id: Annotated[str | None, typer.Option(help="Default: node-<address prefix>.")] = None,
    state_dir: Annotated[Path, typer.Option(help="Spool, blob cache, task dirs.")] = Path(
        ".mesh-agent"),
    region: str = "local",
    price: Annotated[int, typer.Option(help="Asking price per GPU hour (token units).")] = 100,
    threads: Annotated[int, typer.Option(help="Render threads (default: every core).")] = 0,
    memory_mb: Annotated[int, typer.Option(help="Address-space limit of a task.")] = 4096,
    cpu_s: Annotated[int, typer.Option(help="CPU-time limit of a task.")] = 3600,
    wall_s: Annotated[float, typer.Option(help="Wall-clock limit of a task.")] = 3600.0,
    output_mb: Annotated[int, typer.Option(help="Output size limit of a task.")] = 2048,
    heartbeat_s: float = 1.0,
    poll_s: float = 1.0,
    popw_class: Annotated[str | None, typer.Option(help="Answer a PoPW handshake.")] = None,
    exit_when_idle_s: Annotated[float | None, typer.Option(
        help="Leave after this long without work.")] = None,
    cpu_kernel: Annotated[str | None, typer.Option(
        help="sse42: render without Cycles' AVX2 kernel (results say which kernel).")] = None,
    chain_id: ChainId = 31337,
    orchestrator_id: OrchestratorId = "depin-mesh-orchestrator",
) -> None:
    """Serve a provider's machine: register, heartbeat, render leases in the sandbox."""
    import logging
    import os

    from agent.client import ApiCallError
    from agent.daemon import Agent, AgentConfig
    from agent.sandbox import Limits

    account = _account(keystore, password_file)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    mb = 1 << 20
    config = AgentConfig(
        orchestrator=orchestrator, node_id=node_id or f"node-{account.address[2:12].lower()}",
        state_dir=state_dir, chain_id=chain_id, orchestrator_id=orchestrator_id, region=region,
        price_per_gpu_hour=price, threads=threads or os.cpu_count() or 1,
        limits=Limits(cpu_s=cpu_s, memory_bytes=memory_mb * mb, wall_s=wall_s,
                      output_bytes=output_mb * mb, file_bytes=output_mb * mb),
        heartbeat_s=heartbeat_s, poll_s=poll_s, popw_class=popw_class,
        exit_when_idle_s=exit_when_idle_s, cpu_kernel=cpu_kernel)
    if cpu_kernel not in (None, "sse42"):
        raise _fail("agent run", ValueError(f"--cpu-kernel {cpu_kernel}: only sse42 is known"))
    try:
        Agent(config, account).run()
    except (ApiCallError, OSError) as error:  # e.g. a registration the service refuses
        raise _fail("agent run", error) from None


@job_app.command("download")
def job_download(
    job: Annotated[str, typer.Argument(help="The job id (0x + 64 hex).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the frames.")],
    orchestrator: OrchestratorUrl,
    keystore: KeystoreFile,
    password_file: PasswordFile = None,
    chain_id: ChainId = 31337,
    orchestrator_id: OrchestratorId = "depin-mesh-orchestrator",
) -> None:
    """Download a job's results, checking every sha256 (signed: the job's customer only)."""
    import httpx

    from agent.client import ApiCallError, Wallet
    from agent.customer import download

    account = _account(keystore, password_file)
    wallet = Wallet(orchestrator, bytes(account.key), str(account.address), chain_id=chain_id,
                    orchestrator_id=orchestrator_id)
    try:
        done = download(wallet, job, out)
    except (ApiCallError, httpx.HTTPError, OSError) as error:
        raise _fail("job download", error) from None
    finally:
        wallet.close()
    typer.echo(f"{len(done.files)} files checked and written to {out}"
               + (f", {len(done.frames)} frames assembled from tiles" if done.frames else "")
               + ("" if done.complete else "; the job is not finished yet"))


@app.command("demo")
def demo() -> None:
    """A local grid on anvil + SQLite running one job end to end."""
    from orchestrator import demo as demo_module

    demo_module.run()


if __name__ == "__main__":
    app()
