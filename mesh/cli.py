"""The `mesh` command line: one command group per module in `mesh/commands/`, each
importing its heavy pieces lazily so that `mesh --help` stays fast and a missing optional part
fails only its own command."""

from __future__ import annotations

import typer

from mesh.commands import (
    agent,
    bench,
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
app.add_typer(disputes.dispute_app, name="dispute")
app.add_typer(disputes.arbiter_app, name="arbiter")


app.command("up")(up.up)


if __name__ == "__main__":
    app()
