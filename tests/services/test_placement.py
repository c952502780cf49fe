"""The placement pass is the one placement path: a pull runs it, PLS picks the node among
every idle one (not the node that pulled), the node picks its reservation up on its next pull,
one process places at a time (the `placement` leader lease), and the pass counts its
placements."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import pls as pls_store
from orchestrator.db.models import CollateralLock, Lease
from orchestrator.scheduling.placer import BatchResult
from orchestrator.services import work
from orchestrator.services.placement import PlacementPass
from orchestrator.telemetry.metrics import MeshMetrics
from tests.builders import TOKEN, make_job
from tests.clients import LiveNode, VirtualClock
from tests.services.pls_harness import ADMIN, FixedStake
from tests.services.test_placement_gates import pls_of


def test_a_pull_places_the_task_on_the_best_idle_node_which_picks_it_up_on_its_pull(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    dear = agent("gpu-dear", price_per_gpu_hour=400)
    cheap = agent("gpu-cheap", price_per_gpu_hour=50)
    for node in (dear, cheap):
        stake.free[node.wallet.address] = 10 * TOKEN
    make_job(factory, value=TOKEN, now=clock())

    assert dear.post("/v1/nodes/gpu-dear/lease").status_code == 204  # first to poll, not best
    with factory() as session:
        (reserved,) = session.scalars(select(Lease))
        assert (reserved.node_id, reserved.state) == ("gpu-cheap", "reserved")
    lease = cheap.post("/v1/nodes/gpu-cheap/lease")
    assert lease.status_code == 200, lease.text
    assert lease.json()["lease_id"] == reserved.id
    metrics = client.app.state.ctx.metrics  # type: ignore[attr-defined]
    assert metrics.placements._value.get() == 1.0  # counted once, by the pass


def test_one_process_places_at_a_time_and_another_takes_over_when_its_lead_lapses(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    node = agent("gpu-1")
    stake.free[node.wallet.address] = 10 * TOKEN
    gate = pls_of(client).placement

    def replica() -> PlacementPass:
        return PlacementPass(factory, gate=gate, reservation_ttl_s=30.0, lead_ttl_s=3.0,
                             idle_gap_s=1.0, metrics=MeshMetrics(), clock=clock)

    leader, other = replica(), replica()
    assert leader.run() is not None  # nothing waits: it leads all the same
    make_job(factory, value=TOKEN, now=clock())
    assert other.run() is None  # the leader's lease holds
    clock.advance(3.5)  # the leader died: its lease lapses
    taken = other.run()
    assert taken is not None and [r.node_id for r in taken.placed] == ["gpu-1"]
    assert leader.run() is None


def test_a_node_whose_reservation_lapsed_gets_no_placement_until_it_is_heard_from(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    """A failed start: the node never picked its reservation up (cut off, stuck). The sweep
    releases it, and the pass does not hand the task straight back to that node until a
    heartbeat says it is there again."""
    node = agent("gpu-1")
    stake.free[node.wallet.address] = 10 * TOKEN
    make_job(factory, value=TOKEN, now=clock())
    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    assert ctx.placement.run().placed  # reserved on gpu-1, which never pulls it
    clock.advance(ctx.settings.reservation_ttl_s + 1.0)
    with factory.begin() as session:
        assert work.expire_leases(session, now=clock()).leases == 1
    assert ctx.placement.run().placed == []  # silent since: not placed on again
    assert node.post("/v1/nodes/gpu-1/heartbeat").status_code == 200
    ctx.heartbeats.flush()
    lease = node.post("/v1/nodes/gpu-1/lease")
    assert lease.status_code == 200, lease.text
    with factory() as session:
        released = session.scalars(select(Lease).where(Lease.released_at.is_not(None))).one()
        assert released.release_reason == "start lapsed"


def test_a_pass_longer_than_the_lead_renews_it_between_batches(
        agent: Callable[..., LiveNode], factory: sessionmaker[Session],
        clock: VirtualClock) -> None:
    for i in range(8):
        agent(f"gpu-{i}")
    make_job(factory, tasks=8, value=TOKEN, now=clock())
    began = clock()

    def slow() -> float:  # every read of the clock is a second later: a long pass
        clock.advance(1.0)
        return clock()

    def replica() -> PlacementPass:
        return PlacementPass(factory, gate=None, reservation_ttl_s=600.0, lead_ttl_s=5.0,
                             idle_gap_s=1.0, metrics=MeshMetrics(), clock=slow, batch_size=1)

    leader, other = replica(), replica()
    result = leader.run()
    assert result is not None and len(result.placed) == 8
    assert clock() - began > 3 * 5.0  # the pass outlasted its lease three times over
    assert other.run() is None  # still the leader's: renewed before its last batches


def test_an_idle_pull_runs_a_pass_only_when_something_changed_for_it_or_none_ran_lately(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    node = agent("gpu-1")
    stake.free[node.wallet.address] = 10 * TOKEN
    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    clock.advance(0.1)
    assert ctx.placement.run() is not None  # nothing waits; it saw gpu-1 registered
    passes: list[BatchResult | None] = []
    run = ctx.placement.run

    def counted(**kwargs: float | None) -> BatchResult | None:
        passes.append(run(**kwargs))
        return passes[-1]

    monkeypatch.setattr(ctx.placement, "run", counted)

    assert node.post("/v1/nodes/gpu-1/lease").status_code == 204
    assert passes == []  # the last pass saw this node free and the same queue
    clock.advance(ctx.settings.placement_interval_s)  # none began lately: the pull runs one
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 204
    assert len(passes) == 1
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 204
    assert len(passes) == 1
    make_job(factory, value=TOKEN, now=clock())  # a task became ready: a change
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 200
    assert len(passes) == 2


def test_a_reservation_never_started_is_fed_to_pls_as_a_failed_start(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    node = agent("gpu-1")
    stake.free[node.wallet.address] = 10 * TOKEN
    make_job(factory, value=TOKEN, now=clock())
    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    pls = pls_of(client)
    assert ctx.placement.run().placed  # reserved on gpu-1, which never pulls it
    failed_before = pls.state.book.summary("gpu-1", clock()).tasks_failed
    clock.advance(ctx.settings.reservation_ttl_s + 1.0)

    assert client.post("/v1/admin/sweep", headers=ADMIN).json()["expired_leases"] == 1

    # The node's record counts the failed start, and the provider's stake no longer backs it.
    assert pls.state.book.summary("gpu-1", clock()).tasks_failed == failed_before + 1
    with factory() as session:
        (lock,) = session.scalars(select(CollateralLock))
        assert (lock.ended_at, lock.finished) == (clock(), False)
        kinds = [kind for _, kind, _ in pls_store.observations_after(session, after=0,
                                                                     limit=10_000)]
    assert kinds.count("start_failed") == 1
    # A replica rebuilt from the tables learns the same.
    with factory() as session:
        pls.replay.rebuild(session, now=clock())
    assert pls.state.book.summary("gpu-1", clock()).tasks_failed == failed_before + 1
