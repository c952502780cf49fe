"""`mesh demo` runs a local grid end to end; `mesh bench gas` measures every money path."""

from __future__ import annotations

import subprocess
import sys

import pytest
from rich.console import Console

from orchestrator.bench import gas
from orchestrator.demo import Check, report

# What each phase of the demo prints once it has checked the service's or the chain's answer.
DEMO_MARKERS = (
    "orchestrator `mesh orchestrator serve` at",
    "scripted nodes, not yet the agent",
    "PoPW handshake passed, tier HIGH (small demo kernel",
    "RS 0.",
    "escrow the job (createJob)",
    "submitted (signed, Idempotency-Key): funded",
    "CRASH",
    "the failure detector declares ['gpu-eu-2'] dead",
    "resumes from checkpoint",
    "its late report is refused (lease_not_held)",
    "outbox lock",
    "outbox settle",
    "GET /v1/jobs says settled; the chain says SETTLED",
    "claim the payout",
    "claim the refund",
    "withdraw the unbonded stake",
    "demo passed",
)


@pytest.mark.anvil
@pytest.mark.slow
def test_demo_runsOneJobThroughTheRealServiceAndChain_andExitsZero() -> None:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "demo"],
                          capture_output=True, text=True, timeout=240, check=False)

    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    missing = [marker for marker in DEMO_MARKERS if marker not in output]
    assert missing == [], output[-4000:]
    assert "WRONG" not in output


def test_demo_report_withAWrongBalance_printsWrongAndExitsOne() -> None:
    console = Console(record=True, width=120)
    checks = [Check("customer tokens", "990 MESH", "990 MESH"),
              Check("survivor payout", "6 MESH", "5 MESH")]

    with pytest.raises(SystemExit) as exited:
        report(console, checks, total_gas=1)

    assert exited.value.code == 1
    text = console.export_text()
    assert "WRONG" in text and "demo failed" in text and "demo passed" not in text


def test_demo_report_withAllBalancesRight_passes() -> None:
    console = Console(record=True, width=120)

    report(console, [Check("left in JobEscrow", "0 MESH", "0 MESH")], total_gas=1)

    assert "demo passed" in console.export_text()


@pytest.mark.anvil
@pytest.mark.slow
def test_gas_run_measuresEveryPathAndBatchingAmortisesSettlement() -> None:
    result = gas.run()

    paths = {"stake", "request_unbond", "withdraw", "create_job", "lock_1", "lock_100", "settle",
             "settle_batch_10_per_job", "settle_batch_100_per_job",
             "settle_batch_100_per_job_first_payout"}
    assert set(result) >= paths
    measured = {name: result[name] for name in paths}
    assert all(isinstance(value, int) for value in measured.values())
    # Whole transactions cost at least the 21k base; batch numbers are amortised per job.
    assert all(value > 21_000 for name, value in measured.items() if "per_job" not in name)
    assert all(value > 5_000 for name, value in measured.items() if "per_job" in name)
    assert measured["lock_100"] > 10 * measured["lock_1"]
    assert measured["settle_batch_100_per_job"] < measured["settle"]
    # A payout shares the provider's ledger slot with its locked collateral, which the lock has
    # already created: a first-ever payout writes no fresh slot (that would add ~17k a job).
    assert abs(measured["settle_batch_100_per_job_first_payout"]
               - measured["settle_batch_100_per_job"]) < 1_000
    assert result["met"] == {name: measured[name] <= limit
                             for name, limit in result["targets"].items()}
    for name, breakdown in result["breakdown_per_job"].items():
        assert breakdown["total"] == measured[name]
        assert breakdown["sstore"] > 0 and breakdown["calldata"] > 0
