"""Packing a scene (issue 35): every file a production-style scene reads is traced by the pinned
Blender (relative and absolute paths, UDIM tiles, an image sequence, a linked library and the
texture its material reads), named in the pack relative to the .blend's folder, hashed; a file
that is not there is listed as missing."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mesh.pack import PackError, pack_name, pack_scene
from mesh.scene_check import read_scene
from protocol.packs import OUTSIDE
from tests.mesh.media_scene import FILES as MEDIA_FILES
from tests.mesh.packed_scene import FILES


def build_scene(folder: Path, elsewhere: Path) -> Path:
    """`tests.mesh.packed_scene` built with bpy in a child process."""
    subprocess.run([sys.executable, "-m", "tests.mesh.packed_scene", str(folder),
                    str(elsewhere)], check=True, capture_output=True, timeout=120)
    return folder / "scene.blend"


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_scene(tmp_path_factory.mktemp("artist"), tmp_path_factory.mktemp("elsewhere"))


def test_every_file_the_scene_reads_is_traced_and_named_in_its_pack(production: Path) -> None:
    folder = production.parent
    elsewhere = next(folder.parent.glob("elsewhere*"))
    started = time.perf_counter()
    pack = pack_scene(production, read_scene(production))
    print(f"pack: {len(pack.files)} files, {pack.total_bytes} bytes in "
          f"{time.perf_counter() - started:.2f} s")
    absolute = f"{OUTSIDE}{elsewhere / 'abs.png'}"
    assert pack.manifest == {name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
                             for name in FILES} | {
        absolute: hashlib.sha256((elsewhere / "abs.png").read_bytes()).hexdigest()}
    assert (pack.blend.name, pack.blend.sha256) == (
        "scene.blend", hashlib.sha256(production.read_bytes()).hexdigest())
    assert pack.missing == ()
    assert pack.total_bytes == sum(f.stat().st_size for f in [production, *(
        folder / name for name in FILES), elsewhere / "abs.png"])


def test_a_file_the_scene_reads_that_is_gone_is_listed_missing(tmp_path: Path) -> None:
    blend = build_scene(tmp_path / "artist", tmp_path / "elsewhere")
    (blend.parent / "tex/udim.1002.png").unlink()
    (tmp_path / "elsewhere/abs.png").unlink()
    pack = pack_scene(blend, read_scene(blend))
    assert pack.missing == (tmp_path / "artist/tex/udim.1002.png",
                            tmp_path / "elsewhere/abs.png")
    assert "tex/udim.1001.png" in (pack.manifest or {})


def test_a_file_no_pack_path_can_name_is_refused_naming_it(tmp_path: Path) -> None:
    assert pack_name(tmp_path / "a/b.png", tmp_path) == "a/b.png"
    assert pack_name(Path("/srv/tex/b.png"), tmp_path) == f"{OUTSIDE}/srv/tex/b.png"
    with pytest.raises(PackError, match=re.escape("bad\\name.png")):
        pack_name(tmp_path / "bad\\name.png", tmp_path)


def test_a_scene_reading_files_outside_its_folder_packs_a_copy_that_finds_them_in_the_pack(
        tmp_path: Path) -> None:
    """Absolute and `//../` paths: the .blend packed is Blender's copy pointing them at the
    pack's `OUTSIDE/` folder; laid out anywhere by its manifest, that copy reads every file
    from inside the layout, and none is missing. The artist's .blend is left as it was, and a
    second read of the same scene packs the same copy."""
    subprocess.run([sys.executable, "-m", "tests.mesh.outside_scene", str(tmp_path / "artist"),
                    str(tmp_path / "elsewhere")], check=True, capture_output=True, timeout=120)
    blend = tmp_path / "artist/scene.blend"
    original = blend.read_bytes()
    scene = read_scene(blend, remap_dir=tmp_path / "scenes")
    assert scene.remapped is not None and scene.unmapped == ()
    pack = pack_scene(blend, scene)
    outside = {f"{OUTSIDE}{tmp_path / name}" for name in ("elsewhere/abs.png", "shared/up.png")}
    assert set(pack.manifest or {}) == outside
    assert pack.blend.sha256 != hashlib.sha256(original).hexdigest()
    assert blend.read_bytes() == original

    # laid out as deep as the artist's folder: Blender names the bundled brushes the factory
    # scene refers to relative to the file, and those are not the pack's business
    laid = tmp_path / "laid"
    laid.mkdir()
    (laid / "scene.blend").write_bytes(pack.blend.source.read_bytes())
    for asset in pack.assets:
        (laid / asset.name).parent.mkdir(parents=True, exist_ok=True)
        (laid / asset.name).write_bytes(asset.source.read_bytes())
    there = read_scene(laid / "scene.blend")
    assert sorted(there.files) == sorted(laid / name for name in outside)
    assert there.unmapped == ()

    again = pack_scene(blend, read_scene(blend, remap_dir=tmp_path / "scenes"))
    assert again.blend == pack.blend


def test_fonts_sounds_and_cache_sequences_are_traced_too(tmp_path: Path) -> None:
    import matplotlib

    font = Path(matplotlib.__file__).parent / "mpl-data/fonts/ttf/DejaVuSans.ttf"
    subprocess.run([sys.executable, "-m", "tests.mesh.media_scene", str(tmp_path), str(font)],
                   check=True, capture_output=True, timeout=120)
    blend = tmp_path / "media.blend"

    pack = pack_scene(blend, read_scene(blend))

    assert pack.missing == ()
    assert pack.manifest == {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
                             for name in MEDIA_FILES}
