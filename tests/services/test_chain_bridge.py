"""Slashes, epoch commitments and tiers back from the chain through the indexed events, against
anvil and a real database: the orchestrator's own decisions go out through the outbox sender
(the production path), the orchestrator's own `chain-index` job indexes them, and only once an
event is final does the off-chain state follow it: a slash decision carries the chain's slash
id and its release, an epoch its final commitment, a node the tier the chain moved it to. Each
handler applied twice has one effect; an event a reorg removed before it was final changes
nothing, and the orchestrator's transaction it removed is sent again."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from eth_utils import keccak
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mesh.bench.reorg import PAYMENT, ReorgWorld
from orchestrator.chain.anvil import Anvil, dev_account, increase_time, mine, reorg
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import connect
from orchestrator.config import Settings
from orchestrator.db import chain_events as index
from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db import outbox as outbox_store
from orchestrator.db import pls as pls_store
from orchestrator.db import statuses as status_db
from orchestrator.db.models import OutboxAction, PlsObservationRecord, ScoreEpoch, SlashRecord
from orchestrator.domain.chain_actions import (
    AssignCollateral,
    ReserveCollateral,
    SetTier,
)
from orchestrator.domain.chain_events import ChainEvent
from orchestrator.domain.chain_views import SlashStatus
from orchestrator.domain.ids import hex0x
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus, TaskStatus
from orchestrator.domain.merkle import placement_id
from orchestrator.domain.reliability import TaskOutcome
from orchestrator.domain.types import SlashReason, TaskNeeds, Tier
from orchestrator.main import _periodic_jobs
from orchestrator.services import pls_chain
from orchestrator.services.outbox.sender import OutboxSender
from orchestrator.services.pls import PlsService
from orchestrator.services.pls_placement import Admission, Placed, PlsPlacement
from orchestrator.telemetry.metrics import MeshMetrics
from protocol.client import Wallet
from tests.clients import VirtualClock, make_wallet, registration
from tests.services.conftest import AppMaker
from tests.services.pls_harness import ADMIN_KEY
from tests.services.test_outbox import drain

pytestmark = pytest.mark.anvil
MARGIN = 4
TOKEN = 10**18
COLLATERAL = 20 * TOKEN
PROVIDER = dev_account(5)
_numbers = itertools.count(1)
_lenders = itertools.count(6)  # the dev accounts anvil funds that no other test uses (6-9)


@pytest.fixture(scope="module")
def world() -> Iterator[ReorgWorld]:
    """A chain of its own: reorgs would break the shared anvil's snapshots."""
    with Anvil() as anvil:
        yield ReorgWorld(anvil)


@pytest.fixture
def settings(db_url: str, tmp_path: Path, world: ReorgWorld) -> Settings:
    world.chain.deployment.save(tmp_path)
    return Settings(database_url=db_url, data_dir=tmp_path, periodic_enabled=False,
                    json_logs=False, admin_key=SecretStr(ADMIN_KEY), node_stake=0,
                    rpc_url=world.rpc_url, chain_reorg_margin=MARGIN,
                    chain_finality_tag="none")


@dataclass
class Bridge:
    """The orchestrator as its leader runs it: the outbox sender and the chain-index job."""

    world: ReorgWorld
    app: TestClient
    factory: sessionmaker[Session]
    clock: VirtualClock
    sender: OutboxSender
    index_job: Callable[[Session, float], object]
    node: str
    wallet: Wallet  # the provider's

    @property
    def pls(self) -> PlsService:
        service: PlsService = self.app.app.state.ctx.pls  # type: ignore[attr-defined]
        return service

    def index(self) -> None:
        with self.factory.begin() as session:
            self.index_job(session, self.clock())

    def final(self) -> None:
        """Mine past the margin and index: every event so far is final and applied."""
        mine(self.world.w3, MARGIN + 1)
        self.index()

    def send_all(self) -> None:
        """Outbox passes until no row is in flight (a pass signs and sends, the next one reads
        the receipt; a transient RPC error backs off, hence the clock's steps)."""
        for _ in range(20):
            drain(self.factory, self.sender, self.clock)
            self.clock.advance(5)
            with self.factory() as session:
                statuses = {row.status for row in session.scalars(select(OutboxAction))}
            if statuses <= {"confirmed", "failed"}:
                return
        raise AssertionError(f"the outbox did not drain: {statuses}")

    def row(self, key_prefix: str) -> OutboxAction:
        with self.factory() as session:
            (row,) = session.scalars(select(OutboxAction).where(
                OutboxAction.idempotency_key.like(f"{key_prefix}%")))
            session.expunge(row)
            return row

    def queue(self, action: Any, key: str) -> None:
        with self.factory.begin() as session:
            assert outbox_store.queue_action(session, action=action, idempotency_key=key,
                                             now=self.clock())

    def events(self, name: str) -> list[ChainEvent]:
        with self.factory() as session:
            return [s.event for s in index.events(session, cursor="mesh", final_only=True)
                    if s.event.name == name]

    def node_tier(self) -> int:
        with self.factory() as session:
            node = node_db.get_node(session, node_id=self.node)
            assert node is not None
            return node.tier

    def tier_observations(self) -> list[int]:
        with self.factory() as session:
            return [o.body["tier"] for o in session.scalars(
                select(PlsObservationRecord).where(PlsObservationRecord.kind == "tier")
                .order_by(PlsObservationRecord.id))]


