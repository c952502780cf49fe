"""A production-style scene for the packing tests, built with bpy in a child process:
`python -m tests.mesh.packed_scene FOLDER ELSEWHERE` writes FOLDER/scene.blend, which reads

- FOLDER/tex/rel.png by a relative path (`//tex/rel.png`),
- ELSEWHERE/abs.png by an absolute path,
- FOLDER/tex/udim.1001.png and .1002.png as one UDIM image,
- FOLDER/tex/seq_0001.png to seq_0003.png as one image sequence,
- FOLDER/lib/lib.blend, a linked library whose material reads FOLDER/lib/libtex.png by a path
  relative to the library (`//libtex.png`).

The cube's colour is the relative texture's, the ground plane's the library's (first image of
each material into its base colour): a render shows whether they were found.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

FILES = ("tex/rel.png", "tex/udim.1001.png", "tex/udim.1002.png", "tex/seq_0001.png",
         "tex/seq_0002.png", "tex/seq_0003.png", "lib/lib.blend", "lib/libtex.png")


def _image(bpy: Any, path: Path, rgba: tuple[float, float, float, float]) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = bpy.data.images.new(path.stem, 8, 8)
    image.pixels[:] = list(rgba) * 64
    image.filepath_raw, image.file_format = str(path), "PNG"
    image.save()
    return image


def _textured(bpy: Any, name: str, images: list[Any]) -> Any:
    material = bpy.data.materials.new(name)
    material.use_nodes = True
    nodes = material.node_tree.nodes
    for image in images:
        nodes.new("ShaderNodeTexImage").image = image
    first = next(node for node in nodes if node.bl_idname == "ShaderNodeTexImage")
    material.node_tree.links.new(first.outputs["Color"],
                                 nodes["Principled BSDF"].inputs["Base Color"])
    return material


def build(folder: Path, elsewhere: Path) -> Path:
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    _textured(bpy, "LibMat", [_image(bpy, folder / "lib/libtex.png", (0, 0, 1, 1))]
              ).use_fake_user = True
    bpy.ops.wm.save_as_mainfile(filepath=str(folder / "lib/lib.blend"), relative_remap=True)

    bpy.ops.wm.read_factory_settings(use_empty=False)
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.samples = 4
    scene.render.resolution_x, scene.render.resolution_y = 64, 48
    blend = folder / "scene.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    relative = _image(bpy, folder / "tex/rel.png", (1, 0, 0, 1))
    relative.filepath = "//tex/rel.png"
    absolute = _image(bpy, elsewhere / "abs.png", (0, 1, 0, 1))
    for number in (1001, 1002):
        _image(bpy, folder / f"tex/udim.{number}.png", (1, 1, 0, 1))
    udim = bpy.data.images.load(str(folder / "tex/udim.1001.png"))
    udim.source, udim.filepath = "TILED", "//tex/udim.<UDIM>.png"
    for frame in (1, 2, 3):
        _image(bpy, folder / f"tex/seq_{frame:04d}.png", (frame / 3, 0, 0, 1))
    sequence = bpy.data.images.load(str(folder / "tex/seq_0001.png"))
    sequence.source, sequence.filepath = "SEQUENCE", "//tex/seq_0001.png"
    cube = bpy.data.objects["Cube"].data
    cube.materials.append(_textured(bpy, "Local", [relative, absolute, udim, sequence]))
    with bpy.data.libraries.load("//lib/lib.blend", link=True, relative=True) as (_, linked):
        linked.materials = ["LibMat"]
    bpy.ops.mesh.primitive_plane_add(size=6, location=(0, 0, -1))
    bpy.context.active_object.data.materials.append(linked.materials[0])
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    return blend


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
