"""The Blender side of a render task: runs with `bpy` inside the sandbox, one process per
task, so `import bpy` and opening the .blend (about 0.45 s) are paid once per frame or tile,
not once per chunk.

Input: one JSON file (argv[1]) with the blend path, the frames (one for a grid task; many for
`mesh bench render`'s direct pass), tile, samples, the sample chunks still to render, the
chunks already done (from a checkpoint) and the output format. Output: one JSON line on stdout
per finished chunk and one per merged frame (with the process's CPU time so far, which
`mesh bench sandbox` compares); nothing else is trusted (the agent decodes every
file it names). Job files never run Python: auto-exec stays off and
`open_mainfile` gets `use_scripts=False` (what `blender --disable-autoexec` does).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

MARK = "MESH-WORKER "  # prefix of the lines the agent reads; Blender's own log goes around


def tile_rows(tile: int, tiles: int, height: int) -> tuple[float, float]:
    """The border (min_y, max_y) of horizontal strip `tile` of `tiles`, tile 0 at the top
    (border y runs bottom-up)."""
    return 1.0 - (tile + 1) / tiles, 1.0 - tile / tiles


def render_env() -> dict[str, str]:
    """The Blender build and the Cycles CPU kernel this process renders with: pixels are
    bit-identical only between equal pairs (TOOLCHAIN.md), so every result carries them."""
    import bpy

    build = bpy.app.build_hash
    build = build.decode() if isinstance(build, bytes) else str(build)
    flags = ""
    with contextlib.suppress(OSError):
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), "")
    avx2 = "avx2" in flags.split() and not os.environ.get("CYCLES_CPU_NO_AVX2")
    return {"blender": f"{bpy.app.version_string} {build}", "kernel": "avx2" if avx2 else "sse42"}


def emit(**fields: Any) -> None:
    sys.stdout.write(MARK + json.dumps(fields) + "\n")
    sys.stdout.flush()


def configure(spec: dict[str, Any]) -> Any:
    import bpy

    bpy.context.preferences.filepaths.use_scripts_auto_execute = False
    bpy.ops.wm.open_mainfile(filepath=spec["blend"], load_ui=False, use_scripts=False)
    scene = bpy.context.scene
    render = scene.render
    render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.samples = int(spec["samples"])
    # Deterministic pixels: adaptive sampling stops per pixel on noise (and moves tile edges),
    # the denoiser is not a per-sample mean, so neither survives a merge of sample chunks.
    scene.cycles.use_adaptive_sampling = False
    scene.cycles.use_denoising = False
    render.dither_intensity = 0.0
    render.threads_mode = "FIXED"
    render.threads = int(spec["threads"])
    if spec.get("resolution"):
        render.resolution_x, render.resolution_y = spec["resolution"]
    render.resolution_percentage = 100
    render.use_stamp = False
    for name in dir(render):  # no date or render time in the files: same pixels, same bytes
        if name.startswith("use_stamp_") and isinstance(getattr(render, name), bool):
            setattr(render, name, False)
    tiles = int(spec["tiles"])
    if tiles > 1:
        render.use_border = True
        render.use_crop_to_border = True
        render.border_min_x, render.border_max_x = 0.0, 1.0
        render.border_min_y, render.border_max_y = tile_rows(int(spec["tile"]), tiles,
                                                             render.resolution_y)
    return scene


def render_chunk(scene: Any, frame: int, offset: int, length: int, out: Path) -> Path:
    import bpy

    scene.cycles.use_sample_subset = True
    scene.cycles.sample_offset = offset
    scene.cycles.sample_subset_length = length
    settings = scene.render.image_settings
    settings.file_format = "OPEN_EXR"
    settings.color_depth = "32"
    settings.exr_codec = "ZIP"
    path = out / f"chunk-{frame:06d}-{offset:06d}-{length:06d}.exr"
    scene.render.filepath = str(path)
    bpy.ops.render.render(write_still=True)
    return path


def load_pixels(path: Path) -> tuple[np.ndarray, tuple[int, int]]:
    import bpy

    image = bpy.data.images.load(str(path))
    width, height = image.size
    pixels = np.empty(width * height * 4, np.float32)
    image.pixels.foreach_get(pixels)
    bpy.data.images.remove(image)
    return pixels, (width, height)


def merge(scene: Any, frame: int, chunks: list[tuple[Path, int]], fmt: str, out: Path) -> Path:
    """The frame as the mean of its chunks weighted by their true sample counts (each EXR's
    header claims the total, so Blender's own merge would weigh unequal chunks wrongly), then
    written with the scene's colour management (AgX etc.) like a direct render."""
    import bpy

    total = sum(length for _, length in chunks)
    acc: np.ndarray | None = None
    size = (0, 0)
    for path, length in chunks:
        pixels, size = load_pixels(path)
        weighted = pixels.astype(np.float64) * length
        acc = weighted if acc is None else acc + weighted
    assert acc is not None
    image = bpy.data.images.new("merged", size[0], size[1], alpha=True, float_buffer=True)
    image.pixels.foreach_set((acc / total).astype(np.float32))
    settings = scene.render.image_settings
    if fmt == "exr":
        settings.file_format = "OPEN_EXR"
        settings.color_depth = "32"
        settings.exr_codec = "ZIP"
        path = out / f"frame-{frame:04d}.exr"
    else:
        settings.file_format = "PNG"
        settings.color_mode = "RGBA"
        settings.color_depth = "8"
        settings.compression = 15
        path = out / f"frame-{frame:04d}.png"
    image.save_render(str(path), scene=scene)
    return path


def main(source: str) -> None:
    """`source` is a spec file, or `-`: a warm worker imports bpy first, then waits for its
    spec on stdin (the agent starts it before the lease arrives)."""
    began = time.perf_counter()
    import bpy  # noqa: F401  (the slow part, done before the task is known)

    imported = time.perf_counter()
    spec = json.loads(sys.stdin.read() if source == "-" else Path(source).read_text())
    out = Path(spec["out"])
    started = time.perf_counter()
    scene = configure(spec)
    emit(event="ready", import_s=imported - began, seconds=time.perf_counter() - started,
         env=render_env())
    for frame in spec["frames"]:
        scene.frame_set(int(frame))
        chunks = [(Path(path), int(length)) for path, length in spec["done"]]
        for offset, length in spec["todo"]:
            began = time.perf_counter()
            path = render_chunk(scene, int(frame), int(offset), int(length), out)
            chunks.append((path, int(length)))
            emit(event="chunk", frame=frame, offset=offset, length=length, path=str(path),
                 seconds=time.perf_counter() - began)
        began = time.perf_counter()
        path = merge(scene, int(frame), chunks, spec["format"], out)
        emit(event="frame", frame=frame, path=str(path), seconds=time.perf_counter() - began,
             cpu_s=time.process_time())  # this process's CPU time so far, every thread


if __name__ == "__main__":
    main(sys.argv[1])
