"""Availability traces: read and validate the CSV formats, or generate sessions from the
published models. A trace is, per node, a sorted list of non-overlapping online sessions."""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mesh.simulation.models import (
    GPU_CLASSES,
    HOUR_S,
    AvailabilityModel,
    NodeProfile,
    Population,
    generate_link_fields,
)

TRACE_HEADER = ("node_id", "online_at", "offline_at")
PROFILE_HEADER = ("node_id", "gpu", "vram_gb", "rtt_ms", "jitter_ms", "loss", "throttle_rate")
WARMUP_S = 30 * 24 * HOUR_S  # generated traces start mid-process, not with every node fresh


class TraceError(ValueError):
    """A trace or profiles file the simulator refuses; the message names file, line and field."""


@dataclass(frozen=True, slots=True)
class Session:
    online_at: float
    offline_at: float  # math.inf: online until the end of the trace


Trace = dict[str, list[Session]]


def _number(text: str, *, where: str, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {field} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise TraceError(f"{where}: {field} must be finite, got {text!r}")
    return value


def _check_header(path: Path, header: list[str] | None, expected: tuple[str, ...]) -> None:
    got = tuple(h.strip() for h in header or [])
    if got != expected:
        raise TraceError(f"{path}: header must be {','.join(expected)!r}, got {','.join(got)!r}")


def _rows(path: Path, header: tuple[str, ...]) -> Iterator[tuple[str, list[str]]]:
    """(`file:line`, stripped cells) of each non-blank data row, after checking the header
    and each row's field count."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        _check_header(path, next(reader, None), header)
        for line_no, row in enumerate(reader, start=2):
            where = f"{path}:{line_no}"
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise TraceError(f"{where}: expected {len(header)} fields, got {len(row)}")
            yield where, [cell.strip() for cell in row]


def parse_trace_csv(path: Path) -> Trace:
    """Sessions per node; refuses bad headers, malformed rows, negative times and overlaps."""
    trace: Trace = {}
    for where, (node_id, online_text, offline_text) in _rows(path, TRACE_HEADER):
        if not node_id:
            raise TraceError(f"{where}: node_id is empty")
        online_at = _number(online_text, where=where, field="online_at")
        offline_at = (math.inf if not offline_text
                      else _number(offline_text, where=where, field="offline_at"))
        if online_at < 0 or offline_at < 0:
            raise TraceError(f"{where}: times must not be negative")
        if offline_at <= online_at:
            raise TraceError(f"{where}: offline_at {offline_at} is not after online_at "
                             f"{online_at}")
        trace.setdefault(node_id, []).append(Session(online_at, offline_at))
    if not trace:
        raise TraceError(f"{path}: no sessions")
    for node_id, sessions in trace.items():
        sessions.sort(key=lambda s: s.online_at)
        for before, after in itertools.pairwise(sessions):
            if after.online_at < before.offline_at:
                raise TraceError(
                    f"{path}: node {node_id!r} has overlapping sessions "
                    f"[{before.online_at}, {before.offline_at}) and "
                    f"[{after.online_at}, {after.offline_at})")
    return trace


def parse_profiles_csv(path: Path, rng: np.random.Generator) -> dict[str, NodeProfile]:
    """Hardware and link per node; fields the format lacks (region, upload, stake) are drawn."""
    profiles: dict[str, NodeProfile] = {}
    for where, row in _rows(path, PROFILE_HEADER):
        node_id, gpu = row[0], row[1]
        if not node_id:
            raise TraceError(f"{where}: node_id is empty")
        if node_id in profiles:
            raise TraceError(f"{where}: node {node_id!r} listed twice")
        if gpu not in GPU_CLASSES:
            raise TraceError(f"{where}: unknown gpu {gpu!r}; known: {sorted(GPU_CLASSES)}")
        vram, rtt, jitter, loss, throttle = (
            _number(row[i], where=where, field=PROFILE_HEADER[i]) for i in range(2, 7))
        if min(vram, rtt, jitter) < 0:
            raise TraceError(f"{where}: vram_gb, rtt_ms and jitter_ms must not be negative")
        if not (0.0 <= loss < 1.0 and 0.0 <= throttle <= 1.0):
            raise TraceError(f"{where}: loss must be in [0, 1) and throttle_rate in [0, 1]")
        profiles[node_id] = generate_link_fields(
            rng, node_id, gpu, int(vram), rtt_ms=rtt, jitter_ms=jitter, loss=loss,
            throttle_rate=throttle)
    return profiles


def generate_sessions(
    model: AvailabilityModel, rng: np.random.Generator, horizon_s: float,
    warmup_s: float = WARMUP_S, scale: float = 1.0,
) -> list[Session]:
    """One node's online sessions in [0, horizon_s): the renewal process is started `warmup_s`
    before zero so that nodes are caught mid-session, as a real grid would find them. `scale`
    stretches (> 1) or shortens (< 1) every online and offline length of this host."""
    sessions: list[Session] = []
    now = -warmup_s
    online = bool(rng.random() < model.long_run_uptime())
    on_lengths: list[float] = []
    off_lengths: list[float] = []
    while now < horizon_s:
        pool, dist = (on_lengths, model.availability) if online else (
            off_lengths, model.unavailability)
        if not pool:
            pool.extend(float(h) * HOUR_S * scale for h in dist.sample_hours(rng, 32))
        end = now + pool.pop()
        if online and end > 0.0:
            sessions.append(Session(max(now, 0.0), math.inf if end >= horizon_s else end))
        now = end
        online = not online
    return sessions


def generate_trace(
    models: dict[str, AvailabilityModel], mix: dict[str, float], node_ids: list[str],
    rng: np.random.Generator, horizon_s: float, population: Population | None = None,
) -> tuple[Trace, dict[str, str]]:
    """Sessions for every node, each node drawn from one cluster of `mix`; also returns the
    cluster each node follows (ground truth, for reporting only). `population` adds each
    host's own pace (`Population.host_scales`); without it every host keeps its model's."""
    names = list(mix)
    weights = np.asarray([mix[n] for n in names], dtype=float)
    picks = rng.choice(len(names), size=len(node_ids), p=weights / weights.sum())
    scales = (np.ones(len(node_ids)) if population is None
              else population.host_scales(rng, len(node_ids)))
    trace: Trace = {}
    clusters: dict[str, str] = {}
    for node_id, pick, scale in zip(node_ids, picks, scales.tolist(), strict=True):
        clusters[node_id] = names[pick]
        trace[node_id] = generate_sessions(models[names[pick]], rng, horizon_s, scale=scale)
    return trace, clusters

