from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import jobs as job_db
from orchestrator.db import leases as lease_db
from orchestrator.db import nodes as node_db
from orchestrator.db import nonces as nonce_db
from orchestrator.db import outbox
from orchestrator.db import statuses as status_db
from orchestrator.db.models import Base, Job, Lease, OutboxAction
from orchestrator.db.placement import waiting_tasks
from orchestrator.db.session import (
    MIGRATIONS_DIR,
    make_engine,
    make_session_factory,
    upgrade_to_head,
)
from orchestrator.domain.chain_actions import AssignCollateral, ChainAction, ProveAssignment
from orchestrator.domain.errors import InvalidTransition
from orchestrator.domain.fees import Fees
from orchestrator.domain.lifecycle import JobStatus, TaskStatus
from orchestrator.domain.types import NodeHealth, Priority, TaskNeeds
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


def test_the_queue_order_migration_gives_every_existing_task_its_latest_start(
        tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'before.db'}")
    config = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0016")
        connection.execute(text(
            "INSERT INTO jobs (id, customer, status, spec, spec_hash, amount, deadline, "
            "priority, created_at, updated_at) VALUES ('0xj', '0xc', 'funded', '{}', '0x', "
            "'1', 10000.0, 'normal', 0, 0)"))
        for index, needs in enumerate(('{"expected_duration_s": 3600.0}', "{}")):
            connection.execute(text(
                "INSERT INTO tasks (job_id, \"index\", payload, needs, status, attempts, "
                "progress, checkpoint_progress, created_at, updated_at) VALUES "
                f"('0xj', {index}, '{{}}', '{needs}', 'pending', 0, 0, 0, 0, 0)"))
    upgrade_to_head(engine)
    with make_session_factory(engine)() as session:
        assert [w.latest_start for w in waiting_tasks(session, limit=5)] == [6400.0, 9940.0]
    engine.dispose()


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
        job = job_db.get_job(session, job_id=job_id)
        assert job is not None
        try:
            status_db.set_job_status(session, job=job, target=JobStatus.SETTLED, now=1.0,
                                     reason="x")
        except InvalidTransition:
            session.rollback()
    with factory() as session:
        assert session.scalar(select(Job.status).where(Job.id == job_id)) == "funded"
        assert [h.to_status for h in status_db.status_history(session, entity="job",
                                                         entity_id=job_id)] == ["funded"]


def test_nonce_is_accepted_once(factory: sessionmaker[Session]) -> None:
    with factory.begin() as session:
        assert nonce_db.claim_nonce(session, address="0x" + "1" * 40, nonce="7", expires_at=10)
    with factory.begin() as session:
        assert not nonce_db.claim_nonce(session, address="0x" + "1" * 40, nonce="7", expires_at=10)
        assert nonce_db.claim_nonce(session, address="0x" + "2" * 40, nonce="7", expires_at=10)
    with factory.begin() as session:
        assert nonce_db.forget_expired_nonces(session, now=11) == 2


def test_cleanup_forgets_only_nonces_whose_requests_can_no_longer_be_accepted(
        factory: sessionmaker[Session]) -> None:
    signer = "0x" + "1" * 40
    with factory.begin() as session:
        assert nonce_db.claim_nonce(session, address=signer, nonce="1", expires_at=10)
        assert nonce_db.claim_nonce(session, address=signer, nonce="2", expires_at=20)
    # A request whose expiry is `now` is still accepted, so its nonce must still be known.
    with factory.begin() as session:
        assert nonce_db.forget_expired_nonces(session, now=10) == 0
    with factory.begin() as session:
        assert not nonce_db.claim_nonce(session, address=signer, nonce="1", expires_at=10)
    with factory.begin() as session:
        assert nonce_db.forget_expired_nonces(session, now=15) == 1
    with factory.begin() as session:
        assert not nonce_db.claim_nonce(session, address=signer, nonce="2", expires_at=20)
        assert nonce_db.claim_nonce(session, address=signer, nonce="1", expires_at=30)