@pytest.fixture
def bridge(world: ReorgWorld, make_app: AppMaker, factory: sessionmaker[Session],
           clock: VirtualClock, settings: Settings) -> Bridge:
    """Past events (earlier tests on this chain) indexed first, then our provider's node."""
    app = make_app()
    jobs = {job.name: job for job in _periodic_jobs(app.app.state.ctx)}  # type: ignore[attr-defined]
    own = MeshChain(connect(world.rpc_url), world.chain.deployment)
    sender = OutboxSender(own, own.account(dev_account(1)), MeshMetrics(),
                          slasher=own.account(dev_account(2)))
    node = f"node-bridge-{next(_numbers)}"
    wallet = make_wallet(app, clock, chain_id=settings.chain_id,
                    orchestrator_id=settings.orchestrator_id, account=PROVIDER)
    built = Bridge(world, app, factory, clock, sender, jobs["chain-index"].work, node, wallet)
    built.final()
    registered = wallet.send("POST", "/v1/nodes", registration(node))
    assert registered.status_code == 200, registered.text
    return built


def escrow(world: ReorgWorld) -> bytes:
    job_id = keccak(text=f"bridge job {next(_numbers)} {world.w3.eth.block_number}")
    deadline = int(world.w3.eth.get_block("latest")["timestamp"]) + 30 * 86_400
    world.chain.resync_nonces()
    world.send(world.customer, world.chain.job_escrow, "createJob", job_id, PAYMENT, deadline,
               b"\x05" * 32)
    return job_id


def decide_a_slash(bridge: Bridge) -> SlashRecord:
    """A task of our node placed with collateral (reservation and assignment on chain through
    the outbox), its result fails verification, the staking policy decides the slash and
    queues its proof and the slash itself (`PlsStaking._queue_slash`)."""
    world, clock = bridge.world, bridge.clock
    job_id = escrow(world)
    job_hex = "0x" + job_id.hex()
    now = clock()
    until = int(world.w3.eth.get_block("latest")["timestamp"]) + 7 * 86_400
    with bridge.factory.begin() as session:
        job_db.create_job(session, NewJob(
            job_id=job_hex, customer=world.customer.address, spec={}, spec_hash="0x" + "05" * 32,
            amount=PAYMENT, deadline=now + 1e6, needs=TaskNeeds(), payloads=({"frame": 1},)),
            now=now, status=JobStatus.RUNNING)
        session.flush()
        (task,) = job_db.job_tasks(session, job_id=job_hex)
        for status in (TaskStatus.RESERVED, TaskStatus.RUNNING):
            status_db.set_task_status(session, task=task, target=status, now=now, reason="test")
        task.node_id = bridge.node
        task_id = task.id
        pls_store.add_locks(session, locks=[pls_store.NewLock(
            task_id=task_id, attempt=1, job_id=job_hex, node_id=bridge.node,
            provider=PROVIDER.address, amount=COLLATERAL, raw_rs=None)], at=now)
    bridge.queue(ReserveCollateral(provider=PROVIDER.address, amount=2 * COLLATERAL,
                                   until=until), f"reserve:{job_hex}")
    bridge.queue(AssignCollateral(job_id=job_id, provider=PROVIDER.address,
                                  placement=placement_id(task_id, 1), collateral=COLLATERAL),
                 f"assign:{job_hex}")
    bridge.send_all()
    evidence = keccak(text=f"verification evidence {job_hex}")
    with bridge.factory.begin() as session:
        pls_store.set_node_tier(session, node_id=bridge.node, tier=int(Tier.BACKGROUND))
        bridge.pls.ingest.task_outcome(session, node_id=bridge.node, task_id=task_id,
                                       outcome=TaskOutcome.FAILED_VERIFICATION, now=clock(),
                                       evidence=evidence)
    with bridge.factory.begin() as session:
        (decided,) = bridge.pls.staking.decide(session, now=clock()).slashes
    with bridge.factory() as session:
        record = session.get(SlashRecord, hex0x(decided.slash_id))
        assert record is not None and record.chain_slash_id is None
        session.expunge(record)
        return record


