"""Results travel as EXR (linear float) or PNG; both sides decode them with these codecs, and
anything that does not decode as what it claims is refused, never half-read."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from protocol.images import (
    OutputInvalid,
    exr_pixels,
    image_pixels,
    image_size,
    is_exr,
    write_exr,
)


def pixels(height: int = 3, width: int = 5) -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.random((height, width, 4), dtype=np.float32)


def test_an_exr_keeps_every_float_and_nothing_else(tmp_path: Path) -> None:
    image = pixels()
    first = write_exr(tmp_path / "a.exr", image)
    second = write_exr(tmp_path / "b.exr", image.copy())
    assert np.array_equal(exr_pixels(first), image)
    assert exr_pixels(first).dtype == np.float32
    # no render time or other per-node header: the same pixels are the same bytes
    assert hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(
        second.read_bytes()).digest()


def test_a_file_is_read_by_what_it_holds_not_by_its_name(tmp_path: Path) -> None:
    image = pixels()
    exr = write_exr(tmp_path / "blob", image)  # blobs are named by their hash
    png = tmp_path / "other-blob"
    Image.fromarray((image * 255).astype(np.uint8)).save(png, format="PNG")
    assert is_exr(exr) and not is_exr(png)
    assert np.array_equal(image_pixels(exr), image)
    assert image_pixels(png).dtype == np.uint8
    assert image_pixels(png).shape == (3, 5, 4)


def test_sizes_are_read_from_fully_decoded_files(tmp_path: Path) -> None:
    assert image_size(write_exr(tmp_path / "f.exr", pixels(4, 6))) == (6, 4)
    png = tmp_path / "f.png"
    Image.new("RGBA", (9, 2)).save(png)
    assert image_size(png) == (9, 2)


@pytest.mark.parametrize("content", [b"", b"not an image", b"\x76\x2f\x31\x01" + b"\0" * 40])
def test_garbage_is_refused_as_invalid(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "frame.exr"
    path.write_bytes(content)
    with pytest.raises(OutputInvalid):
        image_pixels(path)
    with pytest.raises(OutputInvalid):
        image_size(path)


def test_a_truncated_exr_or_png_is_refused(tmp_path: Path) -> None:
    exr = write_exr(tmp_path / "t.exr", pixels(64, 64))
    exr.write_bytes(exr.read_bytes()[:200])
    with pytest.raises(OutputInvalid, match="not a readable EXR"):
        exr_pixels(exr)
    png = tmp_path / "t.png"
    Image.fromarray((pixels(64, 64) * 255).astype(np.uint8)).save(png)
    png.write_bytes(png.read_bytes()[:100])
    with pytest.raises(OutputInvalid, match="not a readable PNG"):
        image_size(png)


def test_non_finite_pixels_are_refused(tmp_path: Path) -> None:
    image = pixels()
    image[1, 2, 0] = np.nan
    with pytest.raises(OutputInvalid, match="non-finite"):
        exr_pixels(write_exr(tmp_path / "nan.exr", image))
