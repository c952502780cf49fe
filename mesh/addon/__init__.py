"""The Blender add-on (`mesh/addon/blender/`, a Blender 4.2+ extension) and the zip that
installs it: Blender's Preferences > Get Extensions > Install from Disk, or
`blender --command extension install-file -r user_default mesh_blender.zip`."""

from __future__ import annotations

import tomllib
import zipfile
from pathlib import Path

SOURCE = Path(__file__).parent / "blender"
FILES = ("blender_manifest.toml", "__init__.py")  # the add-on, at the zip's root


def manifest() -> dict[str, object]:
    """The add-on's `blender_manifest.toml`."""
    with (SOURCE / "blender_manifest.toml").open("rb") as handle:
        return tomllib.load(handle)


def build(out: Path) -> Path:
    """Write the add-on's zip to `out` (a folder: `<id>-<version>.zip` in it) and return its
    path."""
    if out.is_dir():
        found = manifest()
        out = out / f"{found['id']}-{found['version']}.zip"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in FILES:
            archive.write(SOURCE / name, name)
    return out
