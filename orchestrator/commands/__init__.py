"""The `mesh` command groups, one module each (a `typer.Typer` named `app`), registered in
`orchestrator/cli.py`."""