def test_node_health_and_drain_moves_are_recorded_and_a_drain_happens_once(
        factory: sessionmaker[Session], make_nodes: NodeMaker) -> None:
    (node_id,) = make_nodes(1)
    with factory.begin() as session:
        node = node_db.get_node(session, node_id=node_id)
        assert node is not None
        node_db.set_node_health(session, node=node, health=NodeHealth.SUSPECT, now=1.0, reason="d")
        node_db.set_node_health(session, node=node, health=NodeHealth.SUSPECT, now=2.0, reason="d")
        node_db.set_node_health(session, node=node, health=NodeHealth.DEAD, now=3.0, reason="d")
        assert node_db.start_drain(session, node=node, now=4.0, reason="graceful")
        assert not node_db.start_drain(session, node=node, now=5.0, reason="graceful")
    with factory() as session:
        history = status_db.status_history(session, entity="node", entity_id=node_id)
        assert [(h.from_status, h.to_status, h.at) for h in history] == [
            ("alive", "suspect", 1.0), ("suspect", "dead", 3.0), ("accepting", "draining", 4.0)]


def test_a_lease_moves_only_along_its_table(factory: sessionmaker[Session],
                                            make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, slots=1)
    make_job(1)
    Placer(factory, lease_ttl_s=30, clock=lambda: 0.0).place_all()
    with factory() as session:
        (lease,) = lease_db.live_leases(session)
        lease_db.activate_lease(session, lease=lease)
        with pytest.raises(InvalidTransition,
                           match=r"(?i)^lease cannot move from .*ACTIVE.* to .*ACTIVE"):
            lease_db.activate_lease(session, lease=lease)
        lease_db.release_lease(session, lease=lease, now=1.0, reason="completed")
        assert (lease.state, lease.released_at, lease.release_reason) == (
            "released", 1.0, "completed")
        with pytest.raises(InvalidTransition, match=r"(?i)^lease cannot move from .*RELEASED"):
            lease_db.release_lease(session, lease=lease, now=2.0, reason="again")


def test_chain_action_is_queued_once_per_idempotency_key(factory: sessionmaker[Session]) -> None:
    queued = []
    for _ in range(2):
        with factory.begin() as session:
            queued.append(outbox.enqueue_chain_action(
                session, kind="settle", idempotency_key="settle:0x1", payload={"job": "0x1"},
                now=0.0))
    assert queued == [True, False]  # the second is told it was already queued
    with factory() as session:
        assert len(outbox.pending_actions(session, limit=10)) == 1


