"""The event indexer against anvil: every event of the mesh contracts indexed once and handed
to its handlers once it is final; reorgs of depth 1 to 5 (`anvil_reorg`, `anvil_rollback`,
`evm_snapshot`/`evm_revert` then new blocks) and one deeper than the margin neither lose nor
repeat an event; the orchestrator's transactions a reorg took off the chain are reported so
the outbox can send them again; the indexed read model agrees with the chain's own views."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from eth_account import Account
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mesh.bench.reorg import PAYMENT, CountingDispatch, ReorgWorld, canonical_events, content_key
from orchestrator.chain.anvil import (
    Anvil,
    dev_account,
    mine,
    reorg,
    revert_to,
    rollback,
    set_balance,
    snapshot,
)
from orchestrator.chain.indexer import ChainIndexReader
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import connect
from orchestrator.config import Settings
from orchestrator.db import chain_events as index
from orchestrator.db import jobs as job_db
from orchestrator.db import outbox as outbox_store
from orchestrator.db import statuses as status_db
from orchestrator.db.models import OutboxAction
from orchestrator.domain.chain_events import LogChunk
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import ChainEventStatus, JobStatus
from orchestrator.domain.types import SlashReason, TaskNeeds, Tier
from orchestrator.main import _periodic_jobs, create_app, event_dispatch
from orchestrator.scheduling.periodic import LeaderRunner
from orchestrator.services.chain_events import (
    ChainIndexer,
    ChainMoved,
    EventDispatch,
    IndexedChainView,
    PassReport,
    reorged_out,
)
from orchestrator.services.outbox.sender import OutboxSender
from orchestrator.telemetry.metrics import MeshMetrics
from tests.clients import VirtualClock
from tests.services.pls_harness import FixedStake
from tests.services.test_outbox import drain

MARGIN = 6
pytestmark = pytest.mark.anvil


@pytest.fixture(scope="module")
def world() -> Iterator[ReorgWorld]:
    """A chain of its own: reorgs would break the shared anvil's snapshots."""
    with Anvil() as anvil:
        yield ReorgWorld(anvil)


@pytest.fixture
def reader(world: ReorgWorld) -> ChainIndexReader:
    return ChainIndexReader(world.chain, finality_tag="none", max_chunk=64)


@pytest.fixture
def dispatch() -> CountingDispatch:
    return CountingDispatch()


@pytest.fixture
def indexer(reader: ChainIndexReader, dispatch: CountingDispatch) -> ChainIndexer:
    return ChainIndexer(lambda: reader, dispatch, margin=MARGIN, first_chunk=8)


def index_pass(indexer: ChainIndexer, factory: sessionmaker[Session]) -> PassReport:
    with factory.begin() as session:
        return indexer.run(session, time.time())


def catch_up(indexer: ChainIndexer, factory: sessionmaker[Session]) -> PassReport:
    report = index_pass(indexer, factory)
    while report.next_block <= report.head:
        report = index_pass(indexer, factory)
    return report


def assert_matches_chain(world: ReorgWorld, reader: ChainIndexReader, indexer: ChainIndexer,
                         dispatch: CountingDispatch, factory: sessionmaker[Session]) -> None:
    """Past the margin, index and handlers hold exactly the canonical chain's events."""
    head = mine(world.w3, MARGIN + 1)
    catch_up(indexer, factory)
    truth = Counter(content_key(event) for event in canonical_events(reader, head))
    with factory() as session:
        stored = index.events(session, cursor="mesh")
    assert {s.status for s in stored} == {ChainEventStatus.FINAL}
    assert Counter(content_key(s.event) for s in stored) == truth
    assert dispatch.applied == truth
    assert all(count == 1 for count in dispatch.settled.values())


def ours(world: ReorgWorld) -> list[str]:
    return [sent.tx_hash for sent in world.sent if sent.by_orchestrator]


