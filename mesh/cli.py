"""The `mesh` command line: one command group per module in `mesh/commands/`, each
importing its heavy pieces lazily so that `mesh --help` stays fast and a missing optional part
fails only its own command: run in a smaller install (a provider's agent-only one), a command
that needs the tools says in one line what to install and exits 2 (`main`)."""

from __future__ import annotations

import sys
from typing import Any

import typer

from mesh.commands import (
    addon,
    agent,
    bench,
    common,
    disputes,
    jobs,
    nodes,
    orchestrator,
    provider,
    tokens,
    up,
    wallet,
)

# Plain (click) help: typer's rich help prints `<bool>` after every flag as if it took a value.
app = typer.Typer(help="DePIN Mesh: a render grid kept reliable by Predictive Latency Staking.",
                  no_args_is_help=True, rich_markup_mode=None)
app.add_typer(wallet.app, name="wallet")
app.add_typer(provider.app, name="provider")
app.add_typer(jobs.app, name="job")
app.add_typer(nodes.app, name="nodes")
app.add_typer(tokens.app, name="tokens")
app.add_typer(agent.app, name="agent")
app.add_typer(orchestrator.app, name="orchestrator")
app.add_typer(bench.app, name="bench")
app.add_typer(addon.app, name="addon")
app.add_typer(disputes.dispute_app, name="dispute")
app.add_typer(disputes.arbiter_app, name="arbiter")


app.command("up")(up.up)


def main() -> None:
    """The `mesh` console script: the app, with a module that this install left out turned
    into one line naming the install that brings it (`common.missing_install`)."""
    try:
        app()
    except ModuleNotFoundError as error:
        hint = common.missing_install(error)
        if hint is None:
            raise
        typer.echo(f"{command_path(sys.argv[1:])}: {hint}", err=True)
        sys.exit(2)


def command_path(argv: list[str]) -> str:
    """The command the arguments name (`mesh provider stake`), as far as the command tree goes
    (typer's own click: a group has `commands`)."""
    command: Any = typer.main.get_command(app)
    path = ["mesh"]
    for arg in argv:
        if arg not in getattr(command, "commands", {}):
            break
        path.append(arg)
        command = command.commands[arg]
    return " ".join(path)


if __name__ == "__main__":
    main()
