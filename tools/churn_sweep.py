"""Run `mesh bench churn` over many traces and write one JSON table of PLS against the
targets of docs/churn.md, so the numbers there can be rerun:

    python tools/churn_sweep.py --out sweep.json [--nodes 1000 --days 7 --jobs 2000]
        [--parallel 2] [--only seti:1 homes:11 ...] [--csv trace.csv ...]

A trace is `population:seed` (a generated one, `--population`) or a CSV file (`--csv`, run
with seed 1). Without `--only` the default set is 16 SETI seeds and 10 high-churn ones. The
table is rewritten after every trace, so an interrupted sweep keeps what it finished."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from mesh.bench import churn

HIGH_CHURN = ("combos:11", "combos:12", "homes:11", "homes:12", "homes-short:11",
              "churn-mix:11", "evenings:11", "evenings:12", "evenings-mix:11", "evenings-mix:12")
DEFAULT_TRACES = (*(f"seti:{seed}" for seed in range(1, 17)), *HIGH_CHURN)


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """PLS against `uptime` and the oracle on one trace, each target with its verdict."""
    policies = report["policies"]
    pls, uptime = policies["pls"], policies["uptime"]
    jobs = report["jobs"]
    uptime_late = uptime["jobs_on_time"] < jobs
    p99_ratio = pls["p99_completion_s"] / uptime["p99_completion_s"]
    waste_ratio = pls["wasted_gpu_s"] / uptime["wasted_gpu_s"]
    net = pls["net_earnings_per_gpu_hour"]
    stable_flaky = pls["stable_vs_flaky_net_earnings_ratio"]
    row = {
        "jobs": jobs,
        "jobs_on_time": {name: policies[name]["jobs_on_time"] for name in churn.POLICY_ORDER},
        "p99_s": {name: policies[name]["p99_completion_s"] for name in churn.POLICY_ORDER},
        "wasted_gpu_s": {name: policies[name]["wasted_gpu_s"] for name in churn.POLICY_ORDER},
        "waste_vs_oracle": {name: policies[name]["waste_vs_oracle"]
                            for name in churn.POLICY_ORDER},
        "pls_over_uptime": {"waste": round(waste_ratio, 3), "p99": round(p99_ratio, 3)},
        "uptime_late": uptime_late,
        "slashes": {"pls": pls["slashes"], "by_reason": pls.get("slashes_by_reason")},
        "false_slash_rate": pls["false_slash_rate"],
        "ece": pls["ece"],
        "stable_vs_flaky_net": stable_flaky,
        "net_earnings_per_gpu_hour": {name: policies[name]["net_earnings_per_gpu_hour"]
                                      for name in ("uptime", "pls")},
        "wall_s": report["wall_s"],
    }
    row["pass"] = {
        "jobs_on_time": pls["jobs_on_time"] >= uptime["jobs_on_time"],
        "p99": p99_ratio <= (0.7 if uptime_late else 1.0),
        "waste_0.6x_uptime": waste_ratio <= 0.6,
        "waste_3x_oracle": (pls["waste_vs_oracle"] or 0.0) <= 3.0,
        "false_slashes": pls["false_slash_rate"] <= 0.001,
        "ece": pls["ece"] is not None and pls["ece"] <= 0.05,
        "stable_flaky_2x": stable_flaky is not None and stable_flaky >= 2.0,
        "honest_classes_net_positive": all(v is not None and v > 0 for v in net.values()),
    }
    return row


def run_one(trace: str, nodes: int, days: float, jobs: int) -> tuple[str, dict[str, Any]]:
    if ":" in trace and not Path(trace).exists():
        population, seed = trace.rsplit(":", 1)
        report = churn.run(nodes=nodes, days=days, jobs=jobs, seed=int(seed),
                           population=population)
    else:
        report = churn.run(trace=Path(trace), days=days, jobs=jobs, seed=1)
    return trace, targets(report)


def summary(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {}
    names = next(iter(rows.values()))["pass"]
    waste = [row["pls_over_uptime"]["waste"] for row in rows.values()]
    return {
        "traces": len(rows),
        "passed": {name: sum(row["pass"][name] for row in rows.values()) for name in names},
        "missed": {name: [t for t, row in rows.items() if not row["pass"][name]]
                   for name in names},
        "mean_waste_vs_uptime": round(statistics.fmean(waste), 3),
        "mean_waste_0.5x_uptime": statistics.fmean(waste) <= 0.5,
        "mean_pls_waste_vs_oracle": round(statistics.fmean(
            row["waste_vs_oracle"]["pls"] for row in rows.values()), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--only", nargs="*", help="population:seed traces to run")
    parser.add_argument("--csv", nargs="*", default=[], help="CSV traces to add")
    args = parser.parse_args(argv)
    traces = [*(args.only or DEFAULT_TRACES), *args.csv]
    rows: dict[str, dict[str, Any]] = {}
    settings = {"nodes": args.nodes, "days": args.days, "jobs": args.jobs}

    def write() -> None:
        ordered = {t: rows[t] for t in traces if t in rows}
        args.out.write_text(json.dumps({"settings": settings, "summary": summary(ordered),
                                        "traces": ordered}, indent=1) + "\n")

    with ProcessPoolExecutor(max_workers=max(args.parallel, 1)) as pool:
        futures = [pool.submit(run_one, t, args.nodes, args.days, args.jobs) for t in traces]
        for future in as_completed(futures):
            trace, row = future.result()
            rows[trace] = row
            write()
            failed = [name for name, ok in row["pass"].items() if not ok]
            print(f"{trace}: waste {row['pls_over_uptime']['waste']}x uptime, "
                  f"p99 {row['pls_over_uptime']['p99']}x, missed {failed or 'none'}",
                  file=sys.stderr)
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
