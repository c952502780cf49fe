"""A scene that reads textures outside its folder, built with bpy in a child process:
`python -m tests.mesh.outside_scene FOLDER ELSEWHERE` writes FOLDER/scene.blend, whose cube
shows ELSEWHERE/abs.png (named by its absolute path) and whose ground plane shows
FOLDER/../shared/up.png (named `//../shared/up.png`), each wired into its material's base
colour, so a render shows whether they were found."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.mesh.packed_scene import _image, _textured


def build(folder: Path, elsewhere: Path) -> Path:
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=False)
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.samples = 4
    scene.render.resolution_x, scene.render.resolution_y = 64, 48
    folder.mkdir(parents=True, exist_ok=True)
    blend = folder / "scene.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    absolute = _image(bpy, elsewhere / "abs.png", (0, 1, 0, 1))
    up = _image(bpy, folder.parent / "shared/up.png", (0, 0, 1, 1))
    up.filepath = "//../shared/up.png"
    bpy.data.objects["Cube"].data.materials.append(_textured(bpy, "Absolute", [absolute]))
    bpy.ops.mesh.primitive_plane_add(size=6, location=(0, 0, -1))
    bpy.context.active_object.data.materials.append(_textured(bpy, "Up", [up]))
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    return blend


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
