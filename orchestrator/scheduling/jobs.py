"""Splitting a job spec into tasks: one per frame (or per tile of a frame), or per shard."""

from __future__ import annotations

from typing import Any


def split_tasks(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """Task payloads for a validated workload (see `api.schemas.JobSpec`)."""
    if workload["kind"] == "blender":
        tiles = int(workload.get("tiles", 1))
        frames = range(int(workload["frames"]["start"]), int(workload["frames"]["end"]) + 1)
        render = {key: workload.get(key) for key in ("samples", "chunk_samples", "resolution")}
        return [{"kind": "blender", "blend_sha256": workload["blend_sha256"], "frame": frame,
                 "tile": tile, "tiles": tiles, "format": workload.get("format", "png"),
                 **render} for frame in frames for tile in range(tiles)]
    if workload["kind"] == "command":
        return [{"kind": "command", "command": workload["command"],
                 "input_sha256": workload.get("input_sha256"), "shard": shard,
                 "outputs": workload.get("outputs", ["result"]),
                 "shards": int(workload["count"]),
                 "deterministic": bool(workload.get("deterministic", True)),
                 "redundancy": workload.get("redundancy") or {"k": 2, "n": 3}}
                for shard in range(int(workload["count"]))]
    raise ValueError(f"unknown workload kind {workload['kind']!r}")