def test_events_are_applied_once_when_final_and_the_read_model_agrees_with_the_chain(
        world: ReorgWorld, reader: ChainIndexReader, indexer: ChainIndexer,
        dispatch: CountingDispatch, factory: sessionmaker[Session]) -> None:
    (job_id,) = world.settle_jobs(1)
    world.settle_jobs(2)
    world.commit_epoch()
    lock_id, _ = world.provider.request_unbond(10**18)
    world.provider.cancel_unbond(lock_id)
    world.provider.request_unbond(2 * 10**18)
    world.provider.set_reservation_terms(5 * 10**18, 86_400)  # the fold reads them as the SDK
    catch_up(indexer, factory)
    with factory() as session:
        recent = [s for s in index.events(session, cursor="mesh")
                  if s.event.block_number > int(world.w3.eth.block_number) - MARGIN]
    assert recent and {s.status for s in recent} == {ChainEventStatus.PROVISIONAL}
    assert not any(dispatch.applied[content_key(s.event)] for s in recent)
    catch_up(indexer, factory)
    mine(world.w3, MARGIN)
    catch_up(indexer, factory)
    assert_matches_chain(world, reader, indexer, dispatch, factory)
    view = IndexedChainView()
    with factory() as session:
        assert view.provider_stake(session, world.provider.address) == \
            world.chain.provider_stake(world.provider.address)
        assert view.escrowed_job(session, job_id) == world.chain.escrowed_job(job_id)
        assert view.escrowed_job(session, (10**9).to_bytes(32, "big")) is None


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5])
def test_a_reorg_within_the_margin_rolls_back_provisional_events_and_reports_dropped_txs(
        depth: int, world: ReorgWorld, reader: ChainIndexReader, indexer: ChainIndexer,
        dispatch: CountingDispatch, factory: sessionmaker[Session]) -> None:
    catch_up(indexer, factory)
    mine(world.w3, MARGIN + 1)
    catch_up(indexer, factory)
    before = sum(dispatch.applied.values())
    world.settle_jobs(1)  # three transactions, a block each
    world.commit_epoch()
    world.commit_epoch()
    catch_up(indexer, factory)
    gone = world.sent[-depth:]
    reorg(world.w3, depth)
    world.chain.resync_nonces()
    report = index_pass(indexer, factory)
    assert report.reorg_depth >= depth and report.dropped >= depth and report.dropped_final == 0
    assert sum(dispatch.applied.values()) == before  # nothing provisional was ever applied
    with factory() as session:
        assert reorged_out(session, ours(world)) == {s.tx_hash for s in gone
                                                     if s.by_orchestrator}
        canonical = {"0x" + s.event.tx_hash.hex() for s in index.events(session, cursor="mesh")}
    assert canonical.isdisjoint(s.tx_hash for s in gone)
    world.resend(gone)  # what the outbox does with them: the same signed bytes again
    catch_up(indexer, factory)
    with factory() as session:
        assert reorged_out(session, ours(world)) == set()
    assert_matches_chain(world, reader, indexer, dispatch, factory)


def test_rollback_and_snapshot_revert_then_new_blocks(
        world: ReorgWorld, reader: ChainIndexReader, indexer: ChainIndexer,
        dispatch: CountingDispatch, factory: sessionmaker[Session]) -> None:
    world.settle_jobs(2)
    catch_up(indexer, factory)
    gone = world.sent[-3:]
    rollback(world.w3, 3)  # the chain is shorter now, then grows past where it was
    mine(world.w3, 5)
    world.chain.resync_nonces()
    assert index_pass(indexer, factory).dropped >= 3
    world.resend(gone)
    catch_up(indexer, factory)
    mark = snapshot(world.w3)
    world.commit_epoch()
    world.commit_epoch()
    catch_up(indexer, factory)
    revert_to(world.w3, mark)
    world.chain.resync_nonces()
    world.sent = world.sent[:-2]  # reverted for good: never sent again
    world.commit_epoch()  # other transactions at the same heights
    world.settle_jobs(1)
    catch_up(indexer, factory)
    assert_matches_chain(world, reader, indexer, dispatch, factory)


def test_a_reorg_deeper_than_the_margin_neither_loses_nor_repeats_final_events(
        world: ReorgWorld, reader: ChainIndexReader, indexer: ChainIndexer,
        dispatch: CountingDispatch, factory: sessionmaker[Session]) -> None:
    world.settle_jobs(1)
    world.commit_epoch()
    mine(world.w3, MARGIN + 1)
    catch_up(indexer, factory)
    applied = sum(dispatch.applied.values())
    gone = world.sent[-4:]  # createJob, lockCollateral, settle, commitEpoch: now final
    depth = MARGIN + 5
    reorg(world.w3, depth)
    world.chain.resync_nonces()
    report = index_pass(indexer, factory)
    assert report.dropped_final >= 4 and report.reorg_depth >= depth
    with factory() as session:
        assert reorged_out(session, ours(world)) == {s.tx_hash for s in gone
                                                     if s.by_orchestrator}
    world.resend(gone)
    catch_up(indexer, factory)
    assert sum(dispatch.applied.values()) == applied  # re-included: known, not applied again
    assert_matches_chain(world, reader, indexer, dispatch, factory)


