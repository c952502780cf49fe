"""`mesh bench scaleout` on a short run (two replicas on PostgreSQL, a few hundred placements,
the first replica killed half-way), and the leader sampler's verdicts on planted leader
leases. That a planted double lease (a GPU slot leased twice) is reported is proven by the
history checker's own tests (tests/mesh/bench/test_history_check.py), whose verdict this bench
reports."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from mesh.bench import scaleout
from orchestrator.db.models import LeaderLock
from orchestrator.db.session import make_engine, make_session_factory, upgrade_to_head


@pytest.mark.postgres
@pytest.mark.anvil
@pytest.mark.slow
def test_a_short_scale_out_run_has_no_violation_and_the_killed_leader_is_taken_over(
        postgres_url: str) -> None:
    result = scaleout.run(postgres_url=postgres_url, nodes=8, jobs=3, tasks_per_job=100,
                          settle_timeout_s=300.0)  # a stuck run fails, not hangs
    assert result["replicas"] == 2 and result["tasks"] == 300
    assert result["placements"] >= 300
    assert result["violations"] == dict.fromkeys(result["violations"], 0), result[
        "violation_details"]
    assert result["leader_runs_overlapping"] == result["sender_holders_overlapping"] == 0
    # the first replica took the leader leases first; each went to the other one after the kill
    assert result["killed_replica_leases"], result["taken_over_s"]
    assert all(0 < s < 60 for s in result["taken_over_s"].values())
    assert result["requests"]["requests_replica_0"] > 0 < result["requests"][
        "requests_replica_1"]
    assert set(result["score_from_both_replicas"]) == {"lag_first_to_second_ms",
                                                       "lag_second_to_first_ms"}
    assert result["history"]["jobs_settled_on_chain"] == 3
    # Placed through the PLS gate: every placement's collateral assigned on chain, backed by
    # reservations that both replicas raised, and no chain action refused.
    assert result["pls_placement"]
    assert result["outbox"]["assign"] == {"confirmed": result["placements"]}
    assert result["outbox"]["reserve"]["confirmed"] > 0
    assert result["outbox_failures"] == {}
    assert not scaleout.failed(result)


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(f"sqlite:///{tmp_path / 'leaders.db'}")
    upgrade_to_head(engine)
    yield make_session_factory(engine)
    engine.dispose()


def settle(sampler: scaleout.LeaderSampler) -> None:
    """Until the sampler has read the table at least twice more."""
    seen = sampler.samples
    while sampler.samples < seen + 2:
        time.sleep(scaleout.SAMPLE_S)


def hand_over(factory: sessionmaker[Session], name: str, holder: str, expires_at: float) -> None:
    with factory.begin() as session:
        session.execute(update(LeaderLock).where(LeaderLock.name == name)
                        .values(holder=holder, expires_at=expires_at))


def test_the_sampler_tells_a_takeover_of_a_live_lease_from_one_of_a_lapsed_lease(
        factory: sessionmaker[Session]) -> None:
    now = time.time()
    with factory.begin() as session:
        session.add_all([LeaderLock(name="sweep", holder="a", expires_at=now + 30),
                         LeaderLock(name="outbox-sender", holder="a", expires_at=now + 0.1)])
    sampler = scaleout.LeaderSampler(factory).start()
    try:
        settle(sampler)
        held = sampler.held()
        assert held == {"sweep": "a", "outbox-sender": "a"}
        killed_at = time.time()
        assert sampler.taken_over(held, killed_at) is None  # nobody took them yet
        time.sleep(0.2)  # the sender's lease lapses: taking it is the design
        hand_over(factory, "outbox-sender", "b", time.time() + 3)
        settle(sampler)
        assert sampler.taken_over(held, killed_at) is None  # the sweep's is still a's
        hand_over(factory, "sweep", "b", time.time() + 3)  # 30 s early: two holders at once
        settle(sampler)
    finally:
        sampler.stop()
    overlapping = [t.name for t in sampler.takeovers if t.overlapping]
    assert overlapping == ["sweep"]
    taken = sampler.taken_over(held, killed_at)
    assert taken is not None and set(taken) == {"sweep", "outbox-sender"}
    assert taken["outbox-sender"] < taken["sweep"]