def slash_record(bridge: Bridge, slash_id: str) -> SlashRecord:
    with bridge.factory() as session:
        record = session.get(SlashRecord, slash_id)
        assert record is not None
        session.expunge(record)
        return record


def chain_slash_of(bridge: Bridge, record: SlashRecord) -> int:
    """The chain's id of the slash carrying `record`'s evidence, read from the contract."""
    found = []
    slash_id = 1
    while (slash := bridge.world.chain.slash_of(slash_id)) is not None:
        if slash.provider == PROVIDER.address and "0x" + slash.evidence.hex() == record.evidence:
            found.append(slash_id)
        slash_id += 1
    assert len(found) == 1, found
    return found[0]


def depth_to(bridge: Bridge, tx_hash: str | None) -> int:
    """The reorg depth that replaces the block holding `tx_hash` and every block after it."""
    receipt = bridge.world.w3.eth.get_transaction_receipt(tx_hash)  # type: ignore[arg-type]
    return int(bridge.world.w3.eth.block_number) - int(receipt["blockNumber"]) + 1


def apply_again(bridge: Bridge, name: str, handler: Callable[..., bool], *,
                tx_hash: str | None, **kwargs: Any) -> list[bool]:
    """The handler run again on the final events of `name` of one transaction."""
    with bridge.factory.begin() as session:
        return [handler(session, event, bridge.clock(), **kwargs)
                for event in bridge.events(name) if "0x" + event.tx_hash.hex() == tx_hash]


# ---------------------------------------------------------------- slashes


def test_a_slash_decision_carries_the_chain_slash_id_once_its_slashed_event_is_final(
        bridge: Bridge) -> None:
    record = decide_a_slash(bridge)
    bonded = bridge.world.chain.provider_stake(PROVIDER.address).bonded
    bridge.send_all()
    slash_row = bridge.row(f"slash:{record.slash_id}")
    assert slash_row.status == "confirmed"
    on_chain = chain_slash_of(bridge, record)
    assert bridge.world.chain.provider_stake(PROVIDER.address).bonded == bonded - COLLATERAL

    bridge.index()  # indexed, provisional: nothing moves yet
    assert slash_record(bridge, record.slash_id).chain_slash_id is None
    bridge.final()

    marked = slash_record(bridge, record.slash_id)
    assert (marked.chain_slash_id, marked.chain_tx) == (on_chain, slash_row.tx_hash)
    assert marked.released_tx is None
    # the same event again changes nothing
    assert apply_again(bridge, "Slashed", pls_chain.on_slashed, tx_hash=marked.chain_tx) == [
        False]
    assert slash_record(bridge, record.slash_id).chain_slash_id == on_chain

    # the release, once the dispute window is over, by anyone (here the customer)
    increase_time(bridge.world.w3,
                  int(bridge.world.chain.stake_manager.functions.slashDisputeWindow().call()) + 1)
    bridge.world.chain.resync_nonces()
    released = bridge.world.send(bridge.world.customer, bridge.world.chain.stake_manager,
                                 "releaseSlash", on_chain)
    bridge.index()
    assert slash_record(bridge, record.slash_id).released_tx is None
    bridge.final()
    assert slash_record(bridge, record.slash_id).released_tx == released.tx_hash
    assert apply_again(bridge, "SlashReleased", pls_chain.on_slash_released,
                       tx_hash=released.tx_hash) == [False]
    assert slash_record(bridge, record.slash_id).released_tx == released.tx_hash
    # what the slash's evidence bundle shows its provider
    bundle = bridge.wallet.send("GET", f"/v1/slashes/{on_chain}/evidence")
    assert bundle.status_code == 200, bundle.text
    assert [(r["decision_id"], r["chain_slash_id"], r["slashed_tx"], r["released_tx"])
            for r in bundle.json()["records"]] == [
        (record.slash_id, on_chain, slash_row.tx_hash, released.tx_hash)]


