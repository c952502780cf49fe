"""A job as the service takes it in: its workload split into tasks (one per frame, or per tile
of a frame, or per shard), each queued by the latest time it can start and still meet the job's
deadline (`matching.latest_start`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.matching import latest_start
from orchestrator.domain.types import TaskNeeds


def input_blobs(payload: Mapping[str, Any]) -> set[str]:
    """The blobs a task's payload names as its inputs (the .blend, a command's input)."""
    return {str(payload[key]) for key in ("blend_sha256", "input_sha256") if payload.get(key)}


def pack_of(spec: Mapping[str, Any]) -> dict[str, str]:
    """A job's pack: its workload's `assets` (path -> sha256 of each file the .blend reads
    besides itself), empty when it has none. Its tasks read them all."""
    return {str(name): str(sha256) for name, sha256 in
            ((spec.get("workload") or {}).get("assets") or {}).items()}


def handed_payload(payload: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """What a node is handed to run (a lease) or re-run (a check) of a task: its payload, with
    its job's pack (`assets`) when the job has one. The manifest stays in the job's spec, not in
    each of its tasks' rows."""
    pack = pack_of(spec)
    return {**payload, "assets": pack} if pack else dict(payload)


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


@dataclass(frozen=True, slots=True)
class NewJob:
    """A funded job to insert with its tasks (`job_db.create_job`)."""

    job_id: str
    customer: str
    spec: Mapping[str, Any]  # the signed spec as submitted
    spec_hash: str
    amount: int  # token units escrowed
    deadline: float  # unix seconds
    needs: TaskNeeds  # what each of its tasks needs
    payloads: tuple[Mapping[str, Any], ...]  # one per task, in index order

    @property
    def latest_start(self) -> float:
        """Where its tasks stand in the queue (least laxity first)."""
        return latest_start(self.deadline, self.needs.expected_duration_s)
