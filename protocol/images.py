"""The image codecs results travel in: a node's chunks and frames, the service's pixel checks
and the dashboard's previews decode files with these, so both sides read the same pixels.

EXR is read and written with the `OpenEXR` package (Pillow cannot read it); PNG with Pillow.
Anything that does not decode as what it should be is `OutputInvalid`, never a crash.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class OutputInvalid(Exception):
    """A file the task named does not decode as what it should be."""


def exr_pixels(path: Path) -> np.ndarray:
    """RGBA float32 (rows top-down) of a single-part EXR; OutputInvalid if it is not one."""
    import OpenEXR

    try:
        with OpenEXR.File(str(path)) as exr:
            channels = exr.channels()
            rgba = channels.get("RGBA")
            pixels = None if rgba is None else np.asarray(rgba.pixels)
    except Exception as exc:  # truncated or garbage files raise from the C++ side
        raise OutputInvalid(f"{path.name} is not a readable EXR: {exc}") from None
    if pixels is None or pixels.ndim != 3 or pixels.shape[2] != 4:
        raise OutputInvalid(f"{path.name} has no RGBA layer")
    if not np.isfinite(pixels).all():
        raise OutputInvalid(f"{path.name} holds non-finite pixels")
    return pixels.astype(np.float32, copy=False)


def is_exr(path: Path) -> bool:
    """By the file's magic number, whatever its name (blobs are named by their hash)."""
    with path.open("rb") as handle:
        return handle.read(4) == b"\x76\x2f\x31\x01"


def image_pixels(path: Path) -> np.ndarray:
    """A stored result or chunk as pixels, whatever its name: RGBA float32 for an EXR, RGBA
    uint8 for a PNG; OutputInvalid for anything else."""
    if is_exr(path):
        return exr_pixels(path)
    from PIL import Image

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGBA"))
    except Exception as exc:
        raise OutputInvalid(f"{path.name} is neither EXR nor PNG: {exc}") from None


def write_exr(path: Path, pixels: np.ndarray) -> Path:
    """RGBA float32 as a ZIP-compressed EXR with nothing else in its header: Blender's own files
    carry render times, so the same pixels would hash differently on every node."""
    import OpenEXR

    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    with OpenEXR.File(header, {"RGBA": np.ascontiguousarray(pixels, np.float32)}) as exr:
        exr.write(str(path))
    return path


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) of a fully decoded PNG or EXR; OutputInvalid otherwise."""
    if path.suffix == ".exr":
        height, width, _ = exr_pixels(path).shape
        return width, height
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()
            return image.size
    except Exception as exc:
        raise OutputInvalid(f"{path.name} is not a readable PNG: {exc}") from None
