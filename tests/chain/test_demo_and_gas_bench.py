"""`mesh demo` plays one job end to end; `mesh bench gas` measures every money path."""

from __future__ import annotations

import pytest

from orchestrator import demo
from orchestrator.bench import gas


@pytest.mark.anvil
def test_demo_run_printsEveryTransactionAndPassesTheBalanceChecks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    demo.run()

    output = capsys.readouterr().out
    for step in ("stake", "escrow the job", "settle", "claim the payout", "withdraw"):
        assert step in output
    assert "WRONG" not in output
    assert "demo passed" in output


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