def test_a_slash_a_reorg_removed_before_it_was_final_is_matched_only_once_it_lands_again(
        bridge: Bridge) -> None:
    record = decide_a_slash(bridge)
    bonded = bridge.world.chain.provider_stake(PROVIDER.address).bonded
    bridge.send_all()
    first_tx = bridge.row(f"slash:{record.slash_id}").tx_hash
    bridge.index()  # provisional

    reorg(bridge.world.w3, depth_to(bridge, first_tx))  # the slash is gone
    assert bridge.world.chain.provider_stake(PROVIDER.address).bonded == bonded
    bridge.index()  # the reorg is seen: the slash row goes back in flight
    assert bridge.row(f"slash:{record.slash_id}").status == "sent"
    mine(bridge.world.w3, MARGIN + 1)
    bridge.index()
    assert slash_record(bridge, record.slash_id).chain_slash_id is None  # never final

    bridge.send_all()  # the same bytes again
    assert bridge.row(f"slash:{record.slash_id}").tx_hash == first_tx
    bridge.final()
    assert slash_record(bridge, record.slash_id).chain_slash_id == chain_slash_of(bridge, record)
    assert bridge.world.chain.provider_stake(PROVIDER.address).bonded == bonded - COLLATERAL


def test_a_release_a_reorg_removed_before_it_was_final_changes_nothing(
        bridge: Bridge) -> None:
    record = decide_a_slash(bridge)
    bridge.send_all()
    bridge.final()
    on_chain = chain_slash_of(bridge, record)
    increase_time(bridge.world.w3,
                  int(bridge.world.chain.stake_manager.functions.slashDisputeWindow().call()) + 1)
    bridge.world.chain.resync_nonces()
    bridge.world.send(bridge.world.customer, bridge.world.chain.stake_manager, "releaseSlash",
                      on_chain)
    bridge.index()

    reorg(bridge.world.w3, 1)
    bridge.world.chain.resync_nonces()
    bridge.final()

    assert slash_record(bridge, record.slash_id).released_tx is None
    assert [e for e in bridge.events("SlashReleased") if e.args["slashId"] == on_chain] == []
    assert bridge.world.chain.slash_of(on_chain).status is SlashStatus.PENDING  # type: ignore[union-attr]


def test_a_slash_sent_outside_the_outbox_is_matched_by_provider_reason_and_evidence(
        bridge: Bridge) -> None:
    """A slash our outbox did not send (by hand, as an operator would; a finder's score slash
    is the same) carries out the oldest unmatched decision with its provider, reason and
    evidence; one whose evidence no decision has is none of ours."""
    world, clock = bridge.world, bridge.clock
    evidence = keccak(text=f"abandoned window {next(_numbers)}")
    with bridge.factory.begin() as session:
        for n in (1, 2):
            pls_store.add_slash(session, slash_id=keccak(text=f"{evidence.hex()} decision {n}"),
                                node_id=bridge.node, provider=PROVIDER.address,
                                reason=int(SlashReason.ABANDONMENT), amount=TOKEN,
                                evidence=evidence, task_id=None, decided_at=clock() + n,
                                detail="abandoned")
    job_id = escrow(world)
    world.chain.resync_nonces()
    world.orchestrator.lock_collateral(job_id, [PROVIDER.address], [3 * TOKEN])
    slasher = world.chain.account(dev_account(2))
    ours, _ = slasher.slash_collateral(job_id, PROVIDER.address, 0, TOKEN,
                                       int(SlashReason.ABANDONMENT), evidence)
    other, _ = slasher.slash_collateral(job_id, PROVIDER.address, 0, TOKEN,
                                        int(SlashReason.ABANDONMENT), keccak(text="not ours"))
    bridge.final()

    with bridge.factory() as session:
        records = session.scalars(select(SlashRecord).where(
            SlashRecord.evidence == "0x" + evidence.hex()).order_by(SlashRecord.decided_at))
        assert [r.chain_slash_id for r in records] == [ours, None]
        assert pls_store.slash_on_chain(session, chain_slash_id=other) is None