def test_a_transaction_moved_to_another_block_keeps_its_one_row(
        world: ReorgWorld, indexer: ChainIndexer, factory: sessionmaker[Session]) -> None:
    world.commit_epoch()
    mine(world.w3, 1)
    catch_up(indexer, factory)
    moved = world.sent[-1]
    with factory() as session:
        (before,) = [s for s in index.events(session, cursor="mesh")
                     if "0x" + s.event.tx_hash.hex() == moved.tx_hash]
    reorg(world.w3, 2, [(moved.raw, 1)])  # one block later than it was
    catch_up(indexer, factory)
    with factory() as session:
        (after,) = [s for s in index.events(session, cursor="mesh")
                    if "0x" + s.event.tx_hash.hex() == moved.tx_hash]
    assert after.id == before.id
    assert after.event.block_number == before.event.block_number + 1


def test_a_failing_handler_stops_dispatch_in_order_and_is_retried(
        world: ReorgWorld, reader: ChainIndexReader, factory: sessionmaker[Session]) -> None:
    calls: list[str] = []
    broken = {"on": True}

    def handler(session: Session, event: object, now: float) -> None:
        if broken["on"]:
            raise RuntimeError("handler down")
        calls.append("ok")

    dispatch = EventDispatch()
    dispatch.register("StakeManager", "EpochCommitted", handler)
    indexer = ChainIndexer(lambda: reader, dispatch, margin=MARGIN)
    world.commit_epoch()
    mine(world.w3, MARGIN + 1)
    report = catch_up(indexer, factory)
    assert report.failed and calls == []
    broken["on"] = False
    report = catch_up(indexer, factory)
    epochs = [e for e in canonical_events(reader, int(world.w3.eth.block_number))
              if e.name == "EpochCommitted"]
    assert report.failed == [] and len(calls) == len(epochs)
    assert catch_up(indexer, factory).applied == 0


def test_the_indexed_stake_follows_slashes_of_collateral_bonded_and_unbonding_stake(
        world: ReorgWorld, reader: ChainIndexReader, indexer: ChainIndexer,
        dispatch: CountingDispatch, factory: sessionmaker[Session]) -> None:
    chain = world.chain
    other = chain.account(Account.create())
    set_balance(world.w3, other.address, 10**18)
    slasher = chain.account(dev_account(2))
    chain.account(dev_account(0)).mint(other.address, 10 * 10**18)
    other.stake(6 * 10**18)
    job_id = world.new_job_id()
    deadline = int(world.w3.eth.get_block("latest")["timestamp"]) + 86_400
    world.send(world.customer, chain.job_escrow, "createJob", job_id, 10**18, deadline,
               b"\x03" * 32)
    world.send(world.orchestrator, chain.job_escrow, "lockCollateral", job_id,
               [other.address], [2 * 10**18])
    slasher.slash_collateral(job_id, other.address, 0, 5 * 10**17, SlashReason.ABANDONMENT,
                             b"\x04" * 32)
    other.request_unbond(10**18)
    other.request_unbond(10**18)
    world.send(slasher, chain.stake_manager, "slash", other.address, 3 * 10**18,
               SlashReason.OTHER, b"\x05" * 32)  # all free bonded stake, then unbonding
    world.send(world.orchestrator, chain.stake_manager, "setTier", other.address, Tier.HIGH)
    assert_matches_chain(world, reader, indexer, dispatch, factory)
    with factory() as session:
        indexed = IndexedChainView().provider_stake(session, other.address, final_only=True)
    on_chain = chain.provider_stake(other.address)
    assert indexed == on_chain and on_chain.unbonding < 2 * 10**18 and on_chain.locked > 0


