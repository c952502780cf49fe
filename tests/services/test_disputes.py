"""Disputes end to end against anvil and a real database: a job settled through the outbox,
disputes opened and ruled with real transactions, the ChainEvents of their receipts applied
(twice: one effect), and the job, payout and provider state following the chain. The evidence
bundle's Merkle proofs verify against the roots the chain holds."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from eth_utils import keccak
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.chain.anvil import dev_account, increase_time, revert_to, snapshot
from orchestrator.chain.errors import ContractError
from orchestrator.chain.receipt_events import receipt_events
from orchestrator.chain.sdk import MeshAccount, MeshChain
from orchestrator.chain.tx import Receipt
from orchestrator.db import blobs as blob_db
from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db import pls as pls_store
from orchestrator.db import statuses as status_db
from orchestrator.db import verification as verification_store
from orchestrator.db.models import DisputeRow, OutboxAction, PlsObservationRecord, SlashRecord
from orchestrator.domain import merkle
from orchestrator.domain.chain_views import SlashStatus
from orchestrator.domain.errors import Refused
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus, TaskStatus
from orchestrator.domain.reliability import TaskOutcome
from orchestrator.domain.score_commitment import EpochEntry, commit_epoch
from orchestrator.domain.types import SlashReason, TaskNeeds, Tier, show_tokens
from orchestrator.domain.verification import ProviderRecord
from orchestrator.scheduling.periodic import LeaderRunner
from orchestrator.services import disputes, pls_chain, settlement
from orchestrator.services.outbox.sender import LEASE_NAME, OutboxSender
from orchestrator.services.pls import PlsService
from orchestrator.telemetry.metrics import MeshMetrics
from protocol.client import Wallet
from tests.clients import VirtualClock, make_wallet, registration
from tests.services.conftest import AppMaker

pytestmark = pytest.mark.anvil
TOKEN = 10**18
STAKE = 1_000 * TOKEN
COLLATERAL = 50 * TOKEN
AMOUNT = 100 * TOKEN
ADMIN, ORCHESTRATOR, SLASHER, ARBITER = (dev_account(i) for i in range(4))
CUSTOMER, PROVIDER, STRANGER = dev_account(4), dev_account(5), dev_account(7)
NODE = "node-disputed"
_jobs = itertools.count(1)


@pytest.fixture
def mesh(session_chain: MeshChain) -> Iterator[MeshChain]:
    """The session deployment inside an evm snapshot (ape's plugin owns the name `chain`)."""
    snapshot_id = snapshot(session_chain.w3)
    yield session_chain
    revert_to(session_chain.w3, snapshot_id)
    session_chain.resync_nonces()


@pytest.fixture
def app(make_app: AppMaker, mesh: MeshChain) -> TestClient:
    return make_app(escrow_reader=mesh)


def pls_of(app: TestClient) -> PlsService:
    service: PlsService = app.app.state.ctx.pls  # type: ignore[attr-defined]
    return service


def account(mesh: MeshChain, index: int) -> MeshAccount:
    return mesh.account(dev_account(index))


@dataclass(frozen=True)
class Settled:
    job_id: str
    settle_tx: str
    hashes: list[str]  # checkpoint and result sha256 of the job


TEXTURE = b"a texture the scene reads"
PACK = {"tex/rel.png": hashlib.sha256(TEXTURE).hexdigest()}  # the signed spec's manifest


def settled_job(factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
                clock: VirtualClock) -> Settled:
    """A two-frame job our provider rendered (one checkpoint and one result per frame),
    collateral locked on chain, settled by the outbox sender through the production path, its
    payout to the provider proven."""
    job_id = keccak(text=f"disputed job {next(_jobs)}")
    hex_id = "0x" + job_id.hex()
    chain_now = int(mesh.w3.eth.get_block("latest")["timestamp"])
    account(mesh, 4).create_job(job_id, AMOUNT, chain_now + 30 * 86_400, b"\x05" * 32)
    provider = account(mesh, 5)
    if mesh.provider_stake(PROVIDER.address).bonded == 0:
        provider.stake(STAKE)
    account(mesh, 1).lock_collateral(job_id, [PROVIDER.address], [COLLATERAL])
    now = clock()
    hashes: list[str] = []
    if not pls_of(app).state.engine.knows(NODE):
        registered = wallet(app, clock, 5).send("POST", "/v1/nodes", registration(NODE))
        assert registered.status_code == 200, registered.text
    with factory.begin() as session:
        payloads = [{"kind": "blender", "blend_sha256": "b" * 64, "frame": f, "tile": 0,
                     "tiles": 1, "format": "png", "samples": 8, "chunk_samples": 4,
                     "resolution": [32, 24]} for f in (1, 2)]
        job = job_db.create_job(session, NewJob(
            job_id=hex_id, customer=CUSTOMER.address,
            spec={"workload": {"kind": "blender", "assets": PACK}}, spec_hash="0x" + "05" * 32,
            amount=AMOUNT, deadline=now + 1e6, needs=TaskNeeds(), payloads=tuple(payloads)),
            now=now, status=JobStatus.RUNNING)
        session.flush()
        for task in job_db.job_tasks(session, job_id=hex_id):
            for status in (TaskStatus.RESERVED, TaskStatus.RUNNING, TaskStatus.DONE):
                status_db.set_task_status(session, task=task, target=status, now=now, reason="test")
            task.node_id = NODE
            for progress in (0.5, 1.0):
                digest = hashlib.sha256(f"{hex_id} {task.index} {progress}".encode()).hexdigest()
                blob_db.add_blob(session, sha256=digest, size=1, now=now)
                blob_db.add_checkpoint(session, task=task, node_id=NODE, sha256=digest,
                                    progress=progress, is_result=progress == 1.0, now=now)
                hashes.append(digest)
            task.result_sha256 = hashes[-1]
        job.merkle_root = settlement.job_merkle_root(session, job_id=hex_id)
        status_db.set_job_status(session, job=job, target=JobStatus.VERIFYING, now=now,
                            reason="all tasks done")
        assert settlement.queue_settlement(session, job=job, now=now)
    sender = OutboxSender(mesh, account(mesh, 1), MeshMetrics())
    runner = LeaderRunner(factory, holder="test", clock=clock)
    for _ in range(20):  # a pass signs and sends, a later one sees the receipt
        runner.run_if_leader(LEASE_NAME, ttl_s=30.0, work=sender.work)
        if job_status(factory, hex_id) == JobStatus.SETTLED:
            break
        clock.advance(2)
    with factory() as session:
        row = session.scalars(select(OutboxAction).where(
            OutboxAction.idempotency_key == f"settle:{hex_id}")).one()
        assert row.status == "confirmed" and row.tx_hash is not None, (row.note, row.attempts)
        assert job_db.get_job(session, job_id=hex_id).status == JobStatus.SETTLED  # type: ignore[union-attr]
    # What the job paid the provider, proven (by anyone) from the settlement's own calldata:
    # what a dispute of that payout may freeze at most.
    account(mesh, 4).prove_payout(job_id, PROVIDER.address, mesh.settlement_pairs(row.tx_hash))
    return Settled(hex_id, row.tx_hash, hashes)


def apply(factory: sessionmaker[Session], mesh: MeshChain, app: TestClient, receipt: Receipt,
          now: float) -> list[bool]:
    """Apply every Disputes event of the receipt twice: the second pass must change nothing."""
    events = [e for e in receipt_events(mesh, receipt) if e.contract == "Disputes"]
    assert events, "the transaction emitted no dispute event"
    changed = []
    for _ in range(2):
        for event in events:
            with factory.begin() as session:
                changed.append(disputes.apply_event(session, event, chain=mesh,
                                                    pls=pls_of(app), now=now))
    assert changed[len(events):] == [False] * len(events)
    return changed[:len(events)]


def dispute_row(factory: sessionmaker[Session], dispute_id: int) -> DisputeRow:
    with factory() as session:
        row = session.get(DisputeRow, dispute_id)
        assert row is not None
        session.expunge(row)
        return row


def job_status(factory: sessionmaker[Session], job_id: str) -> str:
    with factory() as session:
        job = job_db.get_job(session, job_id=job_id)
        assert job is not None
        return job.status


# ---------------------------------------------------------------- settlement disputes


def test_a_customer_dispute_granted_moves_the_frozen_payout_and_the_job_follows(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    job = settled_job(factory, mesh, app, clock)
    frozen = 30 * TOKEN
    claimable_before = mesh.escrow_balance(CUSTOMER.address).claimable
    started = time.perf_counter()
    dispute_id, opened = account(mesh, 4).open_settlement_dispute(
        bytes.fromhex(job.job_id[2:]), PROVIDER.address, frozen, keccak(text="frame 2 black"))

    assert apply(factory, mesh, app, opened, clock()) == [True]
    row = dispute_row(factory, dispute_id)
    assert (row.status, row.kind, row.job_id, row.frozen_amount) == (
        "open", "settlement", job.job_id, frozen)
    assert job_status(factory, job.job_id) == JobStatus.DISPUTED

    ruled = account(mesh, 3).resolve_dispute(dispute_id, granted=True, slash_amount=10 * TOKEN,
                                             evidence=keccak(text="re-rendered: black"))
    assert apply(factory, mesh, app, ruled, clock() + 60) == [True]
    elapsed = time.perf_counter() - started

    row = dispute_row(factory, dispute_id)
    assert row.status == "granted" and row.ruling_slash_id is not None
    # tokens, not token units: what the dashboard prints
    assert f"{show_tokens(frozen)} tokens frozen go to {CUSTOMER.address}" in row.outcome
    assert str(frozen) not in row.outcome
    assert job_status(factory, job.job_id) == JobStatus.SETTLED
    # what the row says is what the chain did: the frozen payout is the customer's, at once
    assert mesh.escrow_balance(CUSTOMER.address).claimable == claimable_before + frozen
    assert mesh.escrow_balance(PROVIDER.address).frozen == 0
    slash = mesh.slash_of(row.ruling_slash_id)
    assert slash is not None and slash.provider == PROVIDER.address
    print(f"\ndispute {dispute_id}: opened -> ruled and reflected in {elapsed:.3f} s")


def test_a_dismissed_dispute_returns_the_payout_and_two_disputes_keep_the_job_disputed(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    job = settled_job(factory, mesh, app, clock)
    job_bytes = bytes.fromhex(job.job_id[2:])
    first, opened_first = account(mesh, 4).open_settlement_dispute(
        job_bytes, PROVIDER.address, 10 * TOKEN, bytes(32))
    second, opened_second = account(mesh, 4).open_settlement_dispute(
        job_bytes, PROVIDER.address, 5 * TOKEN, bytes(32))
    apply(factory, mesh, app, opened_first, clock())
    apply(factory, mesh, app, opened_second, clock())

    apply(factory, mesh, app, account(mesh, 3).resolve_dispute(first, granted=False), clock())
    assert dispute_row(factory, first).status == "dismissed"
    assert job_status(factory, job.job_id) == JobStatus.DISPUTED  # the second is still open
    assert mesh.escrow_balance(PROVIDER.address).frozen == 5 * TOKEN

    apply(factory, mesh, app, account(mesh, 3).resolve_dispute(second, granted=False), clock())
    row = dispute_row(factory, second)
    assert row.status == "dismissed" and f"go to {PROVIDER.address}" in row.outcome
    assert f"the bond of {show_tokens(row.bond)} tokens to {PROVIDER.address}" in row.outcome
    assert str(row.bond) not in row.outcome
    assert job_status(factory, job.job_id) == JobStatus.SETTLED
    assert mesh.escrow_balance(PROVIDER.address).frozen == 0


def test_a_dispute_after_the_window_is_refused_on_chain_and_changes_nothing(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    job = settled_job(factory, mesh, app, clock)
    increase_time(mesh.w3, mesh.settlement_dispute_window() + 1)

    with pytest.raises(ContractError) as caught:
        account(mesh, 4).open_settlement_dispute(bytes.fromhex(job.job_id[2:]),
                                                 PROVIDER.address, TOKEN, bytes(32))

    assert caught.value.name == "JobEscrowDisputeWindowClosed"
    assert job_status(factory, job.job_id) == JobStatus.SETTLED
    with factory() as session:
        assert session.scalars(select(DisputeRow)).first() is None


def test_the_default_ruling_after_the_deadline_lets_the_settlement_stand(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    job = settled_job(factory, mesh, app, clock)
    dispute_id, opened = account(mesh, 4).open_settlement_dispute(
        bytes.fromhex(job.job_id[2:]), PROVIDER.address, 10 * TOKEN, bytes(32))
    apply(factory, mesh, app, opened, clock())
    with pytest.raises(ContractError, match="DisputesRulingDeadlineNotReached"):
        account(mesh, 7).apply_default_ruling(dispute_id)

    increase_time(mesh.w3, int(mesh.disputes.functions.rulingPeriod().call()) + 1)
    with pytest.raises(ContractError, match="DisputesRulingDeadlinePassed"):
        account(mesh, 3).resolve_dispute(dispute_id, granted=True)
    defaulted = account(mesh, 7).apply_default_ruling(dispute_id)

    assert apply(factory, mesh, app, defaulted, clock()) == [True]
    row = dispute_row(factory, dispute_id)
    assert row.status == "defaulted" and "by default" in row.outcome
    assert job_status(factory, job.job_id) == JobStatus.SETTLED
    assert mesh.escrow_balance(PROVIDER.address).frozen == 0


def test_a_ruling_whose_opening_was_never_applied_is_refused(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    job = settled_job(factory, mesh, app, clock)
    dispute_id, _ = account(mesh, 4).open_settlement_dispute(
        bytes.fromhex(job.job_id[2:]), PROVIDER.address, TOKEN, bytes(32))
    ruled = account(mesh, 3).resolve_dispute(dispute_id, granted=False)
    (event,) = [e for e in receipt_events(mesh, ruled) if e.name == "DisputeRuled"]
    with factory.begin() as session, pytest.raises(Refused) as caught:
        disputes.apply_event(session, event, chain=mesh, pls=pls_of(app), now=clock())
    assert caught.value.code == "dispute_unknown"


# ---------------------------------------------------------------- slash disputes


def test_a_reversed_slash_restores_the_nodes_tier_and_record(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    job = settled_job(factory, mesh, app, clock)
    pls = pls_of(app)
    assert pls.state.engine.staking.tier(NODE) is Tier.STANDARD
    # The node's result fails verification, as `Verifier._failed` records it: demoted, the
    # provider's record counts the failure, the policy decides the slash.
    evidence = keccak(text="verification evidence")
    with factory.begin() as session:
        task = job_db.job_tasks(session, job_id=job.job_id)[0]
        verification_store.update_record(session, provider=PROVIDER.address, now=clock(),
                                         change=lambda _: ProviderRecord(0, 1))
        pls_store.set_node_tier(session, node_id=NODE, tier=int(Tier.BACKGROUND))
        pls.ingest.task_outcome(session, node_id=NODE, task_id=task.id,
                                outcome=TaskOutcome.FAILED_VERIFICATION, now=clock(),
                                evidence=evidence)
    with factory.begin() as session:
        (decided,) = pls.staking.decide(session, now=clock()).slashes
    assert pls.state.engine.staking.tier(NODE) is Tier.BACKGROUND
    # The slash lands on chain with the decision's evidence (collateral of another job).
    job_id = keccak(text=f"slashed job {next(_jobs)}")
    chain_now = int(mesh.w3.eth.get_block("latest")["timestamp"])
    account(mesh, 4).create_job(job_id, AMOUNT, chain_now + 86_400, b"\x06" * 32)
    account(mesh, 1).lock_collateral(job_id, [PROVIDER.address], [COLLATERAL])
    bonded = mesh.provider_stake(PROVIDER.address).bonded
    slash_id, slashed = account(mesh, 2).slash_collateral(
        job_id, PROVIDER.address, 0, COLLATERAL, int(SlashReason.FAILED_VERIFICATION),
        decided.evidence)
    (event,) = [e for e in receipt_events(mesh, slashed) if e.name == "Slashed"]
    with factory.begin() as session:  # the indexer's handler, once the event is final
        assert pls_chain.on_slashed(session, event, clock())

    dispute_id, opened = account(mesh, 5).open_slash_dispute(slash_id, keccak(text="matched"))
    assert apply(factory, mesh, app, opened, clock()) == [True]
    row = dispute_row(factory, dispute_id)
    assert (row.kind, row.slash_id, row.job_id) == ("slash", slash_id, job.job_id)

    ruled = account(mesh, 3).resolve_dispute(dispute_id, granted=True)
    assert apply(factory, mesh, app, ruled, clock()) == [True]

    assert dispute_row(factory, dispute_id).status == "granted"
    with factory() as session:
        record = session.scalars(select(SlashRecord)).one()
        assert record.reversed_by == dispute_id
        node = node_db.get_node(session, node_id=NODE)
        assert node is not None and node.tier == int(Tier.STANDARD)
        assert verification_store.record_of(session, provider=PROVIDER.address).failures == 0
        restored = session.scalars(select(OutboxAction).where(
            OutboxAction.idempotency_key.like(f"tier:dispute:{dispute_id}:%"))).all()
        assert [(t.payload["provider"], t.payload["tier"]) for t in restored] == [
            (PROVIDER.address, int(Tier.STANDARD))]
        logged = session.scalars(select(PlsObservationRecord).where(
            PlsObservationRecord.kind == "tier")).all()
        assert [o.body["tier"] for o in logged][-1] == int(Tier.STANDARD)
    assert pls.state.engine.staking.tier(NODE) is Tier.STANDARD  # every replica adopts it
    reversed_slash = mesh.slash_of(slash_id)
    assert reversed_slash is not None and reversed_slash.status is SlashStatus.REVERSED
    assert mesh.provider_stake(PROVIDER.address).bonded == bonded
    # the slash's bundle: for the provider, the beneficiary (the slashed job's customer), arbiters
    path = f"/v1/slashes/{slash_id}/evidence"
    codes = {i: wallet(app, clock, i).send("GET", path).status_code for i in (3, 4, 5, 7)}
    assert codes == {3: 200, 4: 200, 5: 200, 7: 403}
    bundle = wallet(app, clock, 5).send("GET", path).json()
    assert (bundle["reason"], bundle["status"], bundle["evidence"]) == (
        "failed_verification", "reversed", "0x" + decided.evidence.hex())
    assert [r["reversed_by"] for r in bundle["records"]] == [dispute_id]
    assert bundle["job"]["job_id"] == job.job_id
    assert [d["status"] for d in bundle["disputes"]] == ["granted"]
    # one id, one spelling: the dashboard shows the id the evidence route takes
    (shown,) = app.get("/v1/dashboard").json()["slashes"]
    assert shown["slash_id"] == str(slash_id)
    again = wallet(app, clock, 5).send("GET", f"/v1/slashes/{shown['slash_id']}/evidence")
    assert again.status_code == 200, again.text


def test_a_dismissed_slash_dispute_leaves_the_tier_and_record_alone(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    settled_job(factory, mesh, app, clock)
    job_id = keccak(text=f"slashed job {next(_jobs)}")
    chain_now = int(mesh.w3.eth.get_block("latest")["timestamp"])
    account(mesh, 4).create_job(job_id, AMOUNT, chain_now + 86_400, b"\x06" * 32)
    account(mesh, 1).lock_collateral(job_id, [PROVIDER.address], [COLLATERAL])
    evidence = keccak(text="abandoned")
    with factory.begin() as session:
        pls_store.add_slash(session, slash_id=keccak(text="decision 2"), node_id=NODE,
                            provider=PROVIDER.address, reason=int(SlashReason.ABANDONMENT),
                            amount=COLLATERAL, evidence=evidence, task_id=None,
                            decided_at=clock(), detail="abandoned")
        pls_store.set_node_tier(session, node_id=NODE, tier=int(Tier.BACKGROUND))
    slash_id, _ = account(mesh, 2).slash_collateral(job_id, PROVIDER.address, 0, COLLATERAL,
                                                    int(SlashReason.ABANDONMENT), evidence)
    dispute_id, opened = account(mesh, 5).open_slash_dispute(slash_id, bytes(32))
    apply(factory, mesh, app, opened, clock())
    apply(factory, mesh, app, account(mesh, 3).resolve_dispute(dispute_id, granted=False),
          clock())

    row = dispute_row(factory, dispute_id)
    assert row.status == "dismissed" and "stands" in row.outcome
    with factory() as session:
        assert session.scalars(select(SlashRecord)).one().reversed_by is None
        assert node_db.get_node(session, node_id=NODE).tier == int(Tier.BACKGROUND)  # type: ignore[union-attr]
    slash = mesh.slash_of(slash_id)
    assert slash is not None and slash.status is SlashStatus.PENDING


# ---------------------------------------------------------------- the evidence bundle


def wallet(app: TestClient, clock: VirtualClock, index: int) -> Wallet:
    settings = app.app.state.ctx.settings  # type: ignore[attr-defined]
    return make_wallet(app, clock, chain_id=settings.chain_id,
                  orchestrator_id=settings.orchestrator_id, account=dev_account(index))


def test_the_evidence_bundle_proves_every_artifact_and_score_against_the_chain(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    job = settled_job(factory, mesh, app, clock)
    epoch = 7
    entries = [EpochEntry(PROVIDER.address, 8_000, keccak(text="telemetry window")),
               EpochEntry(dev_account(6).address, 9_000, keccak(text="other window"))]
    committed = commit_epoch(entries)
    with factory.begin() as session:
        pls_store.add_epoch(session, epoch=epoch, root=committed.root, closed_at=clock() + 1,
                            leaves=[pls_store.LeafRow(e.provider, NODE, e.score_bps,
                                                      e.telemetry_digest) for e in entries])
    account(mesh, 1).commit_epoch(epoch, committed.root)
    path = f"/v1/jobs/{job.job_id}/evidence"

    response = wallet(app, clock, 4).send("GET", path)

    assert response.status_code == 200, response.text
    bundle = response.json()
    root = mesh.settled_result_root(bundle["settlement_tx"], bytes.fromhex(job.job_id[2:]))
    assert root is not None and "0x" + root.hex() == bundle["result_root"]
    assert sorted(a["sha256"] for a in bundle["artifacts"]) == sorted(job.hashes)
    for artifact in bundle["artifacts"]:
        assert merkle.verify([bytes.fromhex(p[2:]) for p in artifact["proof"]], root,
                             bytes.fromhex(artifact["sha256"]))
    (score,) = bundle["scores"]
    on_chain = mesh.epoch_root(epoch)
    assert on_chain is not None and score["root"] == "0x" + on_chain.hex()
    leaf = merkle.score_leaf(PROVIDER.address, score["score_bps"],
                             bytes.fromhex(score["telemetry_digest"][2:]))
    assert merkle.verify([bytes.fromhex(p[2:]) for p in score["proof"]], on_chain, leaf)
    recipe = bundle["tasks"][0]["recipe"]
    assert (recipe["scene_sha256"], recipe["frame"], recipe["samples"]) == ("b" * 64, 1, 8)
    assert recipe["assets"] == PACK  # a re-render reads exactly the job's pack
    # a tampered artifact does not verify
    assert not merkle.verify([bytes.fromhex(p[2:]) for p in bundle["artifacts"][0]["proof"]],
                             root, bytes(32))
    # the files the bundle names are served to its readers, nothing else is: not even a
    # stored blob (another customer's frame) that this job's bundle does not name
    named = wallet(app, clock, 3).send("GET", f"{path}/{job.hashes[0]}")
    assert named.status_code == 404 and named.json()["error"]["code"] == "blob_not_found"
    store = app.app.state.ctx.blobs  # type: ignore[attr-defined]
    foreign = b"another customer's frame"
    for data, sha in ((foreign, hashlib.sha256(foreign).hexdigest()),
                      (b"unused", job.hashes[0]), (TEXTURE, PACK["tex/rel.png"])):
        store.path_of(sha).parent.mkdir(parents=True, exist_ok=True)
        store.path_of(sha).write_bytes(data)
    named = wallet(app, clock, 3).send("GET", f"{path}/{job.hashes[0]}")
    assert named.status_code == 200 and named.content == b"unused"
    packed = wallet(app, clock, 3).send("GET", f"{path}/{PACK['tex/rel.png']}")
    assert packed.status_code == 200 and packed.content == TEXTURE
    other = wallet(app, clock, 3).send("GET", f"{path}/{hashlib.sha256(foreign).hexdigest()}")
    assert other.status_code == 404 and other.json()["error"]["code"] == "blob_not_in_evidence"
    assert wallet(app, clock, 7).send("GET", f"{path}/{job.hashes[0]}").status_code == 403


def test_the_bundle_is_for_the_customer_the_provider_and_arbiters_only(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    job = settled_job(factory, mesh, app, clock)
    path = f"/v1/jobs/{job.job_id}/evidence"
    codes = {index: wallet(app, clock, index).send("GET", path).status_code
             for index in (3, 4, 5, 7)}
    assert codes == {3: 200, 4: 200, 5: 200, 7: 403}
    assert app.get(path).status_code == 401  # unsigned
    missing = wallet(app, clock, 4).send("GET", "/v1/jobs/0x" + "00" * 32 + "/evidence")
    assert missing.status_code == 404


def test_disputes_are_listed_for_arbiters_and_for_their_parties(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    job = settled_job(factory, mesh, app, clock)
    dispute_id, opened = account(mesh, 4).open_settlement_dispute(
        bytes.fromhex(job.job_id[2:]), PROVIDER.address, TOKEN, bytes(32))
    apply(factory, mesh, app, opened, clock())

    def open_ones(index: int) -> list[int]:
        headers = wallet(app, clock, index).signed_headers("GET", "/v1/disputes", b"")
        response = app.get("/v1/disputes?open=true", headers=headers)
        assert response.status_code == 200, response.text
        return [d["dispute_id"] for d in response.json()]

    listed = {index: open_ones(index) for index in (3, 4, 5, 7)}
    assert listed == {3: [dispute_id], 4: [dispute_id], 5: [dispute_id], 7: []}
    assert wallet(app, clock, 7).send("GET", f"/v1/disputes/{dispute_id}").status_code == 403
    shown = wallet(app, clock, 3).send("GET", f"/v1/disputes/{dispute_id}").json()
    assert shown["status"] == "open" and shown["opener"] == CUSTOMER.address


def test_a_slash_dispute_after_its_window_is_refused_on_chain(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    settled_job(factory, mesh, app, clock)
    job_id = keccak(text=f"slashed job {next(_jobs)}")
    chain_now = int(mesh.w3.eth.get_block("latest")["timestamp"])
    account(mesh, 4).create_job(job_id, AMOUNT, chain_now + 86_400, b"\x06" * 32)
    account(mesh, 1).lock_collateral(job_id, [PROVIDER.address], [COLLATERAL])
    slash_id, _ = account(mesh, 2).slash_collateral(job_id, PROVIDER.address, 0, COLLATERAL,
                                                    int(SlashReason.ABANDONMENT), bytes(32))
    increase_time(mesh.w3, int(mesh.stake_manager.functions.slashDisputeWindow().call()) + 1)

    with pytest.raises(ContractError) as caught:
        account(mesh, 5).open_slash_dispute(slash_id, bytes(32))

    assert caught.value.name == "StakeManagerSlashWindowClosed"
    with factory() as session:
        assert session.scalars(select(DisputeRow)).first() is None


def test_a_ruling_that_contradicts_the_applied_one_is_refused_not_applied(
        factory: sessionmaker[Session], mesh: MeshChain, app: TestClient,
        clock: VirtualClock) -> None:
    job = settled_job(factory, mesh, app, clock)
    dispute_id, opened = account(mesh, 4).open_settlement_dispute(
        bytes.fromhex(job.job_id[2:]), PROVIDER.address, TOKEN, bytes(32))
    apply(factory, mesh, app, opened, clock())
    ruled = account(mesh, 3).resolve_dispute(dispute_id, granted=True)
    apply(factory, mesh, app, ruled, clock())
    (event,) = [e for e in receipt_events(mesh, ruled) if e.name == "DisputeRuled"]
    # the same log as another chain (a reorg the indexer failed to roll back) would tell it
    contradiction = dataclasses.replace(event, args={**event.args, "granted": False})

    with factory.begin() as session, pytest.raises(Refused) as caught:
        disputes.apply_event(session, contradiction, chain=mesh, pls=pls_of(app), now=clock())

    assert caught.value.code == "dispute_conflict"
    assert dispute_row(factory, dispute_id).status == "granted"
