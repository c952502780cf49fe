"""PNG plots of one churn run: waste per policy, completion-time CDF, RS calibration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: files only, never a window
import matplotlib.pyplot as plt
import numpy as np

from mesh.simulation.engine import PolicyResult
from orchestrator.domain.calibration import reliability_diagram

WASTE_PARTS = ("lost_to_departures", "lost_to_partition_revocations", "checkpoint_overhead",
               "result_resends", "failed_verification")


def write_plots(folder: Path, reports: Mapping[str, dict[str, Any]],
                completion: Mapping[str, np.ndarray], results: Sequence[PolicyResult]
                ) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [_waste(folder, reports), _cdf(folder, completion), _calibration(folder, results)]


def _waste(folder: Path, reports: Mapping[str, dict[str, Any]]) -> Path:
    names = list(reports)
    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = np.zeros(len(names))
    for part in WASTE_PARTS:
        hours = np.asarray([reports[n]["waste_breakdown_gpu_s"][part] / 3600.0 for n in names])
        ax.bar(names, hours, bottom=bottom, label=part.replace("_", " "))
        bottom += hours
    ax.set_ylabel("wasted reference GPU-hours")
    ax.set_title("Compute wasted to churn, per policy")
    ax.legend(fontsize=8)
    path = folder / "waste.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _cdf(folder: Path, completion: Mapping[str, np.ndarray]) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, times in completion.items():
        ordered = np.sort(times) / 3600.0
        ax.step(ordered, np.arange(1, ordered.size + 1) / max(ordered.size, 1), where="post",
                label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log)")
    ax.set_ylabel("share of jobs")
    ax.set_title("Job completion time CDF")
    ax.legend()
    path = folder / "completion_cdf.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _calibration(folder: Path, results: Sequence[PolicyResult]) -> Path:
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", label="perfect")
    for result in results:
        if not result.predictions or result.name == "oracle":
            continue
        diagram = reliability_diagram(np.asarray(result.predictions),
                                      np.asarray(result.outcomes))
        filled = diagram.count > 0
        ax.plot(diagram.mean_predicted[filled], diagram.observed_rate[filled], marker="o",
                label=f"{result.name} (n={len(result.predictions)})")
    ax.set_xlabel("predicted P(task completes)")
    ax.set_ylabel("observed completion rate")
    ax.set_title("Calibration of placement predictions")
    ax.legend()
    path = folder / "calibration.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
