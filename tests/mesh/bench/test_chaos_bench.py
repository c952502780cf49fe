"""`mesh bench chaos` on a short seeded run: the orchestrator SIGKILLed a few times (at a
random moment and at exact outbox steps), an agent killed, the RPC cut or slowed, an honest
agent partitioned from the service, the chain reorganised, and still every job settles once,
with nothing lost, leased twice or slashed unfairly; on PostgreSQL, also through restarts of
the database server."""

from __future__ import annotations

import pytest

from mesh.bench import chaos

pytestmark = [pytest.mark.anvil, pytest.mark.slow]


def test_a_short_chaos_run_settles_every_job_with_no_violation() -> None:
    result = chaos.run(seed=1, kills=3, jobs=2, agents=3)
    assert result["orchestrator_kills"] == 3
    assert result["faults_injected"] > result["orchestrator_kills"]  # some side faults too
    assert set(result["faults"]) == {"orchestrator_kill", *chaos.SIDE_FAULTS}  # each kind
    assert sum(result["reorg_depths"].values()) == result["faults"]["chain_reorg"]
    assert result["jobs"] == 2 and result["jobs_unfinished"] == 0
    assert result["history"]["jobs_settled_on_chain"] == 2
    assert result["violations"] == dict.fromkeys(result["violations"], 0), result[
        "violation_details"]


@pytest.mark.usefixtures("postgres_server_programs")
def test_a_short_chaos_run_on_postgresql_rides_through_its_restarts() -> None:
    result = chaos.run(seed=2, kills=3, jobs=2, agents=3, postgres=True)
    assert result["database"] == "postgresql"
    assert result["faults"]["postgres_restart"] >= 2  # in the rounds, and one with no kill after
    assert result["jobs"] == 2 and result["jobs_unfinished"] == 0
    assert result["history"]["jobs_settled_on_chain"] == 2
    assert result["violations"] == dict.fromkeys(result["violations"], 0), result[
        "violation_details"]
