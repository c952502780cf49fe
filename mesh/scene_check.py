"""A scene read by the pinned Blender before anything is paid for it.

`mesh job submit` opens the .blend in a Blender process of its own (`python -m
mesh.scene_check FILE`: bpy, the build the agents render with; scripts in the file never
run) and refuses a file Blender cannot open, in Blender's own words, before any upload or
escrow: a text file, a truncated or corrupt .blend, a .blend from a newer Blender. What it
reads (frame range, resolution, engine) goes with the submission, so a frame outside the
scene's range is flagged before it is paid for. A crash of Blender on a hostile file ends the
child, never the command.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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
                     engine=str(answer["engine"]))


def blender_reason(message: str, path: str) -> str:
    """bpy's error without the path it repeats: 'Error: File format is not supported in file
    "P"' -> 'File format is not supported'; 'Loading "P" failed: Failed to read blend file
    'P': Missing DNA block' -> 'Missing DNA block'."""
    reason = message.strip().removeprefix("Error:").strip().splitlines()[0]
    for quote in ('"', "'"):
        reason = reason.replace(f"{quote}{path}{quote}", "")
    reason = re.sub(r"\s+in file\s*$", "", reason)
    return reason.rsplit(": ", 1)[-1].strip()


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
            height=round(render.resolution_y * scale), engine=render.engine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
