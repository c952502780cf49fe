"""Placement under PLS, through the placement pass (run by a pull, or by the batch placer
itself): RS floor for the task's duration, a fresh HIGH handshake for high-priority work, free
stake covering the risk-priced collateral, and the collateral assignment (with a reservation
raise when the provider's standing reservation falls short) queued in the placement's
transaction."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import jobs as job_db
from orchestrator.db.models import CollateralLock, Lease, OutboxAction
from orchestrator.domain.merkle import placement_id
from orchestrator.domain.types import Priority, TaskNeeds, Tier
from orchestrator.scheduling.placer import Placer
from orchestrator.services.pls import PlsService
from tests.builders import TOKEN, make_job
from tests.clients import LiveNode, VirtualClock
from tests.services.pls_harness import ADMIN, FixedStake
from tests.services.test_popw_api import answer_body, challenge_for, ping, send_answer, solve


def pls_of(client: TestClient) -> PlsService:
    service: PlsService = client.app.state.ctx.pls  # type: ignore[attr-defined]
    return service


def test_lease_waits_for_free_stake_then_assigns_the_risk_priced_collateral(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    node = agent("gpu-1")
    job_id = make_job(factory, value=TOKEN, now=clock())
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 204  # no stake bonded yet
    stake.free[node.wallet.address] = 10 * TOKEN
    clock.advance(60)  # past the stake cache
    lease = node.post("/v1/nodes/gpu-1/lease")
    assert lease.status_code == 200, lease.text
    pls = pls_of(client)
    rs = pls.state.book.score("gpu-1", clock(), 60.0)
    expected = pls.state.config.collateral.required(TOKEN, 1.0 - rs, 60.0)
    assert expected > pls.state.config.collateral.floor  # priced by value and risk, not the floor
    assign, reserve = client.get("/v1/admin/outbox", headers=ADMIN).json()  # newest first
    assert assign["kind"] == "assign"
    assert assign["payload"] == {"job_id": job_id, "provider": node.wallet.address,
                                 "collateral": str(expected),  # the task's first attempt:
                                 "placement": str(placement_id(lease.json()["task_id"], 1))}
    # The provider had no reservation: one is raised to twice what its open work needs.
    assert reserve["kind"] == "reserve"
    assert reserve["payload"] == {"provider": node.wallet.address, "amount": str(2 * expected),
                                  "until": int(clock() + pls.state.config.reservation_s)}
    with factory() as session:
        (lock,) = session.scalars(select(CollateralLock))
        assert (lock.amount, lock.node_id) == (expected, "gpu-1")
    assert 30.0 <= lease.json()["checkpoint_interval_s"] <= 3600.0


def test_open_assignments_still_count_against_free_stake_after_the_stake_cache_expires(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    first = agent("gpu-1")
    make_job(factory, tasks=2, value=TOKEN, now=clock())
    stake.free[first.wallet.address] = 10 * TOKEN
    assert first.post("/v1/nodes/gpu-1/lease").status_code == 200
    second = agent("gpu-2", wallet=first.wallet)  # the same provider, idle after the pass
    with factory() as session:
        (lock,) = session.scalars(select(CollateralLock))
    # Stake for the open assignment and a fifth more: not for a second one (priced alike).
    stake.free[first.wallet.address] = lock.amount * 6 // 5
    clock.advance(60)  # past the stake cache: the chain holds the reservation, not the work

    assert second.post("/v1/nodes/gpu-2/lease").status_code == 204


def test_a_raise_not_yet_on_chain_still_backs_the_next_placement_after_the_cache_expires(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    first = agent("gpu-1")
    second = agent("gpu-2", wallet=first.wallet)  # the same provider
    make_job(factory, value=TOKEN, now=clock())
    stake.free[first.wallet.address] = 10 * TOKEN
    assert first.post("/v1/nodes/gpu-1/lease").status_code == 200
    make_job(factory, value=TOKEN // 2, now=clock())
    clock.advance(60)  # past the stake cache; the outbox has not sent the raise yet

    assert second.post("/v1/nodes/gpu-2/lease").status_code == 200

    # Twice the first collateral covers both: the queued raise is not sent again, higher or
    # lower (a lower one would have been refused by the chain before it kept the larger).
    outbox = client.get("/v1/admin/outbox", headers=ADMIN).json()
    assert [row["kind"] for row in outbox] == ["assign", "assign", "reserve"]


def test_stake_short_of_the_collateral_gets_no_lease(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        clock: VirtualClock) -> None:
    node = agent("gpu-1")
    stake.free[node.wallet.address] = TOKEN // 20  # under 10 % of the task's value
    make_job(factory, value=TOKEN, now=clock())
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 204


def test_high_priority_work_needs_a_fresh_high_handshake(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        clock: VirtualClock, pls_config: object) -> None:
    node = agent("gpu-1")
    stake.free[node.wallet.address] = 10 * TOKEN
    make_job(factory, needs=TaskNeeds(priority=Priority.HIGH, value=TOKEN), now=clock())
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 204
    challenge = challenge_for(node)
    ping(node, clock, challenge["ping_rounds"])
    clock.advance(2.0)
    assert send_answer(node.wallet, "gpu-1",
                       answer_body(challenge, solve(challenge), clock)).status_code == 200
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 200


def lose_probes(node: LiveNode, clock: VirtualClock) -> None:
    for _ in range(10):  # probes sent, never echoed
        node.post(f"/v1/nodes/{node.node_id}/probe")
        clock.advance(11)
    node.post(f"/v1/nodes/{node.node_id}/probe")


def test_node_losing_its_probes_falls_under_the_rs_floor_and_gets_no_lease(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    node = agent("gpu-1")
    stake.free[node.wallet.address] = 10 * TOKEN
    lose_probes(node, clock)
    agent("gpu-steady")  # the grid has steady capacity: the risky node waits for it
    pls = pls_of(client)
    assert pls.state.book.score("gpu-1", clock(), 60.0) < pls.state.config.min_rs
    assert pls.state.book.score("gpu-steady", clock(), 60.0) >= pls.state.config.min_rs
    make_job(factory, value=TOKEN, now=clock())
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 204


def test_a_grid_with_no_node_over_the_rs_floor_still_places_its_work_priced(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    node = agent("gpu-1")
    stake.free[node.wallet.address] = 10 * TOKEN
    lose_probes(node, clock)
    pls = pls_of(client)
    rs = pls.state.book.score("gpu-1", clock(), 60.0)
    assert rs < pls.state.config.min_rs  # the only node, under the floor: no steady capacity
    make_job(factory, value=TOKEN, now=clock())
    lease = node.post("/v1/nodes/gpu-1/lease")
    assert lease.status_code == 200, lease.text
    with factory() as session:
        (lock,) = session.scalars(select(CollateralLock))
    assert lock.amount == pls.state.config.collateral.required(TOKEN, 1.0 - rs, 60.0)


def test_placer_ranks_by_pls_skips_unstaked_providers_and_locks_in_the_same_batch(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    staked = agent("gpu-staked", price_per_gpu_hour=200)
    agent("gpu-cheap-unstaked", price_per_gpu_hour=10)
    stake.free[staked.wallet.address] = 10 * TOKEN
    make_job(factory, tasks=2, value=TOKEN, now=clock())
    pls = pls_of(client)
    placer = Placer(factory, gate=pls.placement, clock=clock)
    placed = placer.place_all()
    assert [r.node_id for r in placed.placed] == ["gpu-staked"]  # one slot; cheap has no stake
    with factory() as session:
        leases = list(session.scalars(select(Lease)))
        locks = list(session.scalars(select(OutboxAction).where(OutboxAction.kind == "assign")))
        assert [lease.node_id for lease in leases] == ["gpu-staked"]
        assert [a.payload["placement"] for a in locks] == [
            str(placement_id(leases[0].task_id, 1))]


def test_one_batch_never_places_more_collateral_than_the_providers_free_stake(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    first = agent("gpu-1")
    agent("gpu-2", wallet=first.wallet)  # the same provider: its stake backs both nodes
    for _ in range(2):
        make_job(factory, value=TOKEN, now=clock())
    pls = pls_of(client)
    collateral = pls.state.config.collateral.required(
        TOKEN, 1.0 - pls.state.book.score("gpu-1", clock(), 60.0), 60.0)
    stake.free[first.wallet.address] = collateral * 3 // 2  # one task's, not two

    result = Placer(factory, gate=pls.placement, clock=clock).place_all()

    # The batch's second decision counts the first one's claim on the stake: one placement,
    # decided right the first time (no rollback).
    assert (len(result.placed), result.conflicts) == (1, 0)
    with factory() as session:
        locks = list(session.scalars(select(CollateralLock)))
        assigns = list(session.scalars(select(OutboxAction).where(OutboxAction.kind == "assign")))
    assert len(locks) == len(assigns) == 1
    assert sum(lock.amount for lock in locks) <= stake.free[first.wallet.address]


def test_a_staking_demotion_outranks_a_passing_high_handshake(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock, pls_config: object) -> None:
    """A BACKGROUND node that passes a HIGH handshake still gets no NORMAL or HIGH work; it
    keeps the background work its tier allows."""
    node = agent("gpu-1")
    stake.free[node.wallet.address] = 10 * TOKEN
    pls = pls_of(client)
    with factory.begin() as session:
        pls.staking.adopt_chain_tier(session, provider=node.wallet.address,
                                     tier=Tier.BACKGROUND, now=clock())
    challenge = challenge_for(node)
    ping(node, clock, challenge["ping_rounds"])
    clock.advance(2.0)
    answer = send_answer(node.wallet, "gpu-1", answer_body(challenge, solve(challenge), clock))
    assert answer.status_code == 200 and answer.json()["tier"] == int(Tier.HIGH), answer.text
    make_job(factory, needs=TaskNeeds(priority=Priority.HIGH, value=TOKEN), now=clock())
    make_job(factory, needs=TaskNeeds(priority=Priority.NORMAL, value=TOKEN), now=clock())
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 204
    background = make_job(factory, needs=TaskNeeds(priority=Priority.LOW, value=TOKEN),
                          now=clock())
    lease = node.post("/v1/nodes/gpu-1/lease")
    assert lease.status_code == 200, lease.text
    with factory() as session:
        task = job_db.get_task(session, task_id=lease.json()["task_id"])
        assert task is not None and task.job_id == background
