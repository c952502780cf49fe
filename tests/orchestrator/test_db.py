from __future__ import annotations

from collections.abc import Callable

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect, select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import crud, outbox
from orchestrator.db.models import Base, Job, Lease, OutboxAction
from orchestrator.domain.fees import Fees
from orchestrator.domain.lifecycle import InvalidTransition, JobStatus, TaskStatus
from orchestrator.domain.types import NodeHealth
from orchestrator.scheduling.placer import Placer
from orchestrator.services import work
from orchestrator.telemetry.heartbeats import HeartbeatBuffer

SENDER = "0x" + "ab" * 20
FEES = Fees(max_fee_per_gas=20, max_priority_fee_per_gas=2)

NodeMaker = Callable[..., list[str]]
JobMaker = Callable[..., str]


def test_migrations_build_exactly_the_models(engine: Engine) -> None:
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)


def test_sqlite_runs_in_wal_mode(engine: Engine) -> None:
    if engine.dialect.name != "sqlite":
        return
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_token_amounts_beyond_64_bits_round_trip_exactly(
        factory: sessionmaker[Session], make_job: JobMaker) -> None:
    job_id = make_job(1)
    with factory.begin() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.amount = 2**255 + 12345
    with factory() as session:
        assert session.scalar(select(Job.amount).where(Job.id == job_id)) == 2**255 + 12345


def test_refused_transition_changes_nothing(factory: sessionmaker[Session],
                                            make_job: JobMaker) -> None:
    job_id = make_job(1)
    with factory() as session:
        job = crud.get_job(session, job_id=job_id)
        assert job is not None
        try:
            crud.set_job_status(session, job=job, target=JobStatus.SETTLED, now=1.0, reason="x")
        except InvalidTransition:
            session.rollback()
    with factory() as session:
        assert session.scalar(select(Job.status).where(Job.id == job_id)) == "funded"
        assert [h.to_status for h in crud.status_history(session, entity="job",
                                                         entity_id=job_id)] == ["funded"]


def test_nonce_is_accepted_once(factory: sessionmaker[Session]) -> None:
    with factory.begin() as session:
        assert crud.claim_nonce(session, address="0x" + "1" * 40, nonce="7", expires_at=10)
    with factory.begin() as session:
        assert not crud.claim_nonce(session, address="0x" + "1" * 40, nonce="7", expires_at=10)
        assert crud.claim_nonce(session, address="0x" + "2" * 40, nonce="7", expires_at=10)
    with factory.begin() as session:
        assert crud.forget_expired_nonces(session, now=11) == 2


def test_cleanup_forgets_only_nonces_whose_requests_can_no_longer_be_accepted(
        factory: sessionmaker[Session]) -> None:
    signer = "0x" + "1" * 40
    with factory.begin() as session:
        assert crud.claim_nonce(session, address=signer, nonce="1", expires_at=10)
        assert crud.claim_nonce(session, address=signer, nonce="2", expires_at=20)
    # A request whose expiry is `now` is still accepted, so its nonce must still be known.
    with factory.begin() as session:
        assert crud.forget_expired_nonces(session, now=10) == 0
    with factory.begin() as session:
        assert not crud.claim_nonce(session, address=signer, nonce="1", expires_at=10)
    with factory.begin() as session:
        assert crud.forget_expired_nonces(session, now=15) == 1
    with factory.begin() as session:
        assert not crud.claim_nonce(session, address=signer, nonce="2", expires_at=20)
        assert crud.claim_nonce(session, address=signer, nonce="1", expires_at=30)


def test_node_health_and_drain_moves_are_recorded_and_a_drain_happens_once(
        factory: sessionmaker[Session], make_nodes: NodeMaker) -> None:
    (node_id,) = make_nodes(1)
    with factory.begin() as session:
        node = crud.get_node(session, node_id=node_id)
        assert node is not None
        crud.set_node_health(session, node=node, health=NodeHealth.SUSPECT, now=1.0, reason="d")
        crud.set_node_health(session, node=node, health=NodeHealth.SUSPECT, now=2.0, reason="d")
        crud.set_node_health(session, node=node, health=NodeHealth.DEAD, now=3.0, reason="d")
        assert crud.start_drain(session, node=node, now=4.0, reason="graceful")
        assert not crud.start_drain(session, node=node, now=5.0, reason="graceful")
    with factory() as session:
        history = crud.status_history(session, entity="node", entity_id=node_id)
        assert [(h.from_status, h.to_status, h.at) for h in history] == [
            ("alive", "suspect", 1.0), ("suspect", "dead", 3.0), ("accepting", "draining", 4.0)]


