"""A scene read by the pinned Blender before anything is paid for it.

`mesh job submit` opens the .blend in a Blender process of its own (`python -m
mesh.scene_check FILE`: bpy, the build the agents render with; scripts in the file never
run) and refuses a file Blender cannot open, in Blender's own words, before any upload or
escrow: a text file, a truncated or corrupt .blend, a .blend from a newer Blender. What it
reads (frame range, resolution, engine) goes with the submission, so a frame outside the
scene's range is flagged before it is paid for. A crash of Blender on a hostile file ends the
child, never the command.

The same child lists every file the scene reads besides itself, through Blender's own
dependency walk (`bpy.utils.blend_paths` over the file and its linked libraries, recursively),
with UDIM tiles and image sequences expanded to their files; packed files and Blender's own
bundled assets are left out. `mesh.pack` packs them. (The Blender Asset Tracer 1.23 reads 5.0
files but missed the texture of a material linked from a library: Blender itself is the
tracer here.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARK = "MESH-SCENE "  # prefix of the one line the parent reads; Blender's own log goes around
CHECK_TIMEOUT_S = 180.0


class SceneUnreadable(ValueError):
    """Blender could not open the file; the message says why, in Blender's words."""


@dataclass(frozen=True, slots=True)
class SceneInfo:
    blender: str  # the version that read it
    frame_start: int
    frame_end: int
    resolution: tuple[int, int]  # at the file's resolution percentage
    engine: str
    files: tuple[Path, ...] = ()  # every file it reads besides itself, absolute, sorted

    def as_json(self) -> dict[str, object]:
        return {"blender": self.blender, "frames": [self.frame_start, self.frame_end],
                "resolution": list(self.resolution), "engine": self.engine}


def read_scene(path: Path, *, timeout_s: float = CHECK_TIMEOUT_S) -> SceneInfo:
    """What the pinned Blender reads from the scene at `path`; `SceneUnreadable` when it
    cannot open it."""
    try:
        done = subprocess.run([sys.executable, "-m", "mesh.scene_check", str(path.resolve())],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SceneUnreadable(f"Blender did not open it within {timeout_s:.0f} s") from None
    answers = [json.loads(line[len(MARK):]) for line in done.stdout.splitlines()
               if line.startswith(MARK)]
    if not answers:
        raise SceneUnreadable(f"Blender stopped while opening it (exit {done.returncode})")
    answer = answers[-1]
    if "error" in answer:
        raise SceneUnreadable(str(answer["error"]))
    return SceneInfo(blender=answer["blender"], frame_start=int(answer["frame_start"]),
                     frame_end=int(answer["frame_end"]),
                     resolution=(int(answer["width"]), int(answer["height"])),
                     engine=str(answer["engine"]),
                     files=tuple(Path(name) for name in answer.get("files", ())))


def blender_reason(message: str, path: str) -> str:
    """bpy's error without the path it repeats: 'Error: File format is not supported in file
    "P"' -> 'File format is not supported'; 'Loading "P" failed: Failed to read blend file
    'P': Missing DNA block' -> 'Missing DNA block'."""
    reason = message.strip().removeprefix("Error:").strip().splitlines()[0]
    for quote in ('"', "'"):
        reason = reason.replace(f"{quote}{path}{quote}", "")
    reason = re.sub(r"\s+in file\s*$", "", reason)
    return reason.rsplit(": ", 1)[-1].strip()


def tile_path(path: str, number: int) -> str:
    """The file of UDIM tile `number` (1001, 1002...) of an image whose path holds Blender's
    `<UDIM>` or `<UVTILE>` token."""
    u, v = (number - 1001) % 10 + 1, (number - 1001) // 10 + 1
    return path.replace("<UDIM>", str(number)).replace("<UVTILE>", f"u{u}_v{v}")


def sequence_files(path: str) -> list[str]:
    """The files of the image sequence whose one frame is `path`: those beside it whose name
    differs only in the last run of digits before the extension (as Blender numbers frames)."""
    folder, name = os.path.split(path)
    stem, extension = os.path.splitext(name)
    numbered = re.fullmatch(r"(.*?)(\d+)(\D*)", stem)
    if numbered is None or not os.path.isdir(folder):
        return [path]
    head, _, tail = numbered.groups()
    frame = re.compile(re.escape(head) + r"\d+" + re.escape(tail + extension))
    return sorted(os.path.join(folder, other) for other in os.listdir(folder)
                  if frame.fullmatch(other)) or [path]


def _dependencies(bpy: Any) -> list[str]:
    """Every file the open scene reads besides itself (see the module), absolute."""
    bundled = os.path.realpath(bpy.utils.resource_path("LOCAL")) + os.sep
    found = set(bpy.utils.blend_paths(absolute=True, packed=False, local=False))
    for image in bpy.data.images:
        if image.packed_file is not None or image.source not in ("TILED", "SEQUENCE"):
            continue
        path = bpy.path.abspath(image.filepath, library=image.library)
        found.discard(path)
        found.update([tile_path(path, tile.number) for tile in image.tiles]
                     if image.source == "TILED" else sequence_files(path))
    return sorted({os.path.normpath(path) for path in found
                   if path and not os.path.realpath(path).startswith(bundled)})


def _report(**fields: object) -> None:
    sys.stdout.write(MARK + json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """The child: open `argv[0]` without running its scripts and report one line."""
    import bpy

    bpy.context.preferences.filepaths.use_scripts_auto_execute = False
    try:
        bpy.ops.wm.open_mainfile(filepath=argv[0], load_ui=False, use_scripts=False)
    except RuntimeError as exc:
        _report(error=blender_reason(str(exc), argv[0]))
        return 1
    scene = bpy.context.scene
    render = scene.render
    scale = render.resolution_percentage / 100
    _report(blender=bpy.app.version_string, frame_start=scene.frame_start,
            frame_end=scene.frame_end, width=round(render.resolution_x * scale),
            height=round(render.resolution_y * scale), engine=render.engine,
            files=_dependencies(bpy))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