def test_the_orchestrators_dispatch_settles_a_settling_job_once_its_settlement_is_final(
        world: ReorgWorld, reader: ChainIndexReader, factory: sessionmaker[Session]) -> None:
    indexer = ChainIndexer(lambda: reader, event_dispatch(), margin=MARGIN)
    catch_up(indexer, factory)
    job_ids = world.settle_jobs(2)  # one settleBatch: a JobsSettled naming both
    with factory.begin() as session:
        for job_id in job_ids:
            job_db.create_job(session, NewJob(
                job_id="0x" + job_id.hex(), customer=world.customer.address, spec={},
                spec_hash="0x" + "0" * 64, amount=10, deadline=1e12, needs=TaskNeeds(),
                payloads=({"frame": 1},)), now=1.0, status=JobStatus.SETTLING)

    def statuses() -> set[str]:
        with factory() as session:
            return {job.status for job_id in job_ids
                    if (job := job_db.get_job(session, job_id="0x" + job_id.hex())) is not None}

    catch_up(indexer, factory)
    assert statuses() == {"settling"}  # provisional: nothing moves yet
    mine(world.w3, MARGIN)
    catch_up(indexer, factory)
    assert statuses() == {"settled"}
    with factory() as session:
        escrowed = IndexedChainView().escrowed_job(session, job_ids[0])
    assert escrowed == world.chain.escrowed_job(job_ids[0])


