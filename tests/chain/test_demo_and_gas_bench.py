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

    measured = result["gas"]
    assert set(measured) >= {"stake", "request_unbond", "withdraw", "create_job", "lock_1",
                             "lock_100", "settle", "settle_batch_10_per_job",
                             "settle_batch_100_per_job"}
    assert all(isinstance(value, int) and value > 21_000 for value in measured.values())
    assert measured["lock_100"] > 10 * measured["lock_1"]
    assert measured["settle_batch_100_per_job"] < measured["settle"]
    assert result["met"] == {name: measured[name] <= limit
                             for name, limit in result["targets"].items()}
    breakdown = result["settle_batch_100_per_job_breakdown"]
    assert breakdown["total"] == measured["settle_batch_100_per_job"]
    assert breakdown["sstore"] > 0 and breakdown["calldata"] > 0
