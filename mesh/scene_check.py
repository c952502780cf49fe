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
with UDIM tiles and image, volume-cache and movie-clip sequences expanded to their files;
packed files and Blender's own bundled assets are left out. `mesh.pack` packs them, those
outside the .blend's folder under `protocol.packs.OUTSIDE` by their absolute path; so that
Blender on a provider finds them there, the child saves a copy of the .blend whose own paths
to them (absolute, or `//../`) lead to
`//OUTSIDE/...` instead, and that copy is the scene packed and signed: the .blend and manifest
in the spec are exactly what renders, with no remapping at render time. Paths a linked library
holds are the library's own and stay (`SceneInfo.unmapped`). (The Blender Asset Tracer 1.23
reads 5.0 files but missed the texture of a material linked from a library: Blender itself is
the tracer here.)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.packs import outside_name

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
    # A copy whose own paths outside its folder lead into the pack (`read_scene`'s
    # `remap_dir`), when it has any: the .blend to pack in its place.
    remapped: Path | None = None
    # Files outside its folder the scene reads through a linked library that names them
    # (the library's paths are its own): a provider does not find them.
    unmapped: tuple[Path, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {"blender": self.blender, "frames": [self.frame_start, self.frame_end],
                "resolution": list(self.resolution), "engine": self.engine}


def read_scene(path: Path, *, remap_dir: Path | None = None,
               timeout_s: float = CHECK_TIMEOUT_S, python: str | None = None) -> SceneInfo:
    """What the pinned Blender reads from the scene at `path`; `SceneUnreadable` when it
    cannot open it. With `remap_dir`, a scene that names files outside its folder is saved
    in that folder with those paths leading into its pack (`SceneInfo.remapped`), named by
    the scene's place and sha256. Blender's saves of one scene differ in a few bytes, so the
    copy made first for a scene is kept and used again: the same scene submitted twice
    packs the same .blend, and is not sent twice. `python`: the interpreter that has bpy and
    `mesh` (default: this one; inside Blender's own Python, the one of the add-on's
    environment)."""
    command = [python or sys.executable, "-m", "mesh.scene_check", str(path.resolve())]
    kept = fresh = None
    if remap_dir is not None:
        from protocol.client import sha256_file

        remap_dir.mkdir(parents=True, exist_ok=True)
        key = hashlib.sha256(f"{path.resolve()}\0{sha256_file(path)}".encode()).hexdigest()
        kept = remap_dir.resolve() / f"{key}.blend"
        fresh = kept.with_name(f".{key}.{os.getpid()}.blend")
        command.append(str(fresh))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        raise SceneUnreadable(f"Blender did not open it within {timeout_s:.0f} s") from None
    answers = [json.loads(line[len(MARK):]) for line in done.stdout.splitlines()
               if line.startswith(MARK)]
    if not answers:
        raise SceneUnreadable(f"Blender stopped while opening it (exit {done.returncode})")
    answer = answers[-1]
    if "error" in answer:
        raise SceneUnreadable(str(answer["error"]))
    remapped = None
    if answer.get("remapped") is not None and kept is not None and fresh is not None:
        if kept.is_file():
            fresh.unlink()
        else:
            os.replace(fresh, kept)
        remapped = kept
    return SceneInfo(blender=answer["blender"], frame_start=int(answer["frame_start"]),
                     frame_end=int(answer["frame_end"]),
                     resolution=(int(answer["width"]), int(answer["height"])),
                     engine=str(answer["engine"]),
                     files=tuple(Path(name) for name in answer.get("files", ())),
                     remapped=remapped,
                     unmapped=tuple(Path(name) for name in answer.get("unmapped", ())))


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


def _bundled(bpy: Any) -> str:
    """The folder of Blender's own bundled assets (brushes, fonts...): every Blender has
    them, so no pack holds them."""
    return os.path.realpath(bpy.utils.resource_path("LOCAL")) + os.sep


def _dependencies(bpy: Any) -> list[str]:
    """Every file the open scene reads besides itself (see the module), absolute."""
    bundled = _bundled(bpy)
    found = set(bpy.utils.blend_paths(absolute=True, packed=False, local=False))
    for image in bpy.data.images:
        if image.packed_file is not None or image.source not in ("TILED", "SEQUENCE"):
            continue
        path = bpy.path.abspath(image.filepath, library=image.library)
        found.discard(path)
        found.update([tile_path(path, tile.number) for tile in image.tiles]
                     if image.source == "TILED" else sequence_files(path))
    sequences = [*(v for v in bpy.data.volumes if v.is_sequence and v.packed_file is None),
                 *(c for c in bpy.data.movieclips if c.source == "SEQUENCE")]
    for sequence in sequences:  # a volume cache or a clip one file per frame, as images
        path = bpy.path.abspath(sequence.filepath, library=sequence.library)
        found.discard(path)
        found.update(sequence_files(path))
    return sorted({os.path.normpath(path) for path in found
                   if path and not os.path.realpath(path).startswith(bundled)})


def _outside_name(path: str, root: str) -> str | None:
    """The pack name (`mesh.pack.pack_name`) of absolute `path` when it lies outside the
    folder `root`, else None."""
    path = os.path.normpath(path)
    if path == root or path.startswith(root + os.sep):
        return None
    return outside_name(path)


def _remap_outside(bpy: Any, root: str) -> list[str]:
    """Point every path the open file itself holds (images, linked libraries, sounds, fonts,
    movie clips, caches, volumes) that leads outside the folder `root` at its place in the
    pack, `//OUTSIDE/<absolute path>`, which the provider lays out beside the .blend; the
    rewritten paths, as they were. Paths a linked library holds are its own, and stay."""
    rewritten, bundled = [], _bundled(bpy)
    for collection in (bpy.data.images, bpy.data.libraries, bpy.data.sounds, bpy.data.fonts,
                       bpy.data.movieclips, bpy.data.cache_files, bpy.data.volumes):
        for block in collection:
            if (getattr(block, "library", None) is not None
                    or getattr(block, "parent", None) is not None  # an indirect library
                    or getattr(block, "packed_file", None) is not None or not block.filepath
                    or block.filepath == "<builtin>"):
                continue
            path = bpy.path.abspath(block.filepath)
            name = _outside_name(path, root)
            if name is not None and not os.path.realpath(path).startswith(bundled):
                rewritten.append(block.filepath)
                block.filepath = f"//{name}"
    return rewritten


def _report(**fields: object) -> None:
    sys.stdout.write(MARK + json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """The child: open `argv[0]` without running its scripts and report one line; with a
    second argument, save there a copy whose paths outside the file's folder are remapped
    into the pack (`_remap_outside`), when there are any."""
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
    files = _dependencies(bpy)
    remapped: str | None = None
    root = os.path.dirname(os.path.normpath(argv[0]))
    if len(argv) > 1 and _remap_outside(bpy, root):
        bpy.ops.wm.save_as_mainfile(filepath=argv[1], copy=True, relative_remap=False)
        remapped = argv[1]
    # what still leads outside: read by a linked library from where that library names it
    unmapped = [path for path in _dependencies(bpy) if _outside_name(path, root) is not None]
    _report(blender=bpy.app.version_string, frame_start=scene.frame_start,
            frame_end=scene.frame_end, width=round(render.resolution_x * scale),
            height=round(render.resolution_y * scale), engine=render.engine,
            files=files, remapped=remapped, unmapped=unmapped)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