def test_a_reversed_slash_restores_only_the_decision_it_carried_out(bridge: Bridge) -> None:
    """Two decisions share provider, reason and evidence (two tasks abandoned in one window);
    the chain slashed one. The dispute reversing that slash, indexed after its `Slashed`,
    reverses that decision only."""
    world, clock = bridge.world, bridge.clock
    evidence = keccak(text=f"one window, two tasks {next(_numbers)}")
    ids = [keccak(text=f"{evidence.hex()} task {n}") for n in (1, 2)]
    with bridge.factory.begin() as session:
        for n, decision in enumerate(ids):
            pls_store.add_slash(session, slash_id=decision, node_id=bridge.node,
                                provider=PROVIDER.address, reason=int(SlashReason.ABANDONMENT),
                                amount=TOKEN, evidence=evidence, task_id=None,
                                decided_at=clock() + n, detail="abandoned")
        pls_store.set_node_tier(session, node_id=bridge.node, tier=int(Tier.BACKGROUND))
    job_id = escrow(world)
    world.chain.resync_nonces()
    world.orchestrator.lock_collateral(job_id, [PROVIDER.address], [TOKEN])
    slash_id, _ = world.chain.account(dev_account(2)).slash_collateral(
        job_id, PROVIDER.address, 0, TOKEN, int(SlashReason.ABANDONMENT), evidence)
    bridge.final()
    world.chain.account(dev_account(0)).mint(PROVIDER.address, world.chain.dispute_bond())
    provider = world.chain.account(PROVIDER)
    dispute_id, _ = provider.open_slash_dispute(slash_id, keccak(text="it was an outage"))
    world.chain.account(dev_account(3)).resolve_dispute(dispute_id, granted=True)
    bridge.final()

    first, second = (slash_record(bridge, hex0x(decision)) for decision in ids)
    assert (first.chain_slash_id, first.reversed_by) == (slash_id, dispute_id)
    assert (second.chain_slash_id, second.reversed_by) == (None, None)


# ---------------------------------------------------------------- epoch commitments


def close_an_epoch(bridge: Bridge, epoch: int) -> str:
    """`PlsStaking.close_epoch` over our online node: its leaf and root stored, the commit
    queued."""
    with bridge.factory.begin() as session:  # the node is online since it registered
        root = bridge.pls.staking.close_epoch(session, epoch=epoch, now=bridge.clock())
    assert root is not None
    return "0x" + root.hex()


def committed(bridge: Bridge, epoch: int) -> tuple[str | None, int | None]:
    with bridge.factory() as session:
        row = session.get(ScoreEpoch, epoch)
        assert row is not None
        return row.committed_tx, row.committed_block


def new_epoch(bridge: Bridge) -> int:
    """An epoch number no earlier test on this chain committed."""
    return 1_000 + next(_numbers) * 10 + int(bridge.world.w3.eth.block_number)


def test_an_epoch_commitment_is_final_once_its_event_is(bridge: Bridge) -> None:
    epoch = new_epoch(bridge)
    root = close_an_epoch(bridge, epoch)
    bridge.send_all()
    commit = bridge.row(f"commit:{epoch}")
    assert commit.status == "confirmed"
    assert bridge.world.chain.epoch_root(epoch) == bytes.fromhex(root[2:])
    bridge.index()
    assert committed(bridge, epoch) == (None, None)  # provisional

    bridge.final()

    tx_hash, block = committed(bridge, epoch)
    receipt = bridge.world.w3.eth.get_transaction_receipt(commit.tx_hash)  # type: ignore[arg-type]
    assert (tx_hash, block) == (commit.tx_hash, receipt["blockNumber"])
    assert apply_again(bridge, "EpochCommitted", pls_chain.on_epoch_committed,
                       tx_hash=tx_hash) == [False]
    assert committed(bridge, epoch) == (tx_hash, block)


