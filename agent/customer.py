"""The customer's side of results: list a job's results and download every file, checking
each sha256, with a progress bar (`mesh job download`). PNG tiles of a frame are assembled
into the frame once all of them are in."""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from agent.client import ApiCallError, Wallet, expect, sha256_file


@dataclass(frozen=True, slots=True)
class Downloaded:
    files: list[Path]  # every result file, hash-checked
    frames: list[Path]  # frames assembled from tiles
    complete: bool  # the job had a result for every task


def download(wallet: Wallet, job_id: str, out: Path, *, show_progress: bool = True
             ) -> Downloaded:
    listing = expect(wallet.send("GET", f"/v1/jobs/{job_id}/results"))
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = listing["results"]
    files = []
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), disable=not show_progress) as progress:
        bar = progress.add_task(f"job {job_id[:10]}…", total=sum(r["size"] for r in results))
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
    return Downloaded(files=files, frames=assemble_tiles(results, out),
                      complete=bool(listing["complete"]))


def assemble_tiles(results: list[dict[str, Any]], out: Path) -> list[Path]:
    """frame-NNNN.png from its PNG tiles (strips, tile 0 on top) once every tile is there."""
    from PIL import Image

    from agent.workloads.blender import tile_row_range

    by_frame: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        if (result.get("tiles") or 1) > 1 and result["name"].endswith(".png"):
            by_frame[int(result["frame"])].append(result)
    frames = []
    for frame, tiles in sorted(by_frame.items()):
        count = int(tiles[0]["tiles"])
        if sorted(int(t["tile"]) for t in tiles) != list(range(count)):
            continue
        images = {int(t["tile"]): Image.open(out / t["name"]) for t in tiles}
        width = images[0].width
        height = sum(image.height for image in images.values())
        canvas = Image.new(images[0].mode, (width, height))
        for tile, image in images.items():
            top, _ = tile_row_range(tile, count, height)
            canvas.paste(image, (0, top))
        target = out / f"frame-{frame:04d}.png"
        canvas.save(target)
        frames.append(target)
    return frames
