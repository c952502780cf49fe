"""`mesh up`: a local grid of real processes left running until Ctrl-C: anvil on a free
loopback port with the contracts deployed, the orchestrator on SQLite, N `mesh agent run`
processes each funded and staked with its own wallet. `mesh up --demo` (what `make demo`
runs) plays the demo on such a grid instead (`mesh.demo`) and exits, or with `--stay`
keeps it serving for a look at the dashboard. One command, not a group: `mesh/cli.py`
registers `up` itself."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def up(
    demo: Annotated[bool, typer.Option(
        "--demo", help="Play the demo (a kill mid-frame, a cheater caught and slashed, "
        "settlement, download) and exit.")] = False,
    stay: Annotated[bool, typer.Option(
        "--stay", help="With --demo: once it has passed, keep the grid serving (the dashboard, "
        "the `mesh` commands) until Ctrl-C.")] = False,
    providers: Annotated[int, typer.Option(
        min=1, help="Provider agents, each with its own wallet and stake.")] = 4,
    out: Annotated[Path | None, typer.Option(
        help="Folder for state and logs (default .mesh/up; with --demo .mesh/demo, where "
        "the frames and summary.json go).")] = None,
) -> None:
    """A local grid: anvil, contracts, orchestrator (SQLite), N agents; Ctrl-C stops it all."""
    from mesh.demo.run import OUT, run, serve
    from mesh.demo.steps import DemoError
    from mesh.localgrid import FolderInUse

    if stay and not demo:
        typer.echo("mesh up: --stay goes with --demo (plain `mesh up` stays up until Ctrl-C "
                   "already)", err=True)
        raise typer.Exit(2)
    try:
        if demo:
            run(providers=providers, out=out or OUT, stay=stay)
        else:
            serve(providers=providers, out=out or Path(".mesh/up"))
    except (DemoError, FolderInUse) as error:
        typer.echo(f"mesh up: {error}", err=True)
        raise typer.Exit(2) from None
