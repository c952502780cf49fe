"""A node whose agent restarts (a crash, a reboot, an upgrade) and logs in again with a new
session key within the lone grace takes its held tasks back: the new process pulls the same
lease and resumes from the last checkpoint, and nobody is slashed. A task the node as it
registered now cannot run is released for placement at once, also unslashed. Either way the
old process's session ends abruptly once, whether or not the detector saw it go."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import leases as lease_db
from orchestrator.db import pls as store
from orchestrator.db.models import CollateralLock, Lease, SlashRecord
from orchestrator.domain.continuity import session_address
from orchestrator.domain.lifecycle import LeaseState
from tests.builders import TOKEN, make_job
from tests.clients import LiveNode, VirtualClock, registration
from tests.services.pls_harness import ADMIN, FixedStake
from tests.services.test_placement_gates import pls_of
from tests.services.test_session_key_login import login
from tests.services.test_slashing_service import (
    beat_rounds,
    decide_after_delay,
    live_tasks,
    slash_actions,
)


def restart(node: LiveNode, **registered: object) -> None:
    """What a new agent process does first: register (its spec as it is now), then log in
    naming its own session key."""
    again = node.wallet.send("POST", "/v1/nodes", registration(node.node_id, region="us",
                                                               **registered))
    assert again.status_code == 200, again.text
    key = session_address(os.urandom(32))
    answer = node.wallet.send("POST", "/v1/auth/login", {"node_id": node.node_id,
                                                         "session_key": key})
    assert answer.status_code == 200, answer.text
    node.token = answer.json()["token"]


def silent_with_checkpointed_tasks(agent: Callable[..., LiveNode], client: TestClient,
                                   stake: FixedStake, factory: sessionmaker[Session],
                                   clock: VirtualClock, slots: int
                                   ) -> tuple[LiveNode, LiveNode, dict[int, str]]:
    """gpu-doomed (us, `slots` slots, logged in with a session key) runs one task per slot,
    each checkpointed at 0.5 and on at 0.7, then goes silent alone while gpu-ok (eu) beats
    on, until the detector calls it DEAD: its leases are held for the lone grace. Returns
    both nodes and each held task's checkpoint."""
    doomed = agent("gpu-doomed", region="us", slots=slots)
    survivor = agent("gpu-ok", region="eu")
    assert login(doomed, session_address(os.urandom(32))) == 200
    stake.free[doomed.wallet.address] = stake.free[survivor.wallet.address] = 10 * TOKEN
    make_job(factory, tasks=slots, value=TOKEN, now=clock())
    checkpoints: dict[int, str] = {}
    for _ in range(slots):
        lease = doomed.post("/v1/nodes/gpu-doomed/lease")
        assert lease.status_code == 200, lease.text
        task_id = int(lease.json()["task_id"])
        doomed.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.0})
        checkpoints[task_id] = doomed.upload(f"task {task_id} half done".encode())
        assert doomed.post(f"/v1/tasks/{task_id}/checkpoints", {
            "sha256": checkpoints[task_id], "progress": 0.5}).status_code == 200
        doomed.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.7})
    beat_rounds(client, clock, [doomed, survivor], 30)
    held: list[str] = []
    assert beat_rounds(client, clock, [survivor], 15, held) == ["gpu-doomed"]
    assert held == ["gpu-doomed"]  # the lone grace: not revoked at the verdict
    assert set(live_tasks(factory)) == {"gpu-doomed"}
    return doomed, survivor, checkpoints


