"""The `mesh` command groups, one module each (a `typer.Typer` named `app`), registered in
`mesh/cli.py`."""