def test_a_commitment_a_reorg_removed_is_sent_again_and_final_only_when_it_lands(
        bridge: Bridge) -> None:
    epoch = new_epoch(bridge)
    root = close_an_epoch(bridge, epoch)
    bridge.send_all()
    first_tx = bridge.row(f"commit:{epoch}").tx_hash
    bridge.index()

    reorg(bridge.world.w3, depth_to(bridge, first_tx))
    assert bridge.world.chain.epoch_root(epoch) is None
    bridge.index()
    assert bridge.row(f"commit:{epoch}").status == "sent"  # detected, to be sent again
    mine(bridge.world.w3, MARGIN + 1)
    bridge.index()
    assert committed(bridge, epoch) == (None, None)

    bridge.send_all()
    assert bridge.row(f"commit:{epoch}").tx_hash == first_tx  # the same bytes landed
    assert bridge.world.chain.epoch_root(epoch) == bytes.fromhex(root[2:])
    bridge.final()
    assert committed(bridge, epoch)[0] == first_tx


def test_a_final_commitment_a_deeper_reorg_removed_is_not_final_until_it_is_again(
        bridge: Bridge) -> None:
    epoch = new_epoch(bridge)
    close_an_epoch(bridge, epoch)
    bridge.send_all()
    bridge.final()
    first_tx, first_block = committed(bridge, epoch)
    assert first_tx is not None

    reorg(bridge.world.w3, depth_to(bridge, first_tx) + 1)  # past the margin
    bridge.index()
    assert bridge.row(f"commit:{epoch}").status == "sent"
    assert committed(bridge, epoch) == (None, None)

    mine(bridge.world.w3, 2)  # the same bytes land in another block
    bridge.send_all()
    bridge.index()
    assert committed(bridge, epoch) == (None, None)  # provisional again
    bridge.final()

    tx_hash, block = committed(bridge, epoch)
    assert tx_hash == first_tx and block is not None and block > first_block  # type: ignore[operator]
    with bridge.factory() as session:  # one indexed event, applied once
        (stored,) = [s for s in index.events(session, cursor="mesh")
                     if "0x" + s.event.tx_hash.hex() == first_tx]
    assert stored.applied and stored.event.block_number == block


def test_another_root_for_our_epoch_is_not_taken_as_our_commitment(
        bridge: Bridge, caplog: pytest.LogCaptureFixture) -> None:
    epoch = new_epoch(bridge)
    close_an_epoch(bridge, epoch)
    bridge.world.chain.resync_nonces()
    bridge.world.orchestrator.commit_epoch(epoch, b"\x77" * 32)  # another process, another root
    bridge.send_all()
    assert bridge.row(f"commit:{epoch}").status == "failed"
    bridge.final()
    bridge.final()  # later passes look at the unfinal epoch again, quietly
    assert committed(bridge, epoch) == (None, None)
    assert len([r for r in caplog.records if f"epoch {epoch} was committed" in r.getMessage()
                and "not ours" in r.getMessage()]) == 1


def test_a_score_slash_a_finder_proves_carries_out_our_decision_and_its_demotion_is_adopted(
        bridge: Bridge) -> None:
    """The policy's LOW_SCORE decision puts the node's score under the threshold in the epoch
    root (through the outbox); a third party proves it on chain (`slashForScore`), which
    slashes and demotes the provider. Both final events come back: the decision carries the
    chain's slash id, and the node the chain's tier, in the DB and every engine."""
    world, clock = bridge.world, bridge.clock
    if world.chain.provider_stake(PROVIDER.address).tier == int(Tier.BACKGROUND):
        set_tier_out_of_band(bridge, Tier.STANDARD)  # so that the demotion is a change
        bridge.final()
    window = keccak(text=f"low window {next(_numbers)}")
    with bridge.factory.begin() as session:
        pls_store.add_slash(session, slash_id=keccak(text=f"low score {window.hex()}"),
                            node_id=bridge.node, provider=PROVIDER.address,
                            reason=int(SlashReason.LOW_SCORE), amount=0, evidence=window,
                            task_id=None, decided_at=clock(), detail="sustained low score")
    epoch = new_epoch(bridge)
    close_an_epoch(bridge, epoch)
    bridge.send_all()
    with bridge.factory() as session:
        proof = bridge.pls.staking.score_proof(session, provider=PROVIDER.address, epoch=epoch)
        (record,) = session.scalars(select(SlashRecord).where(SlashRecord.epoch == epoch))
        session.expunge(record)
    assert proof is not None and record.chain_slash_id is None
    finder = world.chain.account(dev_account(7))
    slash_id, _ = finder.slash_for_score(PROVIDER.address, epoch, proof.score_bps,
                                         proof.telemetry_digest, proof.proof)
    assert slash_id > 0
    assert world.chain.provider_stake(PROVIDER.address).tier == int(Tier.BACKGROUND)
    logged = bridge.tier_observations()
    bridge.index()
    assert slash_record(bridge, record.slash_id).chain_slash_id is None  # provisional

    bridge.final()

    assert slash_record(bridge, record.slash_id).chain_slash_id == slash_id
    assert bridge.node_tier() == int(Tier.BACKGROUND)
    assert bridge.pls.state.engine.staking.tier(bridge.node) is Tier.BACKGROUND
    assert bridge.tier_observations() == [*logged, int(Tier.BACKGROUND)]