def test_a_restart_within_the_lone_grace_resumes_the_held_task_on_the_node_unslashed(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    doomed, survivor, checkpoints = silent_with_checkpointed_tasks(agent, client, stake,
                                                                   factory, clock, slots=1)
    ((task_id, checkpoint),) = checkpoints.items()
    with factory() as session:
        (held,) = lease_db.live_leases(session, node_id="gpu-doomed")
        held_id = held.id
    clock.advance(60)  # back well inside the 300 s grace

    restart(doomed)

    assert survivor.post("/v1/nodes/gpu-ok/lease").status_code == 204  # not offered elsewhere
    pulled = doomed.post("/v1/nodes/gpu-doomed/lease")
    assert pulled.status_code == 200, pulled.text
    assert (pulled.json()["lease_id"], pulled.json()["task_id"],
            pulled.json()["resume_from_sha256"], pulled.json()["resume_progress"]) == (
        held_id, task_id, checkpoint, 0.5)
    clock.advance(2)
    resumed_at = clock()
    assert doomed.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.5}).status_code == 200
    with factory() as session:
        lease = session.get(Lease, held_id)
        assert lease is not None and lease.state == LeaseState.ACTIVE.value
        (event,) = lease_db.recovery_events(session, task_id=task_id)
    assert (event.from_node, event.resumed_on, event.cause) == ("gpu-doomed", "gpu-doomed",
                                                                "restart")
    assert abs(event.rework - 0.2) < 1e-9 and event.resumed_at == resumed_at
    # the new process renders on past where the grace would have lapsed, and finishes
    beat_rounds(client, clock, [doomed, survivor], 70)
    result = doomed.upload(b"the finished task")
    done = doomed.post(f"/v1/tasks/{task_id}/complete", {"result_sha256": result})
    assert done.status_code == 200, done.text

    decide_after_delay(client, factory, clock)
    assert slash_actions(factory) == []
    with factory() as session:
        assert list(session.scalars(select(SlashRecord))) == []
        lease = session.get(Lease, held_id)
        assert lease is not None and lease.release_reason == "completed"
    assert pls_of(client).state.engine.staking.pending_since(str(task_id)) is None


def test_a_restart_with_fewer_slots_releases_the_task_it_cannot_take_back_at_once(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    doomed, survivor, checkpoints = silent_with_checkpointed_tasks(agent, client, stake,
                                                                   factory, clock, slots=2)
    kept, moved = sorted(checkpoints)  # on slots 0 and 1
    clock.advance(60)

    restart(doomed, slots=1)  # slot 1 is gone

    again = doomed.post("/v1/nodes/gpu-doomed/lease").json()
    assert (again["task_id"], again["slot"], again["resume_progress"]) == (kept, 0, 0.5)
    taken = survivor.post("/v1/nodes/gpu-ok/lease")  # placed again at once, from its checkpoint
    assert taken.status_code == 200, taken.text
    assert (taken.json()["task_id"], taken.json()["resume_from_sha256"],
            taken.json()["resume_progress"]) == (moved, checkpoints[moved], 0.5)
    with factory() as session:
        (event,) = lease_db.recovery_events(session, task_id=moved)
        assert (event.from_node, event.cause) == ("gpu-doomed", "restart")
    assert 'mesh_task_retries_total{reason="restart"} 1.0' in client.get("/metrics").text

    decide_after_delay(client, factory, clock)
    assert slash_actions(factory) == []  # back in time: neither task is an abandonment


def test_the_same_process_logging_in_again_keeps_its_running_lease(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    """A token that expired, or an orchestrator that forgot it: the same key, nothing moves."""
    node = agent("gpu-steady", region="us")
    key = session_address(os.urandom(32))
    assert login(node, key) == 200
    stake.free[node.wallet.address] = 10 * TOKEN
    make_job(factory, tasks=1, value=TOKEN, now=clock())
    task_id = node.post("/v1/nodes/gpu-steady/lease").json()["task_id"]
    node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.3})

    assert login(node, key) == 200

    with factory() as session:
        (lease,) = lease_db.live_leases(session, node_id="gpu-steady")
        assert lease.state == LeaseState.ACTIVE.value
        assert lease_db.recovery_events(session, task_id=task_id) == []
        (lock,) = session.scalars(select(CollateralLock))
        assert lock.ended_at is None
    assert node.post("/v1/nodes/gpu-steady/lease").status_code == 204


