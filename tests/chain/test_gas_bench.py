"""`mesh bench gas` measures every money path, and the end-to-end cost per job as the
orchestrator sends it."""

from __future__ import annotations

import pytest

from mesh.bench import gas


@pytest.mark.anvil
@pytest.mark.slow
def test_gas_run_measuresEveryPathAndBatchingAmortisesSettlement() -> None:
    result = gas.run()

    paths = {"stake", "request_unbond", "withdraw", "create_job", "lock_1", "lock_100", "settle",
             "settle_batch_10_per_job", "settle_batch_100_per_job",
             "settle_batch_100_per_job_first_payout", "reserve_1", "reserve_100_per_provider",
             "commit_assignments", "prove_assignment", "slash_assigned_collateral",
             "end_to_end_per_job_batch_1", "end_to_end_per_job_batch_10",
             "end_to_end_per_job_batch_100"}
    assert set(result) >= paths
    measured = {name: result[name] for name in paths}
    assert all(isinstance(value, int) for value in measured.values())
    # Whole transactions cost at least the 21k base; batch numbers are amortised per job.
    assert all(value > 21_000 for name, value in measured.items() if "per_job" not in name)
    assert all(value > 5_000 for name, value in measured.items() if "per_job" in name)
    assert measured["lock_100"] > 10 * measured["lock_1"]
    assert measured["settle_batch_100_per_job"] < measured["settle"]
    # A provider's first-ever payout creates its ledger slot (a reservation does not): once in
    # its life, at most a fresh slot's price more.
    assert 0 <= (measured["settle_batch_100_per_job_first_payout"]
                 - measured["settle_batch_100_per_job"]) < 20_000
    # Locks, settlement and epoch commitments amortise over the batch.
    assert (measured["end_to_end_per_job_batch_1"] > measured["end_to_end_per_job_batch_10"]
            > measured["end_to_end_per_job_batch_100"])
    assert result["met"] == {name: measured[name] <= limit
                             for name, limit in result["targets"].items()}
    for name, breakdown in result["breakdown_per_job"].items():
        assert breakdown["total"] == measured[name]
        assert breakdown["sstore"] > 0 and breakdown["calldata"] > 0
