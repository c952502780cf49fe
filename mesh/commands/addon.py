"""`mesh addon build`: the Blender add-on's zip (`mesh.addon`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mesh.commands.common import JsonFlag, emit, user_errors

app = typer.Typer(help="The Blender add-on: quote, submit and follow jobs from Blender.",
                  no_args_is_help=True)


@app.command("build")
def build(out: Annotated[Path, typer.Option(
              "--out", help="The zip to write, or a folder to write it in.")] = Path("."),
          as_json: JsonFlag = False) -> None:
    """Build the add-on's zip, to install in Blender 4.2+ (Edit > Preferences > Get
    Extensions > Install from Disk)."""
    from mesh.addon import build as build_zip
    from mesh.addon import manifest

    with user_errors("addon build", as_json=as_json):
        path = build_zip(out)
    emit({"zip": str(path), "version": manifest()["version"]}, as_json,
         lambda r: typer.echo(f"{r['zip']}: the DePIN Mesh add-on {r['version']}; install it "
                              "in Blender from Edit > Preferences > Get Extensions > Install "
                              "from Disk"))
