"""A scene packed for the grid, and sent content-addressed: only what the orchestrator lacks.

`pack_scene` takes the files the pinned Blender says a .blend reads (`mesh.scene_check`), names
each by its path relative to the .blend's folder (those outside it under `protocol.packs.OUTSIDE`
by their absolute path, where the .blend packed, Blender's remapped copy, points at them),
hashes it, and lists the files that are not there. `upload` asks the
orchestrator which of the pack's hashes this wallet has still to send (`POST /v1/blobs/lacking`,
in batches) and PUTs only those, with one progress bar: a second submit of the same scene with
one texture changed sends that texture, and a submit cut short sends, when run again, what did
not arrive."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from mesh.scene_check import SceneInfo
from protocol.client import Wallet, expect, sha256_file
from protocol.packs import MAX_ASSETS, asset_path_problem, outside_name

LACKING_BATCH = 512  # hashes per question (the service's `MAX_LACKING_QUERY`)
UPLOAD_BLOCK = 1 << 20


class PackError(ValueError):
    """The scene cannot be packed; the message names the file and says why."""


@dataclass(frozen=True, slots=True)
class PackedFile:
    name: str  # its path in the pack (the .blend: its file name)
    source: Path  # where it is on this machine
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Pack:
    blend: PackedFile
    assets: tuple[PackedFile, ...]  # every other file the scene reads, by name
    missing: tuple[Path, ...]  # files the scene reads that are not on this machine

    @property
    def files(self) -> tuple[PackedFile, ...]:
        return (self.blend, *self.assets)

    @property
    def manifest(self) -> dict[str, str] | None:
        """The job spec's `assets` (path -> sha256); None when the scene reads no other file."""
        return {asset.name: asset.sha256 for asset in self.assets} or None

    @property
    def total_bytes(self) -> int:
        return sum(file.size for file in self.files)


def pack_name(path: Path, root: Path) -> str:
    """The pack path of `path` for a .blend in the folder `root`: relative to it when under it,
    else `OUTSIDE/` + its absolute path. `PackError` when no manifest may name it."""
    try:
        name = path.relative_to(root).as_posix()
    except ValueError:
        name = outside_name(path.as_posix())
    problem = asset_path_problem(name)
    if problem is not None:
        raise PackError(f"{path} cannot be packed as {name!r}: the pack needs {problem}; "
                        "rename or move it")
    return name


def pack_scene(blend: Path, scene: SceneInfo) -> Pack:
    """The pack of `blend`, whose files Blender listed in `scene` (hashed here); its .blend is
    the copy remapped into the pack (`SceneInfo.remapped`) when Blender made one."""
    blend = blend.resolve()
    root = blend.parent
    present = [path for path in scene.files if path.is_file()]
    if len(present) > MAX_ASSETS:
        raise PackError(f"{blend} reads {len(present)} files; a pack holds at most "
                        f"{MAX_ASSETS}: split the scene or pack images into the .blend")
    assets = sorted((_packed(path, pack_name(path, root)) for path in present),
                    key=lambda file: file.name)
    return Pack(blend=_packed(scene.remapped or blend, blend.name), assets=tuple(assets),
                missing=tuple(path for path in scene.files if not path.is_file()))


def _packed(path: Path, name: str) -> PackedFile:
    return PackedFile(name=name, source=path, size=path.stat().st_size,
                      sha256=sha256_file(path))


def lacking(wallet: Wallet, hashes: Iterable[str]) -> set[str]:
    """Which of `hashes` the orchestrator says this wallet has still to upload."""
    wanted = sorted(set(hashes))
    found: set[str] = set()
    for start in range(0, len(wanted), LACKING_BATCH):
        answer = expect(wallet.send("POST", "/v1/blobs/lacking",
                                    {"sha256s": wanted[start:start + LACKING_BATCH]}))
        found.update(answer["lacking"])
    return found


@dataclass(frozen=True, slots=True)
class Uploaded:
    sent: tuple[PackedFile, ...]  # the files sent (one per distinct hash)
    kept: int  # files the orchestrator already had from this wallet

    @property
    def sent_bytes(self) -> int:
        return sum(file.size for file in self.sent)


def upload(wallet: Wallet, pack: Pack, *, show_progress: bool = True) -> Uploaded:
    """Send the pack's files the orchestrator lacks (each PUT under its sha256, signed; the
    store checks the hash), with one progress bar over their bytes."""
    missing = lacking(wallet, (file.sha256 for file in pack.files))
    distinct = {file.sha256: file for file in pack.files}
    sending = tuple(distinct[sha256] for sha256 in sorted(missing))
    with Progress(TextColumn("upload {task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), console=Console(stderr=True),
                  disable=not show_progress, transient=True) as bar:
        task = bar.add_task(f"{len(sending)} files", total=sum(f.size for f in sending))
        for file in sending:
            path = f"/v1/blobs/{file.sha256}"

            def blocks(source: Path = file.source) -> Iterator[bytes]:
                with source.open("rb") as handle:
                    while block := handle.read(UPLOAD_BLOCK):
                        bar.advance(task, len(block))
                        yield block

            headers = {**wallet.signed_headers("PUT", path), "content-length": str(file.size)}
            expect(wallet.http.put(path, content=blocks(), headers=headers))
    return Uploaded(sent=sending, kept=len(distinct) - len(sending))