# ---------------------------------------------------------------- tiers


def set_tier_out_of_band(bridge: Bridge, tier: Tier) -> str:
    """The chain moves the provider's tier outside our outbox (an operator's call; a score
    slash or its reversal does the same inside the StakeManager)."""
    bridge.world.chain.resync_nonces()
    return bridge.world.send(bridge.world.orchestrator, bridge.world.chain.stake_manager,
                             "setTier", PROVIDER.address, int(tier)).tx_hash


def another_tier(bridge: Bridge) -> Tier:
    """A tier neither the node nor the chain holds now (the chain emits only a change)."""
    held = {bridge.node_tier(), bridge.world.chain.provider_stake(PROVIDER.address).tier}
    return next(tier for tier in Tier if int(tier) not in held)


def test_a_tier_the_chain_moved_is_adopted_by_the_db_and_every_engine_once_final(
        bridge: Bridge) -> None:
    start = bridge.node_tier()
    target = another_tier(bridge)
    logged = bridge.tier_observations()
    moved = set_tier_out_of_band(bridge, target)
    bridge.index()
    assert bridge.node_tier() == start  # provisional
    assert bridge.pls.state.engine.staking.tier(bridge.node) is Tier(start)

    bridge.final()

    assert bridge.node_tier() == int(target)
    assert bridge.pls.state.engine.staking.tier(bridge.node) is target
    assert bridge.tier_observations() == [*logged, int(target)]  # for every replica
    with bridge.factory() as session:  # nothing to send: the chain already holds it
        assert outbox_store.unmined(session, kind=SetTier.kind) == []
    assert apply_again(bridge, "TierChanged", pls_chain.on_tier_changed, tx_hash=moved,
                       staking=bridge.pls.staking) == [False]
    assert bridge.tier_observations() == [*logged, int(target)]


def test_a_tier_change_a_reorg_removed_before_it_was_final_changes_nothing(
        bridge: Bridge) -> None:
    start = bridge.node_tier()
    logged = bridge.tier_observations()
    set_tier_out_of_band(bridge, another_tier(bridge))
    bridge.index()

    reorg(bridge.world.w3, 1)
    bridge.world.chain.resync_nonces()
    bridge.final()

    assert bridge.node_tier() == start
    assert bridge.pls.state.engine.staking.tier(bridge.node) is Tier(start)
    assert bridge.tier_observations() == logged


def test_our_own_tier_decision_on_its_way_wins_over_a_chain_tier_it_will_replace(
        bridge: Bridge) -> None:
    """The policy's decision is in the DB and queued; the chain's tier moved meanwhile (its
    event final first): the node keeps the decision, whose own transaction then lands, and
    its event changes nothing either."""
    outside = another_tier(bridge)  # differs from the chain's tier: an event
    decided = next(tier for tier in Tier if tier is not outside)
    with bridge.factory.begin() as session:
        pls_store.set_node_tier(session, node_id=bridge.node, tier=int(decided))
    bridge.queue(SetTier(provider=PROVIDER.address, tier=int(decided), node_id=bridge.node,
                         detail="policy"), f"tier:{bridge.node}:policy")
    logged = bridge.tier_observations()
    set_tier_out_of_band(bridge, outside)
    bridge.final()
    assert bridge.node_tier() == int(decided)

    bridge.send_all()
    bridge.final()

    assert bridge.node_tier() == int(decided)
    assert bridge.world.chain.provider_stake(PROVIDER.address).tier == int(decided)
    ours = bridge.row(f"tier:{bridge.node}:policy").tx_hash
    assert [e.args["newTier"] for e in bridge.events("TierChanged")
            if "0x" + e.tx_hash.hex() == ours] == [int(decided)]
    assert bridge.tier_observations() == logged  # neither event moved the engines


