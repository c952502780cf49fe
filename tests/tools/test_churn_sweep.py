"""`tools/churn_sweep.py`: one small sweep end to end, its table and its verdicts."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "churn_sweep.py"


def sweep_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("churn_sweep", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["churn_sweep"] = module
    spec.loader.exec_module(module)
    return module


def test_a_small_sweep_writes_one_table_with_a_verdict_per_target(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    assert sweep_module().main(["--out", str(out), "--nodes", "60", "--days", "0.5",
                                "--jobs", "8", "--only", "seti:2", "homes:3"]) == 0
    table = json.loads(out.read_text())
    assert list(table["traces"]) == ["seti:2", "homes:3"]
    row = table["traces"]["homes:3"]
    assert set(row["pass"]) == {"jobs_on_time", "p99", "waste_0.6x_uptime", "waste_3x_oracle",
                                "false_slashes", "ece", "stable_flaky_2x",
                                "honest_classes_net_positive"}
    assert row["pass"]["jobs_on_time"] == (row["jobs_on_time"]["pls"]
                                           >= row["jobs_on_time"]["uptime"])
    assert row["waste_vs_oracle"]["oracle"] in (1.0, None)
    summary = table["summary"]
    assert summary["traces"] == 2
    assert all(0 <= n <= 2 for n in summary["passed"].values())