def test_recent_outbox_actions_are_newest_first_filtered_and_limited(
        factory: sessionmaker[Session]) -> None:
    with factory.begin() as session:
        for key in ("a", "b", "c", "d"):
            outbox.enqueue_chain_action(session, kind="tier", idempotency_key=key,
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


def queue_settles(factory: sessionmaker[Session], *keys: str) -> list[int]:
    """Settle rows (empty payloads) queued under `keys`; their ids in queue order."""
    with factory.begin() as session:
        for key in keys:
            outbox.enqueue_chain_action(session, kind="settle", idempotency_key=key,
                                        payload={}, now=0.0)
        session.flush()
        return [entry.id for entry in outbox.pending_actions(session, limit=len(keys))]


def outbox_rows(session: Session) -> list[tuple[object, ...]]:
    return [(r.idempotency_key, r.status, r.tx_hash, r.nonce, r.raw_tx, r.attempts,
             r.next_attempt_at, r.note, r.updated_at)
            for r in session.scalars(select(OutboxAction).order_by(OutboxAction.id))]


def test_outbox_status_moves_write_exactly_their_fields(factory: sessionmaker[Session]) -> None:
    pending, sent = outbox.OutboxStatus.PENDING, outbox.OutboxStatus.SENT
    a, b = queue_settles(factory, "a", "b")
    with factory.begin() as session:
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
    a, b = queue_settles(factory, "a", "b")
    with factory.begin() as session:
        assert outbox.next_nonce(session, address=SENDER) is None
        assert outbox.used_nonce_floor(session, address=SENDER) == 0
        outbox.record_signed(session, action_ids=[a], tx_hash="0xa1", sender=SENDER, nonce=7,
                             fees=FEES, raw_tx="0xraw1", now=1.0)
        outbox.record_signed(session, action_ids=[b], tx_hash="0xb1", sender=SENDER, nonce=8,
                             fees=FEES, raw_tx="0xrawb", now=1.0)
        assert outbox.next_nonce(session, address=SENDER) == 9
        assert outbox.used_nonce_floor(session, address=SENDER) == 9
        assert outbox.used_nonce_floor(session, address="0x" + "11" * 20) == 0
        outbox.record_replacement(session, action_ids=[a], tx_hash="0xa2", sender=SENDER,
                                  nonce=7, fees=bumped, raw_tx="0xraw2", now=2.0)
        assert [(v.tx_hash, v.nonce, v.fees, v.signed_at)
                for v in outbox.versions(session, "0xa2")] == [
            ("0xa1", 7, FEES, 1.0), ("0xa2", 7, bumped, 2.0)]
        assert outbox.versions(session, "0xnever") == []
        assert outbox_rows(session)[0][2:5] == ("0xa2", 7, "0xraw2")
        outbox.record_mined_version(session, action_ids=[a], tx_hash="0xa1", now=3.0)
        outbox.record_confirmed(session, action_ids=[a], expected=sent, now=3.0)
        assert outbox.used_nonce_floor(session, address=SENDER) == 9  # b is still out
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
        for lease in lease_db.live_leases(session):
            if lease.node_id == nodes[0]:
                lease.state = "active"
    buffer = HeartbeatBuffer(factory, lease_ttl_s=60, flush_every_s=0.1)
    buffer.record(nodes[0], 100.0)
    buffer.record(nodes[0], 105.0)
    buffer.record(nodes[2], 104.0)  # beating, but its reservation was never started
    assert buffer.flush() == 2
    assert buffer.flush() == 0
    with factory() as session:
        node = node_db.get_node(session, node_id=nodes[0])
        assert node is not None and node.last_heartbeat_at == 105.0
        expiry = dict(session.execute(select(Lease.node_id, Lease.expires_at)).all())
        assert expiry == {nodes[0]: 165.0, nodes[1]: 30.0, nodes[2]: 30.0}


def test_lapsed_running_lease_records_the_work_lost(
        factory: sessionmaker[Session], make_nodes: NodeMaker, make_job: JobMaker) -> None:
    make_nodes(1, slots=1)
    make_job(1)
    (placed,) = Placer(factory, lease_ttl_s=30, clock=lambda: 0.0).place_all().placed
    with factory.begin() as session:
        task = job_db.job_tasks(session, job_id=placed.job_id)[0]
        status_db.set_task_status(session, task=task, target=TaskStatus.RUNNING, now=1.0,
                                  reason="go")
        task.progress, task.checkpoint_progress = 0.9, 0.6
    with factory.begin() as session:
        assert work.expire_leases(session, now=31.0).leases == 1
    with factory() as session:
        (event,) = lease_db.recovery_events(session, task_id=placed.task_id)
        assert event.cause == "lapsed" and abs(event.rework - 0.3) < 1e-9



def queue(session: Session, *actions: tuple[str, ChainAction]) -> list[int]:
    """Queue typed actions (key, action) and return their row ids in queue order."""
    for key, action in actions:
        assert outbox.queue_action(session, action=action, idempotency_key=key, now=0.0)
    session.flush()
    keys = [key for key, _ in actions]
    by_key = dict(session.execute(select(OutboxAction.idempotency_key, OutboxAction.id)
                                  .where(OutboxAction.idempotency_key.in_(keys))).all())
    return [by_key[key] for key in keys]


def sign(session: Session, ids: list[int], tx_hash: str, nonce: int, *, sender: str = SENDER,
         now: float = 1.0) -> None:
    outbox.record_signed(session, action_ids=ids, tx_hash=tx_hash, sender=sender, nonce=nonce,
                         fees=FEES, raw_tx="0xraw" + tx_hash[2:], now=now)


def test_an_outbox_entry_carries_every_field_of_its_row(factory: sessionmaker[Session]) -> None:
    with factory.begin() as session:
        outbox.enqueue_chain_action(session, kind="settle", idempotency_key="a",
                                    payload={"job_id": "0x01"}, now=0.5)
    with factory.begin() as session:
        (a,) = (e.id for e in outbox.pending_actions(session, limit=10))
        sign(session, [a], "0xh1", 3, now=2.0)
        assert outbox.in_flight_actions(session) == [outbox.OutboxEntry(
            id=a, kind="settle", payload={"job_id": "0x01"}, attempts=1, tx_hash="0xh1",
            raw_tx="0xrawh1", nonce=3, next_attempt_at=None, created_at=0.5)]


def test_the_nonce_floor_counts_every_nonce_the_keys_own_rows_transactions_hold(
        factory: sessionmaker[Session]) -> None:
    # Confirmed and failed rows hold theirs too: a reorg the index has not seen yet, or a
    # lagging node, may not count them, and a nonce given twice would let one action's
    # receipt confirm another's rows (`versions` reads every signing at a nonce).
    other = "0x" + "12" * 20
    sent = outbox.OutboxStatus.SENT
    a, b, c, d, e = queue_settles(factory, "a", "b", "c", "d", "e")
    with factory.begin() as session:
        sign(session, [a], "0xa1", 5)
        sign(session, [b], "0xb1", 9, sender=other)  # another key's higher nonce
        assert outbox.used_nonce_floor(session, address=SENDER) == 6
        assert outbox.used_nonce_floor(session, address=other) == 10
        sign(session, [c], "0xc1", 6)
        outbox.record_confirmed(session, action_ids=[c], expected=sent, now=2.0)
        assert outbox.used_nonce_floor(session, address=SENDER) == 7
        sign(session, [d], "0xd1", 7)
        outbox.record_failed(session, action_ids=[d], expected=sent, now=3.0, note="reverted")
        assert outbox.used_nonce_floor(session, address=SENDER) == 8
        sign(session, [e], "0xe1", 8)
        assert outbox.used_nonce_floor(session, address=SENDER) == 9
        # Its nonce went to another transaction: the row holds none any more.
        outbox.return_to_pending(session, action_ids=[e], now=4.0, note="nonce spent")
        assert outbox.used_nonce_floor(session, address=SENDER) == 8


def test_versions_are_one_keys_signings_at_one_nonce_oldest_first_ties_by_hash(
        factory: sessionmaker[Session]) -> None:
    other = "0x" + "12" * 20
    bumped = Fees(max_fee_per_gas=30, max_priority_fee_per_gas=4)
    a, b = queue_settles(factory, "a", "b")
    with factory.begin() as session:
        sign(session, [a], "0xc1", 7, now=1.0)
        sign(session, [b], "0xd1", 7, sender=other, now=1.5)  # another key, the same nonce
        for tx_hash in ("0xb2", "0xa3"):  # two bumps signed in the same second
            outbox.record_replacement(session, action_ids=[a], tx_hash=tx_hash, sender=SENDER,
                                      nonce=7, fees=bumped, raw_tx="0xbump", now=2.0)
        expected = [outbox.SentVersion("0xc1", SENDER, 7, FEES, 1.0),
                    outbox.SentVersion("0xa3", SENDER, 7, bumped, 2.0),
                    outbox.SentVersion("0xb2", SENDER, 7, bumped, 2.0)]
        assert outbox.versions(session, "0xb2") == expected
        assert outbox.versions(session, "0xc1") == expected
        assert outbox.versions(session, "0xd1") == [
            outbox.SentVersion("0xd1", other, 7, FEES, 1.5)]


def test_keys_of_tx_are_the_rows_of_one_kind_in_that_transaction_in_queue_order(
        factory: sessionmaker[Session]) -> None:
    mined = "0x" + "ab" * 32
    with factory.begin() as session:
        for key, kind in (("s1", "settle"), ("s2", "settle"), ("c1", "commit"), ("s3", "settle")):
            outbox.enqueue_chain_action(session, kind=kind, idempotency_key=key, payload={},
                                        now=0.0)
    with factory.begin() as session:
        s1, s2, c1, s3 = (e.id for e in outbox.pending_actions(session, limit=10))
        outbox.defer(session, action_ids=[s1], expected=outbox.OutboxStatus.PENDING, now=0.5,
                     retry_at=0.5, note="transient")  # rewritten after s2: not first on disk
        sign(session, [s1, s2], mined, 1)
        sign(session, [c1], "0x" + "cd" * 32, 2)
        sign(session, [s3], "0x" + "ef" * 32, 3)
        # Hashes come from the chain in any case; the outbox keeps them as signed (lower).
        assert outbox.keys_of_tx(session, tx_hash=mined.upper().replace("0X", "0x"),
                                 kind="settle") == ["s1", "s2"]
        assert outbox.keys_of_tx(session, tx_hash=mined, kind="commit") == []
        assert outbox.keys_of_tx(session, tx_hash="0x" + "cd" * 32, kind="commit") == ["c1"]
        assert outbox.keys_of_tx(session, tx_hash="0x" + "99" * 32, kind="settle") == []


def test_unmined_rows_are_one_kinds_queued_and_sent_rows_oldest_first(
        factory: sessionmaker[Session]) -> None:
    pending, sent = outbox.OutboxStatus.PENDING, outbox.OutboxStatus.SENT
    with factory.begin() as session:
        for key, kind in (("s1", "settle"), ("s2", "settle"), ("s3", "settle"),
                          ("s4", "settle"), ("t1", "tier"), ("s5", "settle")):
            outbox.enqueue_chain_action(session, kind=kind, idempotency_key=key, payload={},
                                        now=0.0)
    with factory.begin() as session:
        s1, s2, s3, s4, t1, s5 = (e.id for e in outbox.pending_actions(session, limit=10))
        sign(session, [s1], "0xa1", 1)  # sent, older than the pending s2
        sign(session, [s3], "0xa3", 2)
        outbox.record_confirmed(session, action_ids=[s3], expected=sent, now=2.0)
        outbox.record_failed(session, action_ids=[s4], expected=pending, now=2.0, note="bad")
        assert [e.id for e in outbox.unmined(session, kind="settle")] == [s1, s2, s5]
        assert [(e.id, e.tx_hash) for e in outbox.unmined(session, kind="tier")] == [(t1, None)]
        assert outbox.unmined(session, kind="commit") == []


def test_confirmed_tx_hashes_are_the_transactions_confirmed_since_a_time_each_once(
        factory: sessionmaker[Session]) -> None:
    pending, sent = outbox.OutboxStatus.PENDING, outbox.OutboxStatus.SENT
    old, b1, b2, edge, chain_read, in_flight = queue_settles(
        factory, "old", "b1", "b2", "edge", "chain_read", "in_flight")
    with factory.begin() as session:
        sign(session, [old], "0xf0", 1)
        outbox.record_confirmed(session, action_ids=[old], expected=sent, now=9.0)
        sign(session, [b1, b2], "0xe1", 2)  # one batch: one transaction
        outbox.record_confirmed(session, action_ids=[b1, b2], expected=sent, now=12.0)
        sign(session, [edge], "0xd2", 3)
        outbox.record_confirmed(session, action_ids=[edge], expected=sent, now=10.0)
        # Confirmed on a chain read, never sent: no transaction of ours to undo.
        outbox.record_confirmed(session, action_ids=[chain_read], expected=pending, now=11.0)
        sign(session, [in_flight], "0xc3", 4, now=11.0)
        assert outbox.confirmed_tx_hashes(session, since=10.0) == ["0xd2", "0xe1"]
        assert outbox.confirmed_tx_hashes(session, since=12.5) == []


def assign(job: int, placement: int | None = None,
           provider: str = "0x" + "55" * 20) -> AssignCollateral:
    return AssignCollateral(job_id=bytes([job]) * 32, provider=provider,
                            placement=placement or job, collateral=job * 10)


def test_assignment_batch_is_the_newest_sent_root_of_the_job_and_provider(
        factory: sessionmaker[Session]) -> None:
    provider = "0x" + "55" * 20
    sent = outbox.OutboxStatus.SENT
    with factory.begin() as session:
        first, second, later, proof = queue(
            session, ("a1", assign(1)), ("a2", assign(2)), ("a3", assign(1, placement=3)),
            ("p1", ProveAssignment(job_id=bytes([1]) * 32, provider=provider, placement=1)))
        assert outbox.assignment_batch(session, job_id=bytes([1]) * 32,
                                       provider=provider) is None
        outbox.defer(session, action_ids=[first], expected=outbox.OutboxStatus.PENDING,
                     now=0.5, retry_at=0.5, note="transient")  # rewritten: not first on disk
        sign(session, [first, second], "0x01", 1)
        outbox.record_confirmed(session, action_ids=[first, second], expected=sent, now=2.0)
        assert outbox.assignment_batch(session, job_id=bytes([2]) * 32,
                                       provider=provider) == [assign(1), assign(2)]
        sign(session, [later], "0x02", 2)
        assert outbox.assignment_batch(  # not confirmed yet: the first root still holds
            session, job_id=bytes([1]) * 32, provider=provider) == [assign(1), assign(2)]
        outbox.record_confirmed(session, action_ids=[later], expected=sent, now=3.0)
        # A proof of the same job and provider, confirmed in a transaction of its own later,
        # is no root.
        sign(session, [proof], "0x03", 3)
        outbox.record_confirmed(session, action_ids=[proof], expected=sent, now=4.0)
        assert outbox.assignment_batch(session, job_id=bytes([1]) * 32,
                                       provider=provider) == [assign(1, placement=3)]
        # A placement's own root, whatever the newest of (job, provider) is: the proof of
        # the placement being slashed.
        assert outbox.assignment_batch(session, job_id=bytes([1]) * 32, provider=provider,
                                       placement=1) == [assign(1), assign(2)]
        assert outbox.assignment_batch(session, job_id=bytes([1]) * 32, provider=provider,
                                       placement=2) is None
        assert outbox.assignment_batch(session, job_id=bytes([1]) * 32,
                                       provider="0x" + "66" * 20) is None


def test_rows_keep_their_queue_order_however_often_they_are_rewritten(
        factory: sessionmaker[Session]) -> None:
    pending, sent = outbox.OutboxStatus.PENDING, outbox.OutboxStatus.SENT
    a, b, c = queue_settles(factory, "a", "b", "c")
    with factory.begin() as session:
        outbox.defer(session, action_ids=[a], expected=pending, now=1.0, retry_at=1.0,
                     note="transient")
        assert [e.id for e in outbox.pending_actions(session, limit=10)] == [a, b, c]
        assert [e.id for e in outbox.pending_actions(session, limit=1)] == [a]
        sign(session, [c], "0xc1", 1)
        sign(session, [a], "0xa1", 2)
        assert [e.id for e in outbox.in_flight_actions(session)] == [a, c]
        outbox.record_confirmed(session, action_ids=[c], expected=sent, now=3.0)
        outbox.record_confirmed(session, action_ids=[a], expected=sent, now=3.0)
        assert outbox.reorged_rows(session, tx_hashes=["0xc1", "0xa1"]) == [a, c]
        assert outbox.reorged_rows(session, tx_hashes=["0xC1"]) == [c]
        assert outbox.reorged_rows(session, tx_hashes=["0xb1"]) == []


def test_a_reorg_reopens_every_row_of_a_batch_though_its_bytes_are_on_the_first(
        factory: sessionmaker[Session]) -> None:
    sent = outbox.OutboxStatus.SENT
    a, b, c, d = queue_settles(factory, "a", "b", "c", "d")
    with factory.begin() as session:
        sign(session, [a, b, c], "0xab", 1)
        sign(session, [d], "0xdd", 2)
        outbox.record_confirmed(session, action_ids=[a, b, c], expected=sent, now=3.0)
        outbox.record_confirmed(session, action_ids=[d], expected=sent, now=3.0)
        assert outbox_rows(session)[1][4] is None  # the bytes are on the batch's first row
        assert outbox.reorged_rows(session, tx_hashes=["0xAB"]) == [a, b, c]
        outbox.reopen_reorged(session, action_ids=[a, b, c], now=4.0, note="reorged")
        assert [e.id for e in outbox.in_flight_actions(session)] == [a, b, c]
        assert outbox.reorged_rows(session, tx_hashes=["0xab"]) == []  # in flight already


@pytest.mark.postgres
def test_a_second_sender_skips_the_rows_another_holds_instead_of_waiting(
        postgres_url: str, factory: sessionmaker[Session], db_url: str) -> None:
    if db_url != postgres_url:
        pytest.skip("row locks are PostgreSQL's (SQLite has none)")
    a, b, c = queue_settles(factory, "a", "b", "c")
    with factory.begin() as holder:
        assert [e.id for e in outbox.pending_actions(holder, limit=1)] == [a]  # held
        with factory.begin() as other:
            other.execute(text("SET LOCAL lock_timeout = '2s'"))  # waiting fails, not hangs
            assert [e.id for e in outbox.pending_actions(other, limit=10)] == [b, c]
        sign(holder, [a], "0xa1", 1)
    with factory.begin() as holder:
        assert [e.id for e in outbox.in_flight_actions(holder)] == [a]  # held
        with factory.begin() as other:
            other.execute(text("SET LOCAL lock_timeout = '2s'"))
            assert outbox.in_flight_actions(other) == []
            assert [e.id for e in outbox.pending_actions(other, limit=10)] == [b, c]


def test_task_needs_survive_their_json_column_whole() -> None:
    needs = TaskNeeds(min_vram_gb=12, gpu_models=frozenset({"RTX4090", "A100"}),
                      regions=frozenset({"eu"}), providers=frozenset({"0x" + "a" * 40}),
                      excluded_providers=frozenset({"0x" + "b" * 40}),
                      max_price_per_gpu_hour=7, priority=Priority.HIGH,
                      expected_duration_s=5400.0, value=10**18, critical_path_s=7200.0)
    assert job_db.needs_from_json(json.loads(json.dumps(job_db.needs_to_json(needs)))) == needs