# ---------------------------------------------------------------- reservation terms


def lender(bridge: Bridge, *, ceiling: int, horizon_s: int) -> str:
    """A provider of its own (terms, once set, stay: one per test and database) with 100
    tokens bonded under terms."""
    account = dev_account(next(_lenders))
    bridge.world.chain.account(dev_account(0)).mint(account.address, 100 * TOKEN)
    own = bridge.world.chain.account(account)
    own.stake(100 * TOKEN)
    own.set_reservation_terms(ceiling, horizon_s)
    return account.address


def chain_placement(bridge: Bridge, make_app: AppMaker) -> PlsPlacement:
    """The placement gate of a replica that reads stake from the chain, on chain time."""
    bridge.clock.now = float(bridge.world.w3.eth.get_block("latest")["timestamp"])
    app = make_app(stake_reader=bridge.world.chain)
    service: PlsService = app.app.state.ctx.pls  # type: ignore[attr-defined]
    return service.placement


def place(bridge: Bridge, gate: PlsPlacement, provider: str, collateral: int) -> float:
    """A task of an escrowed job placed on `provider` with `collateral` (`reserved_many`, as the
    placer calls it in the placement's transaction); the outbox sends what it queued.
    Returns the placement's time."""
    job_hex = "0x" + escrow(bridge.world).hex()
    now = bridge.clock()
    with bridge.factory.begin() as session:
        job_db.create_job(session, NewJob(
            job_id=job_hex, customer=bridge.world.customer.address, spec={},
            spec_hash="0x" + "05" * 32, amount=PAYMENT, deadline=now + 1e6, needs=TaskNeeds(),
            payloads=({"frame": 1},)), now=now, status=JobStatus.RUNNING)
        session.flush()
        (task,) = job_db.job_tasks(session, job_id=job_hex)
        gate.reserved_many(session, placements=[Placed(
            task.id, job_hex, bridge.node, provider, Admission(rs=0.9, collateral=collateral))],
            now=now)
    bridge.send_all()
    return now


def test_a_provider_is_placed_only_work_a_raise_within_its_ceiling_backs(
        bridge: Bridge, make_app: AppMaker) -> None:
    provider = lender(bridge, ceiling=30 * TOKEN, horizon_s=7 * 86_400)
    gate = chain_placement(bridge, make_app)
    assert gate.covers(provider, COLLATERAL, bridge.clock())

    place(bridge, gate, provider, COLLATERAL)

    # Raised to the ceiling, not to twice the collateral (which the contract refuses).
    reserve = bridge.row(f"reserve:{provider}")
    assert (reserve.status, reserve.payload["amount"]) == ("confirmed", str(30 * TOKEN))
    assert bridge.world.chain.provider_stake(provider).reserved == 30 * TOKEN
    # A second one would need 40 reserved: 80 tokens are free, but the provider lends 30.
    assert bridge.world.chain.provider_stake(provider).free - COLLATERAL >= COLLATERAL
    assert not gate.covers(provider, COLLATERAL, bridge.clock())
    assert gate.covers(provider, 10 * TOKEN, bridge.clock())  # the ceiling still backs 30


def test_a_reservation_lapses_within_the_providers_horizon(
        bridge: Bridge, make_app: AppMaker) -> None:
    provider = lender(bridge, ceiling=1_000 * TOKEN, horizon_s=86_400)  # < reservation_s
    gate = chain_placement(bridge, make_app)

    placed_at = place(bridge, gate, provider, COLLATERAL)

    # A day from the placement, not the orchestrator's week (which the contract refuses).
    assert bridge.row(f"reserve:{provider}").status == "confirmed"
    reservation = bridge.world.chain.provider_stake(provider)
    assert (reservation.reserved, reservation.reserved_until) == (2 * COLLATERAL,
                                                                 int(placed_at) + 86_400)
