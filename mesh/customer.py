"""The customer's side: submit an escrowed job, retried safely (`mesh job submit`), and list a
job's results and download every file, checking each sha256, with a progress bar (`mesh job
download`). The tiles of a frame (PNG or EXR) are assembled into the frame once all of them
are in."""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from protocol.client import ApiCallError, Wallet, expect, sha256_file

SUBMIT_ATTEMPTS = 5
SUBMIT_BACKOFF_S = 1.0  # doubled after each attempt: 1 + 2 + 4 + 8 s at most between them


def submit_job(wallet: Wallet, body: dict[str, Any], *, key: str | None = None,
               attempts: int = SUBMIT_ATTEMPTS) -> dict[str, Any]:
    """POST an escrowed job, retried under one idempotency key (`key`, or a new one) while no
    orchestrator answers or it answers 503 (its chain or database briefly away): a retry gets
    back the job an earlier attempt created, never a second one. The last error is raised
    when every attempt failed; any other refusal at once."""
    key = key or secrets.token_hex(16)
    for attempt in range(attempts):
        try:
            return dict(expect(wallet.send("POST", "/v1/jobs", body,
                                           headers={"idempotency-key": key})))
        except httpx.TransportError:
            if attempt + 1 == attempts:
                raise
        except ApiCallError as error:
            if error.status != 503 or attempt + 1 == attempts:
                raise
        time.sleep(SUBMIT_BACKOFF_S * 2**attempt)
    raise AssertionError("unreachable")  # the last attempt returns or raises


@dataclass(frozen=True, slots=True)
class Downloaded:
    files: list[Path]  # every result file, hash-checked
    frames: list[Path]  # every finished frame: rendered whole, or assembled from its tiles
    complete: bool  # the job had a result for every task


def download(wallet: Wallet, job_id: str, out: Path, *, show_progress: bool = True
             ) -> Downloaded:
    listing = expect(wallet.send("GET", f"/v1/jobs/{job_id}/results"))
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = listing["results"]
    files = []
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), disable=not show_progress) as progress:
        bar = progress.add_task(f"job {job_id}", total=sum(r["size"] for r in results))
        for result in results:
            target = out / result["name"]
            if target.is_file() and sha256_file(target) == result["sha256"]:
                progress.advance(bar, result["size"])
                files.append(target)
                continue
            path = f"/v1/jobs/{job_id}/results/{result['sha256']}"
            digest = hashlib.sha256()
            partial = target.with_name(f".{target.name}.partial")
            with wallet.http.stream("GET", path, headers=wallet.signed_headers("GET", path)
                                    ) as response:
                if response.status_code != 200:
                    response.read()
                    expect(response)
                with partial.open("wb") as handle:
                    for block in response.iter_bytes():
                        digest.update(block)
                        handle.write(block)
                        progress.advance(bar, len(block))
            if digest.hexdigest() != result["sha256"]:
                partial.unlink()
                raise ApiCallError(f"{result['name']} arrived with sha256 {digest.hexdigest()}, "
                                   f"not {result['sha256']}: not written")
            os.replace(partial, target)
            files.append(target)
    return Downloaded(files=files, frames=finished_frames(results, out),
                      complete=bool(listing["complete"]))


def finished_frames(results: list[dict[str, Any]], out: Path) -> list[Path]:
    """The frames the downloaded results in `out` make, by frame number: a result rendered
    whole is its frame; tiles are assembled into theirs once every tile is there."""
    whole = {int(r["frame"]): out / r["name"] for r in results
             if r.get("frame") is not None and (r.get("tiles") or 1) == 1}
    assembled = {int(path.stem.removeprefix("frame-")): path
                 for path in assemble_tiles(results, out)}
    return [path for _, path in sorted({**whole, **assembled}.items())]


def assemble_tiles(results: list[dict[str, Any]], out: Path) -> list[Path]:
    """frame-NNNN.png or .exr from its tiles (strips, tile 0 on top) once every tile is there:
    PNG tiles pasted into one image, EXR tiles' linear RGBA float rows stacked into one bare
    RGBA float EXR (the format the agent writes chunks in), so either equals the frame
    rendered whole."""
    from protocol.images import exr_pixels, write_exr

    by_frame: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        suffix = Path(result["name"]).suffix
        if (result.get("tiles") or 1) > 1 and suffix in (".png", ".exr"):
            by_frame[(int(result["frame"]), suffix)].append(result)
    frames = []
    for (frame, suffix), tiles in sorted(by_frame.items()):
        count = int(tiles[0]["tiles"])
        if sorted(int(t["tile"]) for t in tiles) != list(range(count)):
            continue
        paths = {int(t["tile"]): out / t["name"] for t in tiles}
        target = out / f"frame-{frame:04d}{suffix}"
        if suffix == ".exr":
            strips = [exr_pixels(paths[tile]) for tile in range(count)]
            write_exr(target, np.concatenate(strips, axis=0))
        else:
            _paste_png_tiles(paths, count, target)
        frames.append(target)
    return frames


def _paste_png_tiles(paths: dict[int, Path], count: int, target: Path) -> None:
    from PIL import Image

    from agent.workloads.blender import tile_row_range

    images = {tile: Image.open(path) for tile, path in paths.items()}
    width = images[0].width
    height = sum(image.height for image in images.values())
    canvas = Image.new(images[0].mode, (width, height))
    for tile, image in images.items():
        top, _ = tile_row_range(tile, count, height)
        canvas.paste(image, (0, top))
    canvas.save(target)