def test_a_lease_moves_only_along_its_table(factory: sessionmaker[Session],
                                            make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, slots=1)
    make_job(1)
    Placer(factory, lease_ttl_s=30, clock=lambda: 0.0).place_all()
    with factory() as session:
        (lease,) = crud.live_leases(session)
        crud.activate_lease(session, lease=lease)
        with pytest.raises(InvalidTransition,
                           match=r"(?i)^lease cannot move from .*ACTIVE.* to .*ACTIVE"):
            crud.activate_lease(session, lease=lease)
        crud.release_lease(session, lease=lease, now=1.0, reason="completed")
        assert (lease.state, lease.released_at, lease.release_reason) == (
            "released", 1.0, "completed")
        with pytest.raises(InvalidTransition, match=r"(?i)^lease cannot move from .*RELEASED"):
            crud.release_lease(session, lease=lease, now=2.0, reason="again")


def test_chain_action_is_queued_once_per_idempotency_key(factory: sessionmaker[Session]) -> None:
    for _ in range(2):
        with factory.begin() as session:
            crud.enqueue_chain_action(session, kind="settle", idempotency_key="settle:0x1",
                                      payload={"job": "0x1"}, now=0.0)
    with factory() as session:
        assert len(outbox.pending_actions(session, limit=10)) == 1


def test_recent_outbox_actions_are_newest_first_filtered_and_limited(
        factory: sessionmaker[Session]) -> None:
    with factory.begin() as session:
        for key in ("a", "b", "c", "d"):
            crud.enqueue_chain_action(session, kind="tier", idempotency_key=key,
                                      payload={}, now=0.0)
    with factory.begin() as session:
        (first,) = outbox.pending_actions(session, limit=1)
        outbox.record_failed(session, action_ids=[first.id], expected=outbox.OutboxStatus.PENDING,
                             now=1.0, note="bad")
    with factory() as session:
        keys = [row.idempotency_key for row in outbox.recent_actions(session, status=None,
                                                                      limit=3)]
        assert keys == ["d", "c", "b"]
        pending = outbox.recent_actions(session, status=outbox.OutboxStatus.PENDING, limit=10)
        assert [row.idempotency_key for row in pending] == ["d", "c", "b"]
        failed = outbox.recent_actions(session, status=outbox.OutboxStatus.FAILED, limit=10)
        assert [(row.idempotency_key, row.note) for row in failed] == [("a", "bad")]


def outbox_rows(session: Session) -> list[tuple[object, ...]]:
    return [(r.idempotency_key, r.status, r.tx_hash, r.nonce, r.raw_tx, r.attempts,
             r.next_attempt_at, r.note, r.updated_at)
            for r in session.scalars(select(OutboxAction).order_by(OutboxAction.id))]


def test_outbox_status_moves_write_exactly_their_fields(factory: sessionmaker[Session]) -> None:
    pending, sent = outbox.OutboxStatus.PENDING, outbox.OutboxStatus.SENT
    with factory.begin() as session:
        for key in ("a", "b"):
            crud.enqueue_chain_action(session, kind="settle", idempotency_key=key,
                                      payload={}, now=0.0)
    with factory.begin() as session:
        a, b = (e.id for e in outbox.pending_actions(session, limit=10))
        outbox.defer(session, action_ids=[a, b], expected=pending, now=1.0, retry_at=5.0,
                     note="transient")
        assert outbox_rows(session) == [
            ("a", "pending", None, None, None, 1, 5.0, "transient", 1.0),
            ("b", "pending", None, None, None, 1, 5.0, "transient", 1.0)]
        outbox.record_signed(session, action_ids=[a, b], tx_hash="0xh", sender=SENDER,
                             nonce=3, fees=FEES, raw_tx="0xraw", now=2.0)
        assert outbox_rows(session) == [  # the signed bytes once, on the batch's first row
            ("a", "sent", "0xh", 3, "0xraw", 2, None, "transient", 2.0),
            ("b", "sent", "0xh", 3, None, 2, None, "transient", 2.0)]
        assert [e.id for e in outbox.in_flight_actions(session)] == [a, b]
        assert outbox.pending_actions(session, limit=10) == []
        with pytest.raises(outbox.OutboxConflict, match=rf"outbox rows \[{a}, {b}\] are no "
                           "longer pending"):
            outbox.record_signed(session, action_ids=[a, b], tx_hash="0xi", sender=SENDER,
                                 nonce=4, fees=FEES, raw_tx="0xother", now=3.0)
        outbox.return_to_pending(session, action_ids=[b], now=3.0, note="nonce spent")
        outbox.record_confirmed(session, action_ids=[a], expected=sent, now=4.0, note="done")
        assert outbox_rows(session) == [
            ("a", "confirmed", "0xh", 3, "0xraw", 2, None, "done", 4.0),
            ("b", "pending", None, None, None, 2, None, "nonce spent", 3.0)]
        outbox.record_failed(session, action_ids=[b], expected=pending, now=5.0, note="bad")
        assert outbox_rows(session)[1] == ("b", "failed", None, None, None, 2, None, "bad", 5.0)
        with pytest.raises(outbox.OutboxConflict):
            outbox.record_confirmed(session, action_ids=[b], expected=sent, now=6.0)


