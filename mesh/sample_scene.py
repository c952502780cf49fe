"""Build the small sample scene with bpy: a few seconds of animation at low resolution.

`python -m mesh.sample_scene OUT.blend` writes it; nothing is downloaded. The scene
is Cycles on CPU with a fixed seed, adaptive sampling and denoising off, so every frame is a
deterministic function of the file (see ../shared/TOOLCHAIN.md, "Blender Cycles").
"""

from __future__ import annotations

import sys
from pathlib import Path

FPS = 24
SECONDS = 3


def build(out: Path, *, width: int = 160, height: int = 120, samples: int = 64) -> Path:
    """Write the scene to `out`: a cube orbiting a sphere on a plane, camera and sun light."""
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.samples = samples
    scene.cycles.seed = 7
    scene.cycles.use_adaptive_sampling = False
    scene.cycles.use_denoising = False
    scene.render.resolution_x, scene.render.resolution_y = width, height
    scene.render.resolution_percentage = 100
    scene.render.fps = FPS
    scene.frame_start, scene.frame_end = 1, FPS * SECONDS
    scene.render.dither_intensity = 0.0

    bpy.ops.mesh.primitive_plane_add(size=12, location=(0, 0, 0))
    bpy.ops.mesh.primitive_uv_sphere_add(radius=1.0, location=(0, 0, 1.0))
    sphere = bpy.context.active_object
    red = bpy.data.materials.new("red")
    red.diffuse_color = (0.8, 0.1, 0.1, 1.0)
    sphere.data.materials.append(red)
    bpy.ops.mesh.primitive_cube_add(size=0.8, location=(2.5, 0, 0.5))
    cube = bpy.context.active_object
    for frame, (x, y) in ((1, (2.5, 0.0)), (FPS * SECONDS // 2, (-2.5, 1.5)),
                          (FPS * SECONDS, (2.5, 0.0))):
        cube.location = (x, y, 0.5)
        cube.rotation_euler = (0.0, 0.0, frame * 0.1)
        cube.keyframe_insert("location", frame=frame)
        cube.keyframe_insert("rotation_euler", frame=frame)

    bpy.ops.object.light_add(type="SUN", location=(4, -4, 8))
    bpy.context.active_object.data.energy = 3.0
    bpy.ops.object.camera_add(location=(7, -7, 5), rotation=(1.1, 0.0, 0.785))
    scene.camera = bpy.context.active_object
    world = bpy.data.worlds.new("sky")
    world.color = (0.05, 0.07, 0.1)
    scene.world = world

    out.parent.mkdir(parents=True, exist_ok=True)
    bpy.ops.wm.save_as_mainfile(filepath=str(out.resolve()), compress=False)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m mesh.sample_scene OUT.blend")
    print(build(Path(sys.argv[1])))