def test_a_restart_after_the_lone_grace_takes_nothing_back(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    """Back too late, even before a sweep released the lapsed hold: the task is not offered
    to the node again and the sweep moves it; the lapsed hold is an abandonment, judged as
    any departure (back within the reconnect grace: only partitioned, nobody pays)."""
    doomed, survivor, checkpoints = silent_with_checkpointed_tasks(agent, client, stake,
                                                                   factory, clock, slots=1)
    ((task_id, checkpoint),) = checkpoints.items()
    clock.advance(pls_of(client).state.config.lease_hold.lone_grace_s + 5)  # no sweep meanwhile

    restart(doomed)

    assert doomed.post("/v1/nodes/gpu-doomed/lease").status_code == 204
    survivor.beat()
    client.app.state.ctx.heartbeats.flush()  # type: ignore[attr-defined]
    assert client.post("/v1/admin/sweep", headers=ADMIN).json()["expired_leases"] == 1
    taken = survivor.post("/v1/nodes/gpu-ok/lease").json()
    assert (taken["task_id"], taken["resume_from_sha256"]) == (task_id, checkpoint)
    with factory() as session:
        (lapsed,) = session.scalars(select(Lease).where(Lease.node_id == "gpu-doomed"))
    assert lapsed.release_reason == "lease lapsed"
    decide_after_delay(client, factory, clock)
    assert slash_actions(factory) == []


def sessions_of(factory: sessionmaker[Session], node_id: str) -> list[tuple[float, float | None,
                                                                             bool | None]]:
    """(started, ended, abrupt) of each of the node's sessions in the DB, oldest first."""
    with factory() as session:
        return [(s.started_at, s.ended_at, s.abrupt) for s in store.all_sessions(session)
                if s.node_id == node_id]


def test_a_restart_the_detector_never_saw_ends_the_old_process_session_abruptly(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock,
        factory: sessionmaker[Session]) -> None:
    """SIGKILL then a new process within the detector's threshold (no DEAD verdict): the new
    key proves the old process gone, so its session ends abruptly at the login and the new
    one starts there, in the DB and in the engine, as a DEAD verdict and a return would have
    recorded it (the simulator records a restart the same way)."""
    node = agent("gpu-1")
    assert login(node, session_address(os.urandom(32))) == 200
    assert beat_rounds(client, clock, [node], 20) == []  # up 100 s
    restart(node)
    restarted_at = clock()
    assert sessions_of(factory, "gpu-1") == [(pytest.approx(restarted_at - 100), restarted_at,
                                              True), (restarted_at, None, None)]
    book = pls_of(client).state.engine.book
    assert book.histories()[book.index_of("gpu-1")] == ([pytest.approx(100.0)], [True])
    assert book.uptime("gpu-1", restarted_at) == 0.0
    assert beat_rounds(client, clock, [node], 4) == []  # the new process beats on: one session
    assert len(sessions_of(factory, "gpu-1")) == 2


def test_a_restart_after_a_dead_verdict_is_one_departure_not_two(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock,
        factory: sessionmaker[Session]) -> None:
    """The sweep ended the old process's session at its DEAD verdict; the new process's
    registration opened the next one, which its login leaves open."""
    node, peer = agent("gpu-1"), agent("gpu-2", region="eu")
    assert login(node, session_address(os.urandom(32))) == 200
    beat_rounds(client, clock, [node, peer], 20)
    assert "gpu-1" in beat_rounds(client, clock, [peer], 15)
    restart(node)
    restarted_at = clock()
    (_, _, abrupt), (started, ended, _) = sessions_of(factory, "gpu-1")
    assert abrupt is True and (started, ended) == (restarted_at, None)
    book = pls_of(client).state.engine.book
    assert book.histories()[book.index_of("gpu-1")][1] == [True]