def test_without_a_deployment_the_index_job_waits_with_one_warning(
        db_url: str, factory: sessionmaker[Session], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(Settings(data_dir=tmp_path, database_url=db_url, periodic_enabled=False,
                              json_logs=False), stake_reader=FixedStake())
    (job,) = [job for job in _periodic_jobs(app.state.ctx) if job.name == "chain-index"]
    for _ in range(3):
        with factory.begin() as session:
            job.work(session, 1.0)
    warnings = [r.getMessage() for r in caplog.records if "not indexed" in r.getMessage()]
    assert len(warnings) == 1 and "deploy first" in warnings[0]
    with factory() as session:
        assert index.get_cursor(session, name="mesh") is None


def test_the_indexer_runs_as_a_leader_job_of_the_orchestrator(
        world: ReorgWorld, db_url: str, factory: sessionmaker[Session], tmp_path: Path) -> None:
    """With the settings' defaults on a local dev chain (chain id 31337): the events of the
    newest block are final at once, with no block mined after them (an idle anvil mines
    none, and its `finalized` block lags 64 behind)."""
    world.chain.deployment.save(tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=db_url, periodic_enabled=False,
                        json_logs=False, rpc_url=world.rpc_url)
    assert settings.chain_id == world.chain.deployment.chain_id == 31337
    app = create_app(settings, stake_reader=FixedStake())
    jobs = {job.name: job for job in _periodic_jobs(app.state.ctx)}
    assert jobs["chain-index"].leader_only and "escrow-sync" in jobs
    world.commit_epoch()
    runner = LeaderRunner(factory)
    assert runner.run_if_leader("chain-index", ttl_s=10, work=jobs["chain-index"].work)
    assert not LeaderRunner(factory).run_if_leader("chain-index", ttl_s=10,
                                                   work=jobs["chain-index"].work)
    with factory() as session:
        cursor = index.get_cursor(session, name="mesh")
        stored = index.events(session, cursor="mesh", final_only=True)
    assert cursor is not None and cursor.next_block == int(world.w3.eth.block_number) + 1
    assert "0x" + stored[-1].event.tx_hash.hex() == world.sent[-1].tx_hash
    applied = app.state.ctx.metrics.registry.get_sample_value("mesh_chain_events_applied_total")
    assert applied == len(stored)  # /metrics counts what the handlers were handed


def escrow_on_chain(world: ReorgWorld) -> str:
    """The customer escrows a new job on chain; its 0x id."""
    job_id = world.new_job_id()
    deadline = int(world.w3.eth.get_block("latest")["timestamp"]) + 86_400
    world.send(world.customer, world.chain.job_escrow, "createJob", job_id, PAYMENT, deadline,
               bytes(31) + b"\x01")
    return "0x" + job_id.hex()


def queue_settlement(factory: sessionmaker[Session], world: ReorgWorld, job_hex: str) -> None:
    """The orchestrator's job, settling: half the payment to the provider, queued."""
    with factory.begin() as session:
        job_db.create_job(session, NewJob(
            job_id=job_hex, customer=world.customer.address, spec={}, spec_hash="0x" + "0" * 64,
            amount=PAYMENT, deadline=1e12, needs=TaskNeeds(), payloads=({"frame": 1},)), now=1.0,
            status=JobStatus.SETTLING)
        assert outbox_store.enqueue_chain_action(
            session, kind="settle", idempotency_key=f"settle:{job_hex}", now=1.0,
            payload={"job_id": job_hex, "providers": [world.provider.address],
                     "payouts": [str(PAYMENT // 2)], "merkle_root": "0x" + "ab" * 32})


@pytest.mark.parametrize(("how", "depth"), [*(("reorg", depth) for depth in range(1, 6)),
                                            ("rollback", 3), ("reorg", MARGIN + 3)])
def test_a_settlement_a_reorg_removed_unsettles_its_job_until_the_resent_one_is_final(
        how: str, depth: int, world: ReorgWorld, db_url: str, factory: sessionmaker[Session],
        tmp_path: Path) -> None:
    """The orchestrator's own chain-index, escrow-sync and outbox jobs: the receipt settles
    the job, the reorg takes the settlement away (back to settling), the same bytes land
    again, and only their final event settles the job again; the provider is paid once. The
    deep reorg removes a final, applied settlement: its event comes back already applied, and
    the escrow sync over final events settles the job."""
    world.chain.deployment.save(tmp_path)
    app = create_app(Settings(data_dir=tmp_path, database_url=db_url, periodic_enabled=False,
                              json_logs=False, rpc_url=world.rpc_url,
                              chain_reorg_margin=MARGIN, chain_finality_tag="none"),
                     stake_reader=FixedStake())
    jobs = {job.name: job for job in _periodic_jobs(app.state.ctx)}
    own = MeshChain(connect(world.rpc_url), world.chain.deployment)
    sender = OutboxSender(own, own.account(dev_account(1)), MeshMetrics())
    clock = VirtualClock()

    def index_now() -> None:
        for name in ("chain-index", "escrow-sync"):  # as the leader runs them
            with factory.begin() as session:
                jobs[name].work(session, clock.now)

    def job_status() -> str:
        with factory() as session:
            job = job_db.get_job(session, job_id=job_hex)
            assert job is not None
            return job.status

    def outbox_row() -> tuple[str, str | None]:
        with factory() as session:
            (row,) = session.scalars(select(OutboxAction))
            return row.status, row.tx_hash

    job_hex = escrow_on_chain(world)
    mine(world.w3, MARGIN + 1)  # the escrow is final: the reorg below takes only the settle
    pending_before = world.chain.escrow_balance(world.provider.address).pending
    queue_settlement(factory, world, job_hex)
    try:
        assert drain(factory, sender, clock) and drain(factory, sender, clock)
        status, first_tx = outbox_row()
        assert (status, job_status()) == ("confirmed", "settled")  # on the receipt
        mine(world.w3, depth - 1)
        index_now()  # the settlement is indexed, provisional

        if how == "reorg":  # the settle's block and those after it: the settle is gone
            reorg(world.w3, depth)
        else:
            rollback(world.w3, depth)
            mine(world.w3, depth + 1)
        world.chain.resync_nonces()
        escrowed = world.chain.escrowed_job(bytes.fromhex(job_hex[2:]))
        assert escrowed is not None and escrowed.status is EscrowStatus.FUNDED
        index_now()
        assert outbox_row() == ("sent", first_tx) and job_status() == "settling"

        assert drain(factory, sender, clock) and drain(factory, sender, clock)
        assert outbox_row() == ("confirmed", first_tx)  # the very same bytes landed again
        assert job_status() == "settling"  # a receipt a reorg could undo settles nothing now
        index_now()
        assert job_status() == "settling"  # indexed, still provisional
        mine(world.w3, MARGIN)
        index_now()
        assert job_status() == "settled"
    finally:
        world.chain.resync_nonces()
    assert world.chain.escrow_balance(world.provider.address).pending == \
        pending_before + PAYMENT // 2
    with factory() as session:
        moves = [(h.from_status, h.to_status)
                 for h in status_db.status_history(session, entity="job", entity_id=job_hex)]
    assert moves[-3:] == [("settling", "settled"), ("settled", "settling"),
                          ("settling", "settled")]


def test_a_settlement_reorged_out_before_the_index_read_its_block_is_sent_again(
        world: ReorgWorld, db_url: str, factory: sessionmaker[Session], tmp_path: Path) -> None:
    """The index lags the outbox (a pass every few seconds, or a service restarted): a reorg
    takes the settlement away before any pass saw its event, so no dropped event tells of it
    and the index finds no fork. The chain-index job still asks the chain about the confirmed
    transactions it never indexed: this one has no receipt any more, so it is sent again and
    the job waits for its final event; the provider is paid once. Before that check the row
    stayed confirmed and the job settled, unpaid on chain."""
    world.chain.deployment.save(tmp_path)
    app = create_app(Settings(data_dir=tmp_path, database_url=db_url, periodic_enabled=False,
                              json_logs=False, rpc_url=world.rpc_url,
                              chain_reorg_margin=MARGIN, chain_finality_tag="none"),
                     stake_reader=FixedStake())
    jobs = {job.name: job for job in _periodic_jobs(app.state.ctx)}
    own = MeshChain(connect(world.rpc_url), world.chain.deployment)
    sender = OutboxSender(own, own.account(dev_account(1)), MeshMetrics())
    clock = VirtualClock()

    def index_now() -> None:
        for name in ("chain-index", "escrow-sync"):
            with factory.begin() as session:
                jobs[name].work(session, clock.now)

    def state() -> tuple[str, str | None, str]:
        with factory() as session:
            (row,) = session.scalars(select(OutboxAction))
            job = job_db.get_job(session, job_id=job_hex)
            assert job is not None
            return row.status, row.tx_hash, job.status

    job_hex = escrow_on_chain(world)
    mine(world.w3, MARGIN + 1)
    index_now()  # the index is at the head: the escrow final, the settlement not yet sent
    pending_before = world.chain.escrow_balance(world.provider.address).pending
    queue_settlement(factory, world, job_hex)
    try:
        assert drain(factory, sender, clock) and drain(factory, sender, clock)
        status, first_tx, job_status = state()
        assert (status, job_status) == ("confirmed", "settled")  # on the receipt
        reorg(world.w3, 2)  # before any index pass: the settle's block and one before it
        world.chain.resync_nonces()
        escrowed = world.chain.escrowed_job(bytes.fromhex(job_hex[2:]))
        assert escrowed is not None and escrowed.status is EscrowStatus.FUNDED
        index_now()
        assert state() == ("sent", first_tx, "settling")

        assert drain(factory, sender, clock) and drain(factory, sender, clock)
        assert state() == ("confirmed", first_tx, "settling")  # the same bytes landed again
        mine(world.w3, MARGIN)
        index_now()
        assert state() == ("confirmed", first_tx, "settled")  # on its final event
        index_now()
        assert state() == ("confirmed", first_tx, "settled")  # indexed now: not sent again
    finally:
        world.chain.resync_nonces()
    assert world.chain.escrow_balance(world.provider.address).pending == \
        pending_before + PAYMENT // 2


class MovingReader(ChainIndexReader):
    """The real reader, with the chain moved by `move` (once) right after a log read: the
    logs it returns then name a block the canonical chain no longer has."""

    move: Callable[[], None] | None = None

    def read_logs(self, from_block: int, to_block: int, chunk: int) -> LogChunk:
        got = super().read_logs(from_block, to_block, chunk)
        if self.move is not None:
            move, self.move = self.move, None
            move()
        return got


def index_state(factory: sessionmaker[Session]) -> tuple[object, ...]:
    with factory() as session:
        return (index.get_cursor(session, name="mesh"),
                sorted((content_key(s.event), s.event.block_hash, s.status)
                       for s in index.events(session, cursor="mesh")),
                index.block_hashes(session, cursor="mesh", from_block=0))


@pytest.mark.parametrize("move", ["replaced", "shorter"])
def test_a_pass_the_chain_moves_under_stores_nothing_and_the_next_reads_the_canonical_chain(
        move: str, world: ReorgWorld, reader: ChainIndexReader, dispatch: CountingDispatch,
        factory: sessionmaker[Session]) -> None:
    moving = MovingReader(world.chain, finality_tag="none", max_chunk=64)
    indexer = ChainIndexer(lambda: moving, dispatch, margin=MARGIN, first_chunk=8)
    catch_up(indexer, factory)
    mine(world.w3, MARGIN + 1)
    catch_up(indexer, factory)
    applied = sum(dispatch.applied.values())
    world.settle_jobs(1)  # three transactions, a block each
    gone = world.sent[-1:]

    def replace_head() -> None:
        if move == "replaced":
            reorg(world.w3, 1)  # the same height, another block
        else:
            rollback(world.w3, 1)  # the chain is shorter than the range just read
        world.chain.resync_nonces()

    moving.move = replace_head
    before = index_state(factory)
    with pytest.raises(ChainMoved):
        index_pass(indexer, factory)
    assert index_state(factory) == before  # nothing stored, no cursor moved
    assert sum(dispatch.applied.values()) == applied  # nothing applied
    world.resend(gone)
    catch_up(indexer, factory)
    assert_matches_chain(world, reader, indexer, dispatch, factory)