def test_outbox_keeps_every_version_of_a_nonce_and_owns_the_next_nonce(
        factory: sessionmaker[Session]) -> None:
    sent = outbox.OutboxStatus.SENT
    bumped = Fees(max_fee_per_gas=23, max_priority_fee_per_gas=3)
    with factory.begin() as session:
        for key in ("a", "b"):
            crud.enqueue_chain_action(session, kind="settle", idempotency_key=key,
                                      payload={}, now=0.0)
    with factory.begin() as session:
        a, b = (e.id for e in outbox.pending_actions(session, limit=10))
        assert outbox.next_nonce(session, address=SENDER) is None
        assert outbox.in_flight_nonce_floor(session, address=SENDER) == 0
        outbox.record_signed(session, action_ids=[a], tx_hash="0xa1", sender=SENDER, nonce=7,
                             fees=FEES, raw_tx="0xraw1", now=1.0)
        outbox.record_signed(session, action_ids=[b], tx_hash="0xb1", sender=SENDER, nonce=8,
                             fees=FEES, raw_tx="0xrawb", now=1.0)
        assert outbox.next_nonce(session, address=SENDER) == 9
        assert outbox.in_flight_nonce_floor(session, address=SENDER) == 9
        assert outbox.in_flight_nonce_floor(session, address="0x" + "11" * 20) == 0
        outbox.record_replacement(session, action_ids=[a], tx_hash="0xa2", sender=SENDER,
                                  nonce=7, fees=bumped, raw_tx="0xraw2", now=2.0)
        assert [(v.tx_hash, v.nonce, v.fees, v.signed_at)
                for v in outbox.versions(session, "0xa2")] == [
            ("0xa1", 7, FEES, 1.0), ("0xa2", 7, bumped, 2.0)]
        assert outbox.versions(session, "0xnever") == []
        assert outbox_rows(session)[0][2:5] == ("0xa2", 7, "0xraw2")
        outbox.record_mined_version(session, action_ids=[a], tx_hash="0xa1", now=3.0)
        outbox.record_confirmed(session, action_ids=[a], expected=sent, now=3.0)
        assert outbox.in_flight_nonce_floor(session, address=SENDER) == 9  # b is still out
        assert outbox.reorged_rows(session, tx_hashes=["0xA2"]) == []  # a version not mined
        assert outbox.reorged_rows(session, tx_hashes=["0xA1", "0xb1"]) == [a]  # b: in flight
        outbox.reopen_reorged(session, action_ids=[a], now=4.0, note="reorged")
        assert outbox_rows(session)[0][1:5] == ("sent", "0xa1", 7, "0xraw2")
        with pytest.raises(outbox.OutboxConflict):
            outbox.reopen_reorged(session, action_ids=[a], now=4.0, note="twice")
        outbox.set_next_nonce(session, address=SENDER, nonce=20, now=5.0)
        assert outbox.next_nonce(session, address=SENDER) == 20


def test_heartbeat_buffer_writes_a_batch_and_renews_started_leases_only(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    nodes = make_nodes(3, slots=1)
    make_job(3)
    Placer(factory, lease_ttl_s=30, clock=lambda: 0.0).place_all()
    with factory.begin() as session:
        for lease in crud.live_leases(session):
            if lease.node_id == nodes[0]:
                lease.state = "active"
    buffer = HeartbeatBuffer(factory, lease_ttl_s=60, flush_every_s=0.1)
    buffer.record(nodes[0], 100.0)
    buffer.record(nodes[0], 105.0)
    buffer.record(nodes[2], 104.0)  # beating, but its reservation was never started
    assert buffer.flush() == 2
    assert buffer.flush() == 0
    with factory() as session:
        node = crud.get_node(session, node_id=nodes[0])
        assert node is not None and node.last_heartbeat_at == 105.0
        expiry = dict(session.execute(select(Lease.node_id, Lease.expires_at)).all())
        assert expiry == {nodes[0]: 165.0, nodes[1]: 30.0, nodes[2]: 30.0}


def test_lapsed_running_lease_records_the_work_lost(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, slots=1)
    make_job(1)
    (placed,) = Placer(factory, lease_ttl_s=30, clock=lambda: 0.0).place_all().placed
    with factory.begin() as session:
        task = crud.job_tasks(session, job_id=placed.job_id)[0]
        crud.set_task_status(session, task=task, target=TaskStatus.RUNNING, now=1.0, reason="go")
        task.progress, task.checkpoint_progress = 0.9, 0.6
    with factory.begin() as session:
        assert work.expire_leases(session, now=31.0) == 1
    with factory() as session:
        (event,) = crud.recovery_events(session, task_id=placed.task_id)
        assert event.cause == "lapsed" and abs(event.rework - 0.3) < 1e-9

