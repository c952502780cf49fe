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
app.add_typer(bench_app, name="bench")
app.add_typer(orchestrator_app, name="orchestrator")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print only the JSON result.")]


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


@bench_app.command("churn")
def bench_churn(
    trace: Annotated[Path | None, typer.Option(help="CSV: node_id,online_at,offline_at")] = None,
    profiles: Annotated[Path | None, typer.Option(help="CSV: node_id,gpu,vram_gb,...")] = None,
    nodes: int = 1_000,
    days: float = 7.0,
    jobs: int = 2_000,
    seed: int = 1,
    plots: Annotated[Path | None, typer.Option(help="Folder for PNG plots")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Replay churn through the real scheduling code under four policies."""
    from orchestrator.bench import churn

    try:
        result = churn.run(trace=trace, profiles=profiles, nodes=nodes, days=days, jobs=jobs,
                           seed=seed, plots=plots)
    except ValueError as error:  # bad trace/profile files or arguments: say what, no traceback
        typer.echo(f"mesh bench churn: {error}", err=True)
        raise typer.Exit(2) from None
    _emit(result, as_json)


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


@app.command("demo")
def demo() -> None:
    """A local grid on anvil + SQLite running one job end to end."""
    from orchestrator import demo as demo_module

    demo_module.run()


if __name__ == "__main__":
    app()
