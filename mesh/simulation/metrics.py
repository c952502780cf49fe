"""Turn one policy's raw tallies into the benchmark's report fields.

Units: GPU-seconds are reference GPU-seconds (an RTX 3090's), so a fast GPU's second counts
for more; that keeps policies comparable when they favour different hardware."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mesh.simulation.engine import PolicyResult
from mesh.simulation.jobs import Job
from mesh.simulation.models import NodeProfile
from mesh.simulation.traces import Trace
from orchestrator.domain.calibration import brier_score, expected_calibration_error

CALIBRATION_SOURCE = {
    "random": None,
    "uptime": "observed uptime share of the chosen node",
    "pls": "RS(node, T) of the chosen node (ReliabilityBook, as ranked by PlsPolicy)",
    "oracle": "1.0: it only places where it knows the task will finish",
}


@dataclass(frozen=True, slots=True)
class NodeClasses:
    """Who is stable and who is flaky (by the trace's mean session length), per GPU class,
    and how many GPU-hours each node was online."""

    stable: np.ndarray  # bool per node
    flaky: np.ndarray
    online_hours: np.ndarray
    gpu: list[str]
    honest: np.ndarray  # bool per node: not a cheater (ground truth, for reporting only)

    @property
    def middle(self) -> np.ndarray:
        return (self.online_hours > 0) & ~self.stable & ~self.flaky


def classify_nodes(trace: Trace, profiles: Sequence[NodeProfile], horizon_s: float) -> NodeClasses:
    """Top third of mean session length = stable, bottom third = flaky (nodes never online
    are neither)."""
    means = np.full(len(profiles), np.nan)
    online = np.zeros(len(profiles))
    for i, profile in enumerate(profiles):
        lengths = [min(s.offline_at, horizon_s) - s.online_at
                   for s in trace.get(profile.node_id, []) if s.online_at < horizon_s]
        if lengths:
            means[i] = float(np.mean(lengths))
            online[i] = sum(lengths) / 3600.0
    known = ~np.isnan(means)
    low, high = (np.nanpercentile(means, [100 / 3, 200 / 3]) if known.any()
                 else (math.nan, math.nan))
    return NodeClasses(stable=known & (means >= high), flaky=known & (means <= low),
                       online_hours=online, gpu=[p.gpu for p in profiles],
                       honest=np.asarray([not p.cheater for p in profiles], dtype=bool))


def net_per_online_hour_by_class(net: np.ndarray, classes: NodeClasses
                                 ) -> dict[str, float | None]:
    """Honest nodes' earnings net of slashes per online GPU-hour, pooled over each class
    (stable, middle, flaky by mean session length): what a host of that kind takes home."""
    out: dict[str, float | None] = {}
    for name, mask in (("stable", classes.stable), ("middle", classes.middle),
                       ("flaky", classes.flaky)):
        members = mask & classes.honest & (classes.online_hours > 0)
        hours = float(classes.online_hours[members].sum())
        out[name] = round(float(net[members].sum()) / hours, 5) if hours > 0 else None
    return out


def earnings_per_online_hour(earned: np.ndarray, classes: NodeClasses
                              ) -> tuple[float, float] | None:
    """(stable, flaky) tokens per online GPU-hour, each GPU class's two means weighted by that
    class's node count, so both sides have the same hardware mix."""
    stable_total = flaky_total = weights = 0.0
    for gpu in sorted(set(classes.gpu)):
        in_class = np.asarray([g == gpu for g in classes.gpu])
        stable = in_class & classes.stable & (classes.online_hours > 0)
        flaky = in_class & classes.flaky & (classes.online_hours > 0)
        if not stable.any() or not flaky.any():
            continue
        weight = float(in_class.sum())
        weights += weight
        stable_total += weight * float(np.mean(earned[stable] / classes.online_hours[stable]))
        flaky_total += weight * float(np.mean(earned[flaky] / classes.online_hours[flaky]))
    if weights == 0.0:
        return None
    return stable_total / weights, flaky_total / weights


def _ratio(rates: tuple[float, float] | None) -> float | None:
    """Stable over flaky; None when the flaky side earned nothing or lost money net of slashes
    (no meaningful ratio: the flaky node is strictly worse off)."""
    if rates is None or rates[1] <= 0.0:
        return None
    return rates[0] / rates[1]


def completion_times(result: PolicyResult, jobs: Sequence[Job], horizon_s: float) -> np.ndarray:
    """Seconds from arrival to the last verified task; a job unfinished at the horizon counts
    with its age then (a lower bound), so a policy cannot look fast by never finishing."""
    return np.asarray([
        result.job_done_at.get(job.job_id, horizon_s) - job.arrival_s
        for job in jobs if job.arrival_s < horizon_s])


def _rounded(value: float | None, digits: int = 4) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


def summarise(result: PolicyResult, jobs: Sequence[Job], horizon_s: float,
              profiles: Sequence[NodeProfile], classes: NodeClasses,
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    total = result.useful_s + result.wasted_s
    times = completion_times(result, jobs, horizon_s)
    on_time = sum(1 for job in jobs if job.job_id in result.job_done_at
                  and result.job_done_at[job.job_id] <= job.deadline_s)
    honest = sum(1 for p in profiles if not p.cheater)
    predicted = np.asarray(result.predictions)
    observed = np.asarray(result.outcomes)
    has_predictions = predicted.size > 0
    gross = earnings_per_online_hour(result.earnings, classes)
    net = earnings_per_online_hour(result.earnings - result.slashed, classes)
    report: dict[str, Any] = {
        "useful_gpu_s": round(result.useful_s, 1),
        "wasted_gpu_s": round(result.wasted_s, 1),
        "waste_ratio": _rounded(result.wasted_s / total if total else None),
        "goodput": _rounded(result.useful_s / total if total else None),
        "waste_breakdown_gpu_s": {
            "lost_to_departures": round(result.waste_lost_s, 1),
            "lost_to_partition_revocations": round(result.waste_revoked_s, 1),
            "checkpoint_overhead": round(result.waste_checkpoint_s, 1),
            "result_resends": round(result.waste_resend_s, 1),
            "failed_verification": round(result.waste_verification_s, 1),
        },
        "jobs_completed": len(result.job_done_at),
        "jobs_on_time": on_time,
        "p50_completion_s": _rounded(float(np.percentile(times, 50)) if times.size else None, 1),
        "p99_completion_s": _rounded(float(np.percentile(times, 99)) if times.size else None, 1),
        "reassignments": result.reassignments,
        "failed_starts": result.failed_starts,
        "slashes": int(result.slash_count.sum()),
        "false_slash_rate": _rounded(len(result.false_slash_nodes) / honest if honest else None, 6),
        "undetected_bad_results": result.undetected_bad_results,
        "stable_vs_flaky_earnings_ratio": _rounded(_ratio(gross), 3),
        "stable_vs_flaky_net_earnings_ratio": _rounded(_ratio(net), 3),
        "earnings_per_online_gpu_hour": None if gross is None or net is None else {
            "stable": round(gross[0], 5), "flaky": round(gross[1], 5),
            "stable_net_of_slashes": round(net[0], 5), "flaky_net_of_slashes": round(net[1], 5)},
        "net_earnings_per_gpu_hour": net_per_online_hour_by_class(
            result.earnings - result.slashed, classes),
        "brier": _rounded(brier_score(predicted, observed) if has_predictions else None),
        "ece": _rounded(expected_calibration_error(predicted, observed)
                        if has_predictions else None),
        "calibration_source": CALIBRATION_SOURCE.get(result.name),
        "predictions": int(predicted.size),
    }
    if extra:
        report.update(extra)
    return report
