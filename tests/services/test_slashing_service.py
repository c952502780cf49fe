"""Slashing through the service: a departure the failure detector calls DEAD while a task
runs slashes that task's collateral after the decision delay, but a region-wide outage seen
through the heartbeat path never does."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db.models import CollateralLock, Lease, NodeSession, OutboxAction, SlashRecord
from orchestrator.domain.types import SlashReason
from tests.builders import TOKEN, make_job
from tests.clients import LiveNode, VirtualClock
from tests.services.pls_harness import ADMIN, FixedStake
from tests.services.test_placement_gates import pls_of


def beat_rounds(client: TestClient, clock: VirtualClock, beating: Sequence[LiveNode],
                rounds: int, held: list[str] | None = None) -> list[str]:
    """Every 5 s the `beating` agents send a heartbeat; the sweep runs each time. Returns the
    nodes called dead; those whose leases were held go to `held`."""
    dead: list[str] = []
    for _ in range(rounds):
        clock.advance(5)
        for node in beating:
            node.beat()
        client.app.state.ctx.heartbeats.flush()  # type: ignore[attr-defined]
        swept = client.post("/v1/admin/sweep", headers=ADMIN).json()
        dead += swept["dead_nodes"]
        if held is not None:
            held += swept["held_nodes"]
    return dead


def start_tasks(nodes: Sequence[LiveNode], stake: FixedStake, factory: sessionmaker[Session],
                clock: VirtualClock) -> None:
    for node in nodes:
        stake.free[node.wallet.address] = 10 * TOKEN
    make_job(factory, tasks=len(nodes), value=TOKEN, now=clock())
    for node in nodes:
        lease = node.post(f"/v1/nodes/{node.node_id}/lease")
        assert lease.status_code == 200, lease.text
        node.post(f"/v1/tasks/{lease.json()['task_id']}/progress", {"progress": 0.2})


def decide_after_delay(client: TestClient, factory: sessionmaker[Session],
                       clock: VirtualClock) -> None:
    pls = pls_of(client)
    clock.advance(pls.state.config.slashing.decision_delay_s + 60)
    with factory.begin() as session:
        pls.staking.run_decide(session, now=clock())


def slash_actions(factory: sessionmaker[Session]) -> list[OutboxAction]:
    with factory() as session:
        return list(session.scalars(select(OutboxAction).where(OutboxAction.kind == "slash")))


def lone_node_goes_silent(agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
                          factory: sessionmaker[Session], clock: VirtualClock) -> LiveNode:
    """gpu-doomed (us) runs a task and goes silent while gpu-ok (eu) beats on."""
    doomed, survivor = agent("gpu-doomed", region="us"), agent("gpu-ok", region="eu")
    start_tasks([doomed], stake, factory, clock)
    beat_rounds(client, clock, [doomed, survivor], 30)
    assert beat_rounds(client, clock, [survivor], 15) == ["gpu-doomed"]
    return doomed


def test_lone_departure_holding_a_task_slashes_its_damage_once(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    doomed = lone_node_goes_silent(agent, client, stake, factory, clock)
    decide_after_delay(client, factory, clock)
    decide_after_delay(client, factory, clock)  # a second run decides nothing new
    (action,) = slash_actions(factory)
    with factory() as session:
        (lock,) = session.scalars(select(CollateralLock))
        (record,) = session.scalars(select(SlashRecord))
    assert action.payload["job_id"] == lock.job_id
    assert action.payload["provider"] == doomed.wallet.address
    # Priced at the damage done (the 0.2 of the task since its last checkpoint, plus the base
    # share), never more than the collateral locked for it.
    damage = pls_of(client).state.config.slashing.abandonment_damage(TOKEN, 0.2)
    assert action.payload["amount"] == str(min(lock.amount, damage)) == str(record.amount)
    assert action.payload["reason"] == SlashReason.ABANDONMENT
    assert action.payload["evidence"] == record.evidence and len(record.evidence) == 66
    metrics = client.get("/metrics").text
    assert 'mesh_slashes_total{reason="abandonment"} 1.0' in metrics
    assert "mesh_reliability_score_count 2.0" in metrics  # gpu-ok, once per decision run


def live_tasks(factory: sessionmaker[Session]) -> dict[str, int]:
    with factory() as session:
        return {lease.node_id: lease.task_id for lease in session.scalars(
            select(Lease).where(Lease.released_at.is_(None)))}


def region_goes_silent(agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
                       factory: sessionmaker[Session], clock: VirtualClock, size: int
                       ) -> list[LiveNode]:
    """`size` nodes in region eu run a task each, then all go silent at once for 75 s while a
    node elsewhere beats on: the detector calls every one dead, and their leases are held."""
    region = [agent(f"gpu-eu-{i}", region="eu") for i in range(size)]
    elsewhere = agent("gpu-us", region="us")
    start_tasks(region, stake, factory, clock)
    beat_rounds(client, clock, [*region, elsewhere], 30)
    held: list[str] = []
    dead = beat_rounds(client, clock, [elsewhere], 15, held)
    assert sorted(dead) == sorted(held) == [node.node_id for node in region]
    return region


def test_region_wide_outage_through_the_heartbeat_path_slashes_nobody(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    region_goes_silent(agent, client, stake, factory, clock, 4)
    decide_after_delay(client, factory, clock)
    assert slash_actions(factory) == []
    with factory() as session:
        assert list(session.scalars(select(SlashRecord))) == []


def test_region_wide_silence_holds_the_leases_and_the_nodes_resume_them(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    region = region_goes_silent(agent, client, stake, factory, clock, 4)
    held = live_tasks(factory)
    assert sorted(held) == [node.node_id for node in region]  # nothing revoked or moved
    beat_rounds(client, clock, region, 3)  # back: the same leases go on
    for node in region:
        progress = node.post(f"/v1/tasks/{held[node.node_id]}/progress", {"progress": 0.6})
        assert progress.status_code == 200, progress.text
    assert live_tasks(factory) == held


def ended_sessions(factory: sessionmaker[Session]) -> dict[str, bool | None]:
    """node id -> `abrupt` of its ended sessions (one each in these tests)."""
    with factory() as session:
        return {row.node_id: row.abrupt for row in session.scalars(
            select(NodeSession).where(NodeSession.ended_at.is_not(None)))}


def test_a_silence_the_region_shares_is_kept_out_of_each_nodes_record(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    region = region_goes_silent(agent, client, stake, factory, clock, 4)
    assert ended_sessions(factory) == {node.node_id: False for node in region}
    book = pls_of(client).state.book
    assert all(book.summary(node.node_id, clock()).abrupt_departures == 0 for node in region)


def test_a_lone_silence_counts_as_the_nodes_own_departure(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    lone_node_goes_silent(agent, client, stake, factory, clock)
    assert ended_sessions(factory) == {"gpu-doomed": True}
    assert pls_of(client).state.book.summary("gpu-doomed", clock()).abrupt_departures == 1


def test_a_held_lease_lapses_when_the_silence_outlasts_the_hold(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    region_goes_silent(agent, client, stake, factory, clock, 3)
    clock.advance(pls_of(client).state.config.lease_hold.hold_s)
    assert client.post("/v1/admin/sweep", headers=ADMIN).json()["expired_leases"] == 3
    assert live_tasks(factory) == {}  # requeued for other nodes


def test_failed_verification_slashes_the_task_collateral_and_demotes_at_once(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    cheat = agent("gpu-cheat", slots=2)
    start_tasks([cheat], stake, factory, clock)
    with factory() as session:
        (lock,) = session.scalars(select(CollateralLock))
    failed = client.post(f"/v1/admin/tasks/{lock.task_id}/verification-failed",
                         json={"node_id": "gpu-cheat"}, headers=ADMIN)
    assert failed.status_code == 200, failed.text
    with factory.begin() as session:
        pls_of(client).staking.run_decide(session, now=clock())  # no decision delay for this one
    (action,) = slash_actions(factory)
    assert (action.payload["reason"], action.payload["amount"]) == (
        SlashReason.FAILED_VERIFICATION, str(lock.amount))
    with factory() as session:
        (tier,) = session.scalars(select(OutboxAction).where(OutboxAction.kind == "tier"))
    assert (tier.payload["provider"], tier.payload["tier"]) == (cheat.wallet.address, 0)
    make_job(factory, value=TOKEN, now=clock())
    assert cheat.post("/v1/nodes/gpu-cheat/lease").status_code == 204  # demoted: no NORMAL work


@pytest.mark.parametrize("named", ["gpu-bystander", "gpu-never-registered"])
def test_a_failed_verification_naming_a_node_that_did_not_run_the_task_records_nothing(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock, named: str) -> None:
    runner = agent("gpu-runner", slots=2)
    bystander = agent("gpu-bystander", slots=1)
    start_tasks([runner], stake, factory, clock)
    with factory() as session:
        lock = session.scalars(select(CollateralLock)).first()
    assert lock is not None
    book = pls_of(client).state.book
    before = book.summary(bystander.node_id, clock())
    failed = client.post(f"/v1/admin/tasks/{lock.task_id}/verification-failed",
                         json={"node_id": named}, headers=ADMIN)
    assert failed.status_code == 422, failed.text
    assert failed.json()["error"]["code"] == "node_not_on_task"
    with factory.begin() as session:
        pls_of(client).staking.run_decide(session, now=clock())
    assert slash_actions(factory) == []
    assert book.summary(bystander.node_id, clock()) == before


def test_a_lone_node_back_within_the_grace_keeps_its_lease_and_is_not_slashed(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    doomed = lone_node_goes_silent(agent, client, stake, factory, clock)
    held = live_tasks(factory)
    assert list(held) == ["gpu-doomed"]  # the lone grace: not revoked at the verdict
    beat_rounds(client, clock, [doomed], 3)  # back well inside the grace
    assert live_tasks(factory) == held
    decide_after_delay(client, factory, clock)
    assert slash_actions(factory) == []
    assert ended_sessions(factory)["gpu-doomed"] is True  # still its own departure


def test_a_lone_hold_that_lapses_is_an_abandonment_dated_at_the_dead_verdict(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    lone_node_goes_silent(agent, client, stake, factory, clock)
    dead_at = clock()
    pls = pls_of(client)
    clock.advance(pls.state.config.lease_hold.lone_grace_s + 5)
    assert client.post("/v1/admin/sweep", headers=ADMIN).json()["expired_leases"] == 1
    assert live_tasks(factory) == {}
    # Matured from the verdict: the decision delay counts from then, not from the lapse.
    config = pls.state.config
    clock.advance(config.slashing.decision_delay_s - config.lease_hold.lone_grace_s)
    with factory.begin() as session:
        pls.staking.run_decide(session, now=clock())
    (record,) = _slash_records(factory)
    assert record.reason == SlashReason.ABANDONMENT
    assert clock() - dead_at <= pls.state.config.slashing.decision_delay_s + 10
    with factory() as session:
        (lock,) = session.scalars(select(CollateralLock))
    assert lock.ended_at is not None and not lock.finished


def test_a_drained_node_that_goes_silent_is_never_slashed(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    leaving, survivor = agent("gpu-leaving", region="us"), agent("gpu-ok", region="eu")
    start_tasks([leaving], stake, factory, clock)
    beat_rounds(client, clock, [leaving, survivor], 30)
    assert leaving.post("/v1/nodes/gpu-leaving/drain").status_code == 200
    beat_rounds(client, clock, [survivor], 15)
    decide_after_delay(client, factory, clock)
    assert slash_actions(factory) == [] and _slash_records(factory) == []


def _slash_records(factory: sessionmaker[Session]) -> list[SlashRecord]:
    with factory() as session:
        return list(session.scalars(select(SlashRecord)))


def test_one_abandonment_is_slashed_once_whichever_replica_or_restarted_leader_decides(
        agent: Callable[..., LiveNode], client: TestClient, make_app: Callable[..., TestClient],
        stake: FixedStake, factory: sessionmaker[Session], clock: VirtualClock) -> None:
    """The leader decides an abandonment; then a replica that followed the same log (its
    policy holds the same abandonment, and decides at its own time, so under another slash
    id) takes over, and then a leader restarted over the database: one slash record and one
    slash action in all, however often each decides."""
    replica = make_app()  # follows the log from before the departure
    lone_node_goes_silent(agent, client, stake, factory, clock)
    decide_after_delay(client, factory, clock)  # the lone hold lapses: an abandonment
    decide_after_delay(client, factory, clock)  # decided after the delay
    assert len(slash_actions(factory)) == 1
    for deciding in (replica, replica, make_app(), client):
        decide_after_delay(deciding, factory, clock)
    assert len(slash_actions(factory)) == 1
    with factory() as session:
        assert len(list(session.scalars(select(SlashRecord)))) == 1
