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
    assert all(isinstance(value, int) and value > 21_000 for value in measured.values())
    assert measured["lock_100"] > 10 * measured["lock_1"]
    assert measured["settle_batch_100_per_job"] < measured["settle"]
    # A first-ever payout writes a fresh storage slot, so it must cost more than a repeat one.
    assert (measured["settle_batch_100_per_job_first_payout"]
            > measured["settle_batch_100_per_job"])
    assert result["met"] == {name: measured[name] <= limit
                             for name, limit in result["targets"].items()}
    for name, breakdown in result["breakdown_per_job"].items():
        assert breakdown["total"] == measured[name]
        assert breakdown["sstore"] > 0 and breakdown["calldata"] > 0
