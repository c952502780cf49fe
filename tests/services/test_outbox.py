"""The outbox sender against anvil and a real database (SQLite and PostgreSQL): every queued
chain action lands exactly once, across crashes, out-of-band settlements, reverts, RPC
outages and competing orchestrator processes."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from eth_utils import keccak
from hexbytes import HexBytes
from prometheus_client import generate_latest
from pydantic import SecretStr
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker
from web3 import HTTPProvider, Web3
from web3.types import RPCEndpoint

from orchestrator.chain.anvil import dev_account, increase_time
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import SignedTx, connect
from orchestrator.config import Settings
from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db import outbox as outbox_store
from orchestrator.db import statuses as status_db
from orchestrator.db.models import OutboxAction, OutboxTransaction
from orchestrator.domain.chain_actions import AssignCollateral, assignment_tree
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.fees import FeePolicy
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus, OutboxStatus, TaskStatus
from orchestrator.domain.types import NodeSpec, TaskNeeds
from orchestrator.processes import free_port
from orchestrator.scheduling.periodic import LeaderRunner
from orchestrator.services import settlement
from orchestrator.services.outbox.config import GWEI, SenderConfig
from orchestrator.services.outbox.sender import LEASE_NAME, FaultHooks, OutboxSender, build_sender
from orchestrator.telemetry.metrics import MeshMetrics
from tests.clients import VirtualClock

pytestmark = pytest.mark.anvil

TOKEN = 10**18
ORCHESTRATOR = dev_account(1)
CUSTOMER = dev_account(4)
PROVIDER = dev_account(5).address
OTHER_PROVIDER = dev_account(6).address
LEASE_TTL_S = 30.0
_job_numbers = itertools.count(1)


class Crash(Exception):
    """The orchestrator process dying at an injected point."""


@pytest.fixture
def sender(mesh: MeshChain, metrics: MeshMetrics) -> OutboxSender:
    return OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics)


def fresh_sender(mesh: MeshChain, *, hooks: FaultHooks | None = None,
                 config: SenderConfig | None = None) -> OutboxSender:
    """A sender as a newly started process builds it: its own connection and nonce count."""
    own = MeshChain(connect(mesh.w3.provider.endpoint_uri), mesh.deployment)  # type: ignore[attr-defined]
    return OutboxSender(own, own.account(ORCHESTRATOR), MeshMetrics(), hooks=hooks,
                        config=config)


def drain(factory: sessionmaker[Session], sender: OutboxSender, clock: VirtualClock, *,
          holder: str = "orchestrator-a") -> bool:
    """One leader-locked pass, exactly as the service's periodic job runs it, then the time
    the service leaves between passes: with automine on, anvil mines what the pass broadcast
    (it mines after answering `eth_sendRawTransaction`, later on a busy machine)."""
    runner = LeaderRunner(factory, holder=holder, clock=clock)
    ran = runner.run_if_leader(LEASE_NAME, ttl_s=LEASE_TTL_S, work=sender.work)
    automined(sender.tx.chain.w3)
    return ran


def automined(w3: Web3) -> None:
    """Wait (30 s at most) until anvil, automining, has mined every transaction in its pool;
    nothing to wait for with automine off or the node out of reach (a cut proxy)."""
    def call(method: str) -> Any:
        return w3.provider.make_request(RPCEndpoint(method), [])["result"]

    deadline = time.monotonic() + 30
    with contextlib.suppress(OSError):  # requests' connection errors and timeouts
        while (call("anvil_getAutomine") and int(call("txpool_status")["pending"], 16)
               and time.monotonic() < deadline):
            time.sleep(0.02)


def rows(factory: sessionmaker[Session]) -> list[OutboxAction]:
    with factory() as session:
        return list(session.scalars(select(OutboxAction).order_by(OutboxAction.id)))


def automine(mesh: MeshChain, enabled: bool) -> None:
    mesh.w3.provider.make_request(RPCEndpoint("evm_setAutomine"), [enabled])


def tx_count(mesh: MeshChain) -> int:
    return int(mesh.w3.eth.get_transaction_count(ORCHESTRATOR.address))


def escrow(mesh: MeshChain, amount: int) -> str:
    """A job escrowed on chain by the customer; returns its 0x id."""
    job_id = keccak(text=f"bridge job {next(_job_numbers)}")
    deadline = int(mesh.w3.eth.get_block("latest")["timestamp"]) + 30 * 86_400
    mesh.account(CUSTOMER).create_job(job_id, amount, deadline, b"\x05" * 32)
    return "0x" + job_id.hex()


def queue(factory: sessionmaker[Session], kind: str, key: str, payload: dict[str, Any]) -> None:
    with factory.begin() as session:
        assert outbox_store.enqueue_chain_action(session, kind=kind, idempotency_key=key,
                                         payload=payload, now=0.0)


def queue_settle(factory: sessionmaker[Session], job_id: str, payouts: dict[str, int]) -> None:
    queue(factory, "settle", f"settle:{job_id}",
          {"job_id": job_id, "providers": list(payouts),
           "payouts": [str(p) for p in payouts.values()], "merkle_root": "0x" + "ab" * 32})


def accepted_job(factory: sessionmaker[Session], mesh: MeshChain, *, amount: int,
                 task_providers: list[str], now: float) -> str:
    """A funded job whose tasks the given providers delivered, accepted by the operator: the
    production path (`settlement.queue_settlement`) queues its settlement."""
    job_id = running_job(factory, mesh, amount=amount, task_providers=task_providers, now=now)
    accept(factory, job_id, now=now)
    return job_id


def running_job(factory: sessionmaker[Session], mesh: MeshChain, *, amount: int,
                task_providers: list[str], now: float) -> str:
    """A funded job with a task running on each of the given providers' nodes."""
    job_id = escrow(mesh, amount)
    with factory.begin() as session:
        for provider in set(task_providers):
            node_db.register_node(session, spec=NodeSpec(
                node_id=f"node-{provider}", provider=provider, gpu_model="RTX4090", vram_gb=24,
                compute_capability=8.9, region="eu", price_per_gpu_hour=1, slots=4), now=now)
        job_db.create_job(session, NewJob(
            job_id=job_id, customer=CUSTOMER.address, spec={}, spec_hash="0x" + "05" * 32,
            amount=amount, deadline=now + 1e6, needs=TaskNeeds(),
            payloads=tuple({"frame": i} for i in range(len(task_providers)))), now=now,
            status=JobStatus.RUNNING)
        session.flush()
        for task, provider in zip(job_db.job_tasks(session, job_id=job_id), task_providers,
                                  strict=True):
            for status in (TaskStatus.RESERVED, TaskStatus.RUNNING):
                status_db.set_task_status(session, task=task, target=status, now=now, reason="test")
            task.node_id = f"node-{provider}"
    return job_id


def accept(factory: sessionmaker[Session], job_id: str, *, now: float) -> None:
    """Every running task of the job done, the job verified and its settlement queued."""
    with factory.begin() as session:
        job = job_db.lock_job(session, job_id=job_id)
        assert job is not None
        for task in job_db.job_tasks(session, job_id=job_id):
            status_db.set_task_status(session, task=task, target=TaskStatus.DONE, now=now,
                                 reason="test")
        status_db.set_job_status(session, job=job, target=JobStatus.VERIFYING, now=now,
                            reason="all tasks done")
        assert settlement.queue_settlement(session, job=job, now=now)


def job_status(factory: sessionmaker[Session], job_id: str) -> str:
    with factory() as session:
        job = job_db.get_job(session, job_id=job_id)
        assert job is not None
        return job.status


def settled_on_chain(mesh: MeshChain, job_id: str) -> bool:
    escrowed = mesh.escrowed_job(bytes.fromhex(job_id[2:]))
    return escrowed is not None and escrowed.status is EscrowStatus.SETTLED


def sample(metrics: MeshMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def grant(mesh: MeshChain, contract_name: str, role_getter: str, account: str) -> None:
    """Admin grants a role (the SDK exposes no role management: deployments fix roles)."""
    contract = getattr(mesh, contract_name)
    role = contract.functions[role_getter]().call()
    admin = mesh.account(dev_account(0))
    admin.sender.transact(contract.address, contract.encode_abi("grantRole", (role, account)))


# ---------------------------------------------------------------------- happy path


def test_accepted_job_settles_on_chain_exactly_once_with_the_demo_end_state(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        metrics: MeshMetrics, clock: VirtualClock) -> None:
    amount = 100 * TOKEN + 1  # not divisible by 3: the customer gets the rounding back
    job_id = accepted_job(factory, mesh, amount=amount, now=clock.now - 5,
                          task_providers=[PROVIDER, PROVIDER, OTHER_PROVIDER])
    customer_before = mesh.token_balance(CUSTOMER.address)
    sent_before = tx_count(mesh)

    assert drain(factory, sender, clock)
    (row,) = rows(factory)
    assert (row.status, row.nonce, row.attempts) == ("sent", sent_before, 1)
    assert row.raw_tx is not None and "0x" + keccak(HexBytes(row.raw_tx)).hex() == row.tx_hash
    assert job_status(factory, job_id) == JobStatus.SETTLING
    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)  # nothing left: no further transaction

    (row,) = rows(factory)
    # The bytes stay: if a reorg removes the transaction, the same one is sent again.
    assert (row.status, "0x" + keccak(HexBytes(row.raw_tx or "")).hex()) == (
        "confirmed", row.tx_hash)
    assert row.gas_used == mesh.w3.eth.get_transaction_receipt(HexBytes(row.tx_hash or ""))[
        "gasUsed"] > 21_000
    assert tx_count(mesh) == sent_before + 1
    assert job_status(factory, job_id) == JobStatus.SETTLED
    with factory() as session:
        history = status_db.status_history(session, entity="job", entity_id=job_id)
    assert [(h.from_status, h.to_status) for h in history[-2:]] == [
        ("completed", "settling"), ("settling", "settled")]
    assert history[-1].reason == f"settlement confirmed on chain ({row.tx_hash})"
    assert sample(metrics, "mesh_settlement_lag_seconds_count") == 1
    assert sample(metrics, "mesh_settlement_lag_seconds_sum") == pytest.approx(5.0)

    payout, other_payout = amount * 2 // 3, amount // 3
    increase_time(mesh.w3, mesh.settlement_dispute_window() + mesh.payout_period())
    assert mesh.escrow_balance(PROVIDER).claimable == payout
    assert mesh.escrow_balance(OTHER_PROVIDER).claimable == other_payout
    refund, _ = mesh.account(CUSTOMER).claim_refund(bytes.fromhex(job_id[2:]))
    assert refund == amount - payout - other_payout == 1
    assert mesh.token_balance(CUSTOMER.address) == customer_before + refund


def test_thirty_settles_go_out_in_one_settleBatch_transaction(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        clock: VirtualClock) -> None:
    jobs = [escrow(mesh, 10 * TOKEN) for _ in range(30)]
    for job_id in jobs:
        queue_settle(factory, job_id, {PROVIDER: 7 * TOKEN})
    sent_before = tx_count(mesh)

    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)

    outbox = rows(factory)
    assert {row.status for row in outbox} == {"confirmed"}
    assert len({row.tx_hash for row in outbox}) == 1
    assert tx_count(mesh) == sent_before + 1
    receipt = mesh.w3.eth.get_transaction_receipt(HexBytes(outbox[0].tx_hash or ""))
    assert {row.gas_used for row in outbox} == {receipt["gasUsed"]}  # the batch's, shared
    (event,) = mesh.job_escrow.events.JobsSettled().process_receipt(receipt)
    assert ["0x" + bytes(j).hex() for j in event["args"]["jobIds"]] == jobs
    increase_time(mesh.w3, mesh.settlement_dispute_window() + mesh.payout_period())
    assert mesh.escrow_balance(PROVIDER).claimable == 30 * 7 * TOKEN


def test_settle_runs_are_capped_at_the_batch_size_and_keep_queue_order_around_other_kinds(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    sender = OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics,
                          config=SenderConfig(settle_batch_size=2))
    jobs = [escrow(mesh, 10 * TOKEN) for _ in range(4)]
    for job_id in jobs[:3]:
        queue_settle(factory, job_id, {PROVIDER: TOKEN})
    queue(factory, "tier", "tier:1", {"provider": PROVIDER, "tier": 2})
    queue_settle(factory, jobs[3], {PROVIDER: TOKEN})

    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)

    outbox = rows(factory)
    assert {row.status for row in outbox} == {"confirmed"}
    first = tx_count(mesh) - 4
    assert [row.nonce for row in outbox] == [first, first, first + 1, first + 2, first + 3]
    assert mesh.provider_stake(PROVIDER).tier == 2


def test_a_row_backing_off_holds_back_only_those_behind_it_and_a_pass_reads_max_rows(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    sender = OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics,
                          config=SenderConfig(max_rows=2))
    tiers = [(PROVIDER, 1), (OTHER_PROVIDER, 1), (PROVIDER, 2), (OTHER_PROVIDER, 2)]
    for index, (provider, tier) in enumerate(tiers):
        queue(factory, "tier", f"tier:{index}", {"provider": provider, "tier": tier})
    with factory.begin() as session:  # the second backs off, as after an RPC error
        outbox_store.defer(session, action_ids=[rows(factory)[1].id],
                           expected=OutboxStatus.PENDING, now=clock.now,
                           retry_at=clock.now + 10, note="transient ConnectionError; attempt 1")

    assert drain(factory, sender, clock)  # the one ahead of it goes out
    assert [row.status for row in rows(factory)] == ["sent"] + ["pending"] * 3
    assert drain(factory, sender, clock)  # nothing overtakes the row backing off
    assert [row.status for row in rows(factory)] == ["confirmed"] + ["pending"] * 3
    clock.now += 10
    assert drain(factory, sender, clock)  # due again: two rows a pass
    assert [row.status for row in rows(factory)] == ["confirmed", "sent", "sent", "pending"]
    for _ in range(2):
        assert drain(factory, sender, clock)

    assert [row.status for row in rows(factory)] == ["confirmed"] * 4
    assert mesh.provider_stake(PROVIDER).tier == mesh.provider_stake(OTHER_PROVIDER).tier == 2


def test_the_metrics_page_documents_every_outbox_counter(
        mesh: MeshChain, metrics: MeshMetrics) -> None:
    OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics)
    page = generate_latest(metrics.registry).decode()
    for name in ("transactions", "confirmed", "replacements", "gap_fillers", "failed",
                 "transient_errors"):
        assert f"# HELP mesh_outbox_{name}_total " in page
        assert f"# TYPE mesh_outbox_{name}_total counter" in page


def test_row_is_confirmed_only_after_the_configured_blocks_on_top_of_its_receipt(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    sender = OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics,
                          config=SenderConfig(confirmations=2))
    job_id = accepted_job(factory, mesh, amount=3 * TOKEN, task_providers=[PROVIDER],
                          now=clock.now)
    assert drain(factory, sender, clock)
    mesh.w3.provider.make_request(RPCEndpoint("anvil_mine"), [1])
    assert drain(factory, sender, clock)
    assert rows(factory)[0].status == "sent" and job_status(factory, job_id) == "settling"

    mesh.w3.provider.make_request(RPCEndpoint("anvil_mine"), [1])
    assert drain(factory, sender, clock)
    assert rows(factory)[0].status == "confirmed" and job_status(factory, job_id) == "settled"


# ---------------------------------------------------------------------- crashes


@pytest.mark.parametrize("crash_point", ["before_broadcast", "after_broadcast"])
def test_crash_between_persisting_and_recording_the_receipt_still_settles_once(
        crash_point: str, factory: sessionmaker[Session], mesh: MeshChain,
        clock: VirtualClock) -> None:
    payment, payout = 100 * TOKEN, 80 * TOKEN
    job_id = escrow(mesh, payment)
    queue_settle(factory, job_id, {PROVIDER: payout})
    provider_before = mesh.token_balance(PROVIDER)
    customer_before = mesh.token_balance(CUSTOMER.address)
    sent_before = tx_count(mesh)

    def die(signed: SignedTx) -> None:
        raise Crash(signed.tx_hash)

    crashing = fresh_sender(mesh, hooks=FaultHooks(**{crash_point: die}))
    automine(mesh, False)  # a broadcast transaction waits in the pool, without a receipt
    try:
        with pytest.raises(Crash) as crash:
            drain(factory, crashing, clock, holder="dead-process")
        (row,) = rows(factory)
        persisted_hash = row.tx_hash
        assert str(crash.value) == persisted_hash  # it died around the persisted transaction
        assert row.status == "sent" and row.raw_tx is not None
        # Signing is deterministic: move the base fee, so that a sender signing the row
        # afresh would build other bytes (another fee cap, another hash) than the ones stored.
        base_fee = int(mesh.w3.eth.get_block("pending")["baseFeePerGas"])
        mesh.w3.provider.make_request(RPCEndpoint("anvil_setNextBlockBaseFeePerGas"),
                                      [hex(base_fee + 1)])

        clock.now += LEASE_TTL_S + 1  # the dead process's lease lapses
        restarted = fresh_sender(mesh)
        assert drain(factory, restarted, clock, holder="restarted")  # resends, signs nothing
    finally:
        automine(mesh, True)
    mesh.w3.provider.make_request(RPCEndpoint("anvil_mine"), [1])
    assert drain(factory, restarted, clock, holder="restarted")

    (row,) = rows(factory)
    assert (row.status, row.tx_hash) == ("confirmed", persisted_hash)
    assert tx_count(mesh) == sent_before + 1
    increase_time(mesh.w3, mesh.settlement_dispute_window() + mesh.payout_period())
    claimed, _ = mesh.account(dev_account(5)).claim()
    refund, _ = mesh.account(CUSTOMER).claim_refund(bytes.fromhex(job_id[2:]))
    assert (claimed, refund) == (payout, payment - payout)
    assert mesh.token_balance(PROVIDER) == provider_before + payout
    assert mesh.token_balance(CUSTOMER.address) == customer_before + payment - payout


# ---------------------------------------------------------------------- already done elsewhere


def test_job_settled_out_of_band_is_recognised_and_the_rest_of_the_batch_settles(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        metrics: MeshMetrics, clock: VirtualClock) -> None:
    queue(factory, "tier", "tier:1", {"provider": PROVIDER, "tier": 2})
    assert drain(factory, sender, clock)  # the sender now counts the key's nonces itself
    jobs = [accepted_job(factory, mesh, amount=9 * TOKEN, task_providers=[PROVIDER],
                         now=clock.now) for _ in range(3)]
    # Another process with the same key settles the middle job: our nonce count goes stale.
    elsewhere = MeshChain(connect(mesh.w3.provider.endpoint_uri),  # type: ignore[attr-defined]
                          mesh.deployment)
    elsewhere.account(ORCHESTRATOR).settle(bytes.fromhex(jobs[1][2:]), [PROVIDER], [9 * TOKEN],
                                           b"\x01" * 32)

    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)

    _, first, middle, last = rows(factory)
    assert (middle.status, middle.note, middle.tx_hash) == (
        "confirmed", "already settled on chain", None)
    assert first.status == last.status == "confirmed" and first.tx_hash == last.tx_hash
    assert [job_status(factory, job_id) for job_id in jobs] == [JobStatus.SETTLED] * 3
    with factory() as session:
        history = status_db.status_history(session, entity="job", entity_id=jobs[1])
    assert history[-1].reason == "settlement confirmed on chain (already settled on chain)"
    assert mesh.escrow_balance(PROVIDER).pending == 27 * TOKEN  # each job paid once
    assert sample(metrics, "mesh_outbox_confirmed_total", kind="settle") == 3
    assert sample(metrics, "mesh_outbox_confirmed_total", kind="tier") == 1


@pytest.mark.parametrize(("count", "elsewhere"), [(1, 0), (2, 1)], ids=["alone", "second"])
def test_batch_that_reverts_when_mined_confirms_the_job_settled_meanwhile_and_resends_the_rest(
        count: int, elsewhere: int, factory: sessionmaker[Session], mesh: MeshChain,
        clock: VirtualClock) -> None:
    jobs = [escrow(mesh, 5 * TOKEN) for _ in range(count)]
    for job_id in jobs:
        queue_settle(factory, job_id, {PROVIDER: TOKEN})

    def die(_: SignedTx) -> None:
        raise Crash("before broadcast")

    with pytest.raises(Crash):
        drain(factory, fresh_sender(mesh, hooks=FaultHooks(before_broadcast=die)), clock)
    # Between signing and broadcasting, a second settler (another key) settles one job.
    grant(mesh, "job_escrow", "ORCHESTRATOR_ROLE", dev_account(7).address)
    mesh.account(dev_account(7)).settle(bytes.fromhex(jobs[elsewhere][2:]), [PROVIDER], [TOKEN],
                                         b"\x02" * 32)
    (batch_hash,) = {row.tx_hash for row in rows(factory)}

    restarted = fresh_sender(mesh)
    assert drain(factory, restarted, clock)  # the persisted batch goes out, and reverts
    assert drain(factory, restarted, clock)  # its receipt: the error names the job settled

    receipt = mesh.w3.eth.get_transaction_receipt(HexBytes(batch_hash or ""))
    assert receipt["status"] == 0
    outbox = rows(factory)
    settled_elsewhere = outbox.pop(elsewhere)
    assert (settled_elsewhere.status, settled_elsewhere.note) == (
        "confirmed", "already settled on chain")
    for resent in outbox:  # never applied: signed again at once, without the job named
        assert (resent.status, resent.note) == (
            "sent", f"batch reverted on row {settled_elsewhere.id}; re-signed")
        assert resent.tx_hash != batch_hash
    assert drain(factory, restarted, clock)

    assert {row.status for row in rows(factory)} == {"confirmed"}
    assert all(settled_on_chain(mesh, job_id) for job_id in jobs)
    assert mesh.escrow_balance(PROVIDER).pending == count * TOKEN


def test_an_assignment_root_committed_meanwhile_confirms_every_row_of_the_reverted_batch(
        factory: sessionmaker[Session], mesh: MeshChain, clock: VirtualClock) -> None:
    assigns = [AssignCollateral(keccak(text=f"assigned job {i}"), PROVIDER, 1, 20 * TOKEN)
               for i in range(2)]
    for index, assign in enumerate(assigns):
        queue(factory, "assign", f"assign:{index}", {
            "job_id": "0x" + assign.job_id.hex(), "provider": PROVIDER, "placement": "1",
            "collateral": str(assign.collateral)})

    def die(_: SignedTx) -> None:
        raise Crash("before broadcast")

    with pytest.raises(Crash):
        drain(factory, fresh_sender(mesh, hooks=FaultHooks(before_broadcast=die)), clock)
    # Between signing and broadcasting, another orchestrator key commits the same root.
    grant(mesh, "job_escrow", "ORCHESTRATOR_ROLE", dev_account(7).address)
    mesh.account(dev_account(7)).commit_assignments(assignment_tree(assigns).root)
    (batch_hash,) = {row.tx_hash for row in rows(factory)}

    restarted = fresh_sender(mesh)
    for _ in range(2):  # the persisted root goes out and reverts; its receipt is judged
        assert drain(factory, restarted, clock)

    assert mesh.w3.eth.get_transaction_receipt(HexBytes(batch_hash or ""))["status"] == 0
    assert [(row.status, row.note, row.tx_hash) for row in rows(factory)] == [
        ("confirmed", "this assignment root was already committed", batch_hash)] * 2


def test_a_key_without_the_orchestrator_role_fails_its_actions_and_takes_none_as_done(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    stranger = dev_account(7)
    sender = OutboxSender(mesh, mesh.account(stranger), metrics)
    job_id = escrow(mesh, 5 * TOKEN)
    queue(factory, "assign", "assign:1", {"job_id": job_id, "provider": PROVIDER, "placement": "1",
                                          "collateral": str(20 * TOKEN)})
    queue_settle(factory, job_id, {PROVIDER: TOKEN})
    sent_before = int(mesh.w3.eth.get_transaction_count(stranger.address))

    assert drain(factory, sender, clock)

    denied = f"AccessControlUnauthorizedAccount(account='{stranger.address}'"
    assert [(row.status, (row.note or "").startswith(denied)) for row in rows(factory)] == [
        ("failed", True)] * 2
    for kind in ("assign", "settle"):
        assert sample(metrics, "mesh_outbox_failed_total", kind=kind,
                      error="AccessControlUnauthorizedAccount") == 1
    assert int(mesh.w3.eth.get_transaction_count(stranger.address)) == sent_before
    assert not settled_on_chain(mesh, job_id)


def test_an_in_flight_row_without_its_signed_bytes_holds_back_new_rows(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        clock: VirtualClock) -> None:
    # A sent row whose bytes are gone (a hand edit, a partial restore) cannot be sent again,
    # and its nonce is unaccounted for: the pass goes on, but nothing new is signed.
    first, second = escrow(mesh, 5 * TOKEN), escrow(mesh, 5 * TOKEN)
    queue_settle(factory, first, {PROVIDER: TOKEN})
    automine(mesh, False)
    try:
        assert drain(factory, sender, clock)
        mesh.w3.provider.make_request(RPCEndpoint("anvil_dropAllTransactions"), [])
    finally:
        automine(mesh, True)
    with factory.begin() as session:
        session.execute(update(OutboxAction).values(raw_tx=None))
    queue_settle(factory, second, {PROVIDER: TOKEN})

    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)

    assert [(row.status, row.raw_tx is None) for row in rows(factory)] == [
        ("sent", True), ("pending", True)]
    assert not settled_on_chain(mesh, first) and not settled_on_chain(mesh, second)


def test_epoch_committed_with_the_same_root_is_confirmed_and_another_root_fails(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        clock: VirtualClock) -> None:
    root, other_root = b"\x11" * 32, b"\x22" * 32
    mesh.account(ORCHESTRATOR).commit_epoch(7, root)
    queue(factory, "commit", "commit:7", {"epoch": 7, "root": "0x" + root.hex()})
    queue(factory, "commit", "commit:7-again", {"epoch": 7, "root": "0x" + other_root.hex()})
    queue(factory, "commit", "commit:8", {"epoch": 8, "root": "0x" + other_root.hex()})

    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)

    same, different, fresh = rows(factory)
    assert (same.status, same.note) == ("confirmed", "epoch 7 was already committed with this root")
    assert different.status == "failed"
    assert different.note == "StakeManagerEpochAlreadyCommitted(epoch=7)"
    assert fresh.status == "confirmed" and mesh.epoch_root(8) == other_root


def queue_collateral(factory: sessionmaker[Session], mesh: MeshChain, job_id: str,
                     others: int = 1) -> None:
    """A standing reservation of PROVIDER, then assigns of `job_id` and `others` more jobs."""
    until = int(mesh.w3.eth.get_block("latest")["timestamp"]) + 7 * 24 * 3600
    queue(factory, "reserve", "reserve:1", {"provider": PROVIDER, "amount": str(40 * TOKEN),
                                            "until": until})
    for index, job in enumerate([job_id] + ["0x" + f"{i:064x}" for i in range(1, others + 1)]):
        queue(factory, "assign", f"assign:{index}", {"job_id": job, "provider": PROVIDER,
                                                     "placement": "1",
                                                     "collateral": str(20 * TOKEN)})


def staked_job(mesh: MeshChain) -> str:
    """A job escrowed by the customer, and PROVIDER's stake of 50 tokens to back it."""
    job_id = escrow(mesh, 10 * TOKEN)
    mesh.account(dev_account(5)).stake(50 * TOKEN)
    return job_id


def queue_proof_and_slash(factory: sessionmaker[Session], job_id: str) -> None:
    """The proof of PROVIDER's assignment to the job, then a slash of 5 tokens of it."""
    queue(factory, "prove", "prove:1", {"job_id": job_id, "provider": PROVIDER,
                                        "placement": "1"})
    queue(factory, "slash", "slash:1", {"job_id": job_id, "provider": PROVIDER, "placement": "1",
                                        "amount": str(5 * TOKEN), "reason": 0,
                                        "evidence": "0x" + "ee" * 32})


def test_reserve_assign_prove_then_slash_with_the_slasher_key_then_settle_in_queue_order(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    sender = OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics,
                          slasher=mesh.account(dev_account(2)))
    job_id = staked_job(mesh)
    queue_collateral(factory, mesh, job_id, others=2)
    queue_proof_and_slash(factory, job_id)
    queue_settle(factory, job_id, {PROVIDER: 4 * TOKEN})

    assert drain(factory, sender, clock)
    # One reservation, one root for the three assigns; the proof waits for the root to land.
    assert [row.status for row in rows(factory)] == ["sent"] * 4 + ["pending"] * 3
    assert len({row.tx_hash for row in rows(factory)[1:4]}) == 1
    for _ in range(3):
        assert drain(factory, sender, clock)

    assert {row.status for row in rows(factory)} == {"confirmed"}
    assert sample(metrics, "mesh_outbox_confirmed_total", kind="assign") == 3
    stake = mesh.provider_stake(PROVIDER)
    assert (stake.bonded, stake.reserved) == (45 * TOKEN, 35 * TOKEN)  # 5 of the reservation
    proven, collateral, _at = mesh.job_escrow.functions.assignmentOf(
        bytes.fromhex(job_id[2:]), PROVIDER, 1).call()
    assert (proven, collateral) == (True, 20 * TOKEN)
    assert settled_on_chain(mesh, job_id)


def test_a_proof_finds_the_committed_root_when_a_later_assign_of_the_same_terms_sent_nothing(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    # Another task of the job on the same provider at the same collateral, assigned alone
    # after the first landed, builds the same root: it is confirmed as already committed,
    # with no transaction of its own. The job's proof and slash must still find the root.
    sender = OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics,
                          slasher=mesh.account(dev_account(2)))
    job_id = staked_job(mesh)
    queue_collateral(factory, mesh, job_id, others=0)
    for _ in range(2):
        assert drain(factory, sender, clock)
    queue(factory, "assign", "assign:again", {"job_id": job_id, "provider": PROVIDER,
                                              "placement": "1", "collateral": str(20 * TOKEN)})
    for _ in range(2):
        assert drain(factory, sender, clock)
    again = rows(factory)[-1]
    assert (again.status, again.note, again.tx_hash) == (
        "confirmed", "this assignment root was already committed", None)

    queue_proof_and_slash(factory, job_id)
    for _ in range(3):
        assert drain(factory, sender, clock)

    assert [row.status for row in rows(factory)] == ["confirmed"] * 5
    assert mesh.provider_stake(PROVIDER).bonded == 45 * TOKEN


def test_a_proof_without_a_committed_assign_fails_and_does_not_block_later_rows(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        metrics: MeshMetrics, clock: VirtualClock) -> None:
    job_id = escrow(mesh, 10 * TOKEN)
    queue(factory, "prove", "prove:1", {"job_id": job_id, "provider": PROVIDER,
                                        "placement": "1"})
    queue(factory, "tier", "tier:1", {"provider": PROVIDER, "tier": 2})

    for _ in range(3):
        assert drain(factory, sender, clock)

    assert [(row.status, row.note) for row in rows(factory)] == [
        ("failed", "no confirmed assign row for this placement"), ("confirmed", None)]
    assert sample(metrics, "mesh_outbox_failed_total", kind="prove",
                  error="NoCommittedAssignment") == 1


def test_every_kind_is_signed_with_the_configured_fees_at_a_nonce_of_its_own(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    # The operator's fee policy is what every transaction offers, whatever its kind; a proof
    # signed in the same pass as another action of the key takes the nonce after it.
    tip, cap = 3 * GWEI + 7, 90 * GWEI
    slasher = mesh.account(dev_account(2))
    sender = OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics, slasher=slasher,
                          config=SenderConfig(fees=FeePolicy(priority_fee_wei=tip,
                                                             max_fee_cap_wei=cap)))
    job_id = staked_job(mesh)
    queue_collateral(factory, mesh, job_id, others=0)
    for _ in range(2):
        assert drain(factory, sender, clock)
    queue(factory, "tier", "tier:1", {"provider": PROVIDER, "tier": 2})
    queue_proof_and_slash(factory, job_id)
    queue_settle(factory, job_id, {PROVIDER: 4 * TOKEN})

    assert drain(factory, sender, clock)
    tier, prove = rows(factory)[2:4]
    assert (tier.status, prove.status) == ("sent", "sent")
    assert prove.nonce == (tier.nonce or 0) + 1
    for _ in range(3):
        assert drain(factory, sender, clock)

    outbox = rows(factory)
    assert [row.kind for row in outbox] == ["reserve", "assign", "tier", "prove", "slash",
                                            "settle"]
    assert {row.status for row in outbox} == {"confirmed"}
    with factory() as session:
        signed = {version.tx_hash: version for version in session.scalars(
            select(OutboxTransaction))}
    assert len(signed) == len(outbox)  # one transaction each, none replaced
    assert {version.max_priority_fee_per_gas for version in signed.values()} == {tip}
    assert all(tip < version.max_fee_per_gas <= cap for version in signed.values())
    assert [signed[row.tx_hash or ""].sender for row in outbox] == [
        ORCHESTRATOR.address] * 4 + [slasher.address, ORCHESTRATOR.address]
    assert [sample(metrics, "mesh_outbox_transactions_total", kind=row.kind)
            for row in outbox] == [1] * 6
    assert mesh.provider_stake(PROVIDER).tier == 2 and settled_on_chain(mesh, job_id)


# ---------------------------------------------------------------------- failures


def test_reverting_actions_fail_with_their_decoded_error_and_do_not_block_later_rows(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        metrics: MeshMetrics, clock: VirtualClock) -> None:
    overpaid, fine = escrow(mesh, 5 * TOKEN), escrow(mesh, 5 * TOKEN)
    mesh.account(dev_account(5)).stake(50 * TOKEN)
    queue_settle(factory, overpaid, {PROVIDER: 6 * TOKEN})
    queue_settle(factory, fine, {PROVIDER: 5 * TOKEN})
    queue(factory, "slash", "slash:1", {"job_id": fine, "provider": PROVIDER, "placement": "1",
                                        "amount": "1", "reason": 0, "evidence": "0x" + "ee" * 32})
    queue(factory, "assign", "assign:1", {"job_id": overpaid, "provider": PROVIDER,
                                          "placement": "1", "collateral": str(20 * TOKEN)})
    queue(factory, "tier", "tier:1", {"provider": PROVIDER, "tier": "nope"})
    queue(factory, "tier", "tier:2", {"provider": PROVIDER, "tier": 2})

    for _ in range(3):
        assert drain(factory, sender, clock)

    statuses = [(row.kind, row.status) for row in rows(factory)]
    assert statuses == [("settle", "failed"), ("settle", "confirmed"), ("slash", "failed"),
                        ("assign", "confirmed"), ("tier", "failed"), ("tier", "confirmed")]
    notes = [row.note or "" for row in rows(factory)]
    assert notes[0].startswith("JobEscrowPayoutExceedsEscrow(job_id=" + overpaid)
    assert notes[2].startswith(f"AccessControlUnauthorizedAccount(account='{ORCHESTRATOR.address}'")
    assert notes[4] == "invalid payload: tier holds 'nope', not an unsigned integer"
    assert settled_on_chain(mesh, fine) and not settled_on_chain(mesh, overpaid)
    root = assignment_tree([AssignCollateral(bytes.fromhex(overpaid[2:]), PROVIDER, 1,
                                             20 * TOKEN)]).root
    assert mesh.job_escrow.functions.assignmentsCommittedAt(root).call() > 0
    assert mesh.provider_stake(PROVIDER).tier == 2
    assert sample(metrics, "mesh_outbox_failed_total", kind="settle",
                  error="JobEscrowPayoutExceedsEscrow") == 1
    assert sample(metrics, "mesh_outbox_failed_total", kind="slash",
                  error="AccessControlUnauthorizedAccount") == 1
    attempts_before = [row.attempts for row in rows(factory)]
    drain(factory, sender, clock)
    assert [row.attempts for row in rows(factory)] == attempts_before  # failed: never resent


def test_a_settle_run_goes_out_in_one_pass_without_the_rows_that_cannot_settle(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        metrics: MeshMetrics, clock: VirtualClock) -> None:
    # In the pass that reads them: a row the codec refuses, a job with no escrow and a job
    # that would overpay its escrow fail on their own, a second row of a job already in the
    # batch waits, and the job that can settle goes out, alone in its settleBatch.
    fine, overpaid = escrow(mesh, 5 * TOKEN), escrow(mesh, 5 * TOKEN)
    never_escrowed = "0x" + keccak(text="never escrowed").hex()
    queue(factory, "settle", "settle:garbled", {
        "job_id": fine, "providers": [PROVIDER], "payouts": ["lots"],
        "merkle_root": "0x" + "ab" * 32})
    queue_settle(factory, never_escrowed, {PROVIDER: TOKEN})
    queue_settle(factory, fine, {PROVIDER: 2 * TOKEN})
    queue_settle(factory, overpaid, {PROVIDER: 6 * TOKEN})
    queue(factory, "settle", "settle:again", {
        "job_id": fine, "providers": [PROVIDER], "payouts": [str(3 * TOKEN)],
        "merkle_root": "0x" + "ab" * 32})
    pending_before, sent_before = mesh.escrow_balance(PROVIDER).pending, tx_count(mesh)

    assert drain(factory, sender, clock)
    garbled, unfunded, paid, over, again = rows(factory)
    assert (garbled.status, garbled.note) == (
        "failed", "invalid payload: payouts holds 'lots', not an unsigned integer")
    assert (unfunded.status, unfunded.note) == ("failed", "escrow job is NONE")
    assert (paid.status, paid.nonce) == ("sent", sent_before)
    assert over.status == "failed"
    assert (over.note or "").startswith("JobEscrowPayoutExceedsEscrow(job_id=" + overpaid)
    assert (again.status, again.tx_hash) == ("pending", None)
    for error in ("InvalidPayload", "EscrowNotFunded", "JobEscrowPayoutExceedsEscrow"):
        assert sample(metrics, "mesh_outbox_failed_total", kind="settle", error=error) == 1
    assert sample(metrics, "mesh_outbox_transactions_total", kind="settle") == 1

    assert drain(factory, sender, clock)  # the batch confirmed; the second row finds it done
    garbled, unfunded, paid, over, again = rows(factory)
    assert paid.status == "confirmed"
    assert (again.status, again.note, again.tx_hash) == (
        "confirmed", "already settled on chain", None)
    assert [row.status for row in (garbled, unfunded, over)] == ["failed"] * 3
    assert tx_count(mesh) == sent_before + 1
    assert mesh.escrow_balance(PROVIDER).pending == pending_before + 2 * TOKEN
    assert settled_on_chain(mesh, fine) and not settled_on_chain(mesh, overpaid)


def test_a_lone_settle_that_reverts_fails_with_its_decoded_error_and_counts_once(
        factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
        metrics: MeshMetrics, clock: VirtualClock) -> None:
    overpaid = escrow(mesh, 5 * TOKEN)
    queue_settle(factory, overpaid, {PROVIDER: 6 * TOKEN})
    sent_before = tx_count(mesh)

    assert drain(factory, sender, clock)

    (row,) = rows(factory)
    assert (row.status, row.tx_hash, row.raw_tx) == ("failed", None, None)
    assert (row.note or "").startswith("JobEscrowPayoutExceedsEscrow(job_id=" + overpaid)
    assert tx_count(mesh) == sent_before  # caught at estimation: no gas spent
    assert sample(metrics, "mesh_outbox_failed_total", kind="settle",
                  error="JobEscrowPayoutExceedsEscrow") == 1
    assert not settled_on_chain(mesh, overpaid)


def test_rpc_outage_keeps_the_row_pending_with_backoff_then_it_lands(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    job_id = escrow(mesh, 5 * TOKEN)
    queue_settle(factory, job_id, {PROVIDER: TOKEN})
    own = MeshChain(connect(mesh.w3.provider.endpoint_uri),  # type: ignore[attr-defined]
                    mesh.deployment)
    sender = OutboxSender(own, own.account(ORCHESTRATOR), metrics)
    node = own.w3.provider
    own.w3.provider = HTTPProvider(f"http://127.0.0.1:{free_port()}",  # nobody listens
                                   exception_retry_configuration=None)

    assert drain(factory, sender, clock)
    (row,) = rows(factory)
    assert (row.status, row.attempts, row.next_attempt_at) == ("pending", 1, clock.now + 1)
    assert row.note is not None and row.note.startswith("transient ")
    assert sample(metrics, "mesh_outbox_transient_errors_total") == 1

    own.w3.provider = node
    assert drain(factory, sender, clock)
    assert rows(factory)[0].status == "pending"  # still backing off
    clock.now += 1
    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)
    (row,) = rows(factory)
    assert (row.status, row.attempts) == ("confirmed", 2)
    assert settled_on_chain(mesh, job_id)


def test_nothing_new_is_signed_while_an_in_flight_row_backs_off(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    first, second = escrow(mesh, 5 * TOKEN), escrow(mesh, 5 * TOKEN)
    queue_settle(factory, first, {PROVIDER: TOKEN})
    own = MeshChain(connect(mesh.w3.provider.endpoint_uri),  # type: ignore[attr-defined]
                    mesh.deployment)
    sender = OutboxSender(own, own.account(ORCHESTRATOR), metrics)
    assert drain(factory, sender, clock)  # signed and broadcast: in flight
    node = own.w3.provider
    own.w3.provider = HTTPProvider(f"http://127.0.0.1:{free_port()}",  # nobody listens
                                   exception_retry_configuration=None)
    assert drain(factory, sender, clock)  # its receipt cannot be read: it backs off
    own.w3.provider = node
    assert rows(factory)[0].next_attempt_at == clock.now + 2  # its second attempt: 2 x 1 s
    queue_settle(factory, second, {PROVIDER: TOKEN})

    assert drain(factory, sender, clock)  # still backing off: its nonce is unaccounted for
    assert [(row.status, row.tx_hash) for row in rows(factory)][1] == ("pending", None)

    clock.now += 2
    for _ in range(6):  # resolve the first, sign the second, confirm it (spare passes)
        assert drain(factory, sender, clock)
        if [row.status for row in rows(factory)] == ["confirmed", "confirmed"]:
            break
    assert [row.status for row in rows(factory)] == ["confirmed", "confirmed"]
    assert settled_on_chain(mesh, first) and settled_on_chain(mesh, second)


# ---------------------------------------------------------------------- one sender only


def test_two_orchestrator_processes_never_both_send(
        factory: sessionmaker[Session], mesh: MeshChain, clock: VirtualClock) -> None:
    jobs = [escrow(mesh, 5 * TOKEN) for _ in range(12)]
    sent_before = tx_count(mesh)
    broadcasts: dict[str, list[str]] = {"a": [], "b": []}

    def recorder(name: str) -> Callable[[SignedTx], None]:
        return lambda signed: broadcasts[name].append(signed.tx_hash)

    senders = {name: fresh_sender(mesh, hooks=FaultHooks(after_broadcast=recorder(name)))
               for name in broadcasts}
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def process(name: str) -> None:
        try:
            start.wait()
            for index, job_id in enumerate(jobs):
                if index % 2 == (name == "b"):
                    queue_settle(factory, job_id, {PROVIDER: TOKEN})
                drain(factory, senders[name], clock, holder=name)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=process, args=(name,)) for name in broadcasts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    leader = next(name for name in broadcasts if broadcasts[name])
    for _ in range(3):
        drain(factory, senders[leader], clock, holder=leader)

    assert [name for name in broadcasts if broadcasts[name]] == [leader]
    outbox = rows(factory)
    assert {row.status for row in outbox} == {"confirmed"} and len(outbox) == 12
    assert tx_count(mesh) == sent_before + len({row.tx_hash for row in outbox})
    assert mesh.escrow_balance(PROVIDER).pending == 12 * TOKEN


# ---------------------------------------------------------------------- the service


def test_service_periodic_job_drains_the_outbox_with_the_configured_key(
        factory: sessionmaker[Session], mesh: MeshChain, db_url: str, tmp_path: Path,
        clock: VirtualClock) -> None:
    mesh.deployment.save(tmp_path)
    settings = Settings(database_url=db_url, data_dir=tmp_path, json_logs=False,
                        rpc_url=mesh.w3.provider.endpoint_uri,  # type: ignore[attr-defined]
                        orchestrator_key=SecretStr(ORCHESTRATOR.key.hex()))
    job_id = escrow(mesh, 5 * TOKEN)
    queue_settle(factory, job_id, {PROVIDER: TOKEN})
    service_work: Callable[[Session, float], object] = build_sender(settings, MeshMetrics())
    runner = LeaderRunner(factory, holder="service", clock=clock)

    for _ in range(2):
        assert runner.run_if_leader(LEASE_NAME, ttl_s=3.0, work=service_work)
        automined(mesh.w3)

    assert rows(factory)[0].status == "confirmed" and settled_on_chain(mesh, job_id)


def test_service_sender_takes_its_confirmations_and_slasher_from_the_settings(
        factory: sessionmaker[Session], mesh: MeshChain, db_url: str, tmp_path: Path,
        clock: VirtualClock) -> None:
    mesh.deployment.save(tmp_path)
    settings = Settings(database_url=db_url, data_dir=tmp_path, json_logs=False,
                        rpc_url=mesh.w3.provider.endpoint_uri,  # type: ignore[attr-defined]
                        orchestrator_key=SecretStr(ORCHESTRATOR.key.hex()),
                        slasher_key=SecretStr(dev_account(2).key.hex()),
                        outbox_confirmations=1)
    job_id = staked_job(mesh)
    queue_collateral(factory, mesh, job_id)
    queue_proof_and_slash(factory, job_id)
    service_work: Callable[[Session, float], object] = build_sender(settings, MeshMetrics())
    runner = LeaderRunner(factory, holder="service", clock=clock)

    for _ in range(2):  # the root is signed and mined, but no block is on top of it yet
        assert runner.run_if_leader(LEASE_NAME, ttl_s=3.0, work=service_work)
        automined(mesh.w3)
    assert [row.status for row in rows(factory)][2:] == ["sent", "pending", "pending"]
    for _ in range(8):
        mesh.w3.provider.make_request(RPCEndpoint("anvil_mine"), [1])
        assert runner.run_if_leader(LEASE_NAME, ttl_s=3.0, work=service_work)
        automined(mesh.w3)

    assert {row.status for row in rows(factory)} == {"confirmed"}  # the slash: slasher key
    assert mesh.provider_stake(PROVIDER).bonded == 45 * TOKEN


def test_service_sender_takes_its_fees_batch_size_and_replacement_deadline_from_the_settings(
        factory: sessionmaker[Session], mesh: MeshChain, db_url: str, tmp_path: Path,
        clock: VirtualClock) -> None:
    mesh.deployment.save(tmp_path)
    settings = Settings(database_url=db_url, data_dir=tmp_path, json_logs=False,
                        rpc_url=mesh.w3.provider.endpoint_uri,  # type: ignore[attr-defined]
                        orchestrator_key=SecretStr(ORCHESTRATOR.key.hex()),
                        outbox_priority_fee_gwei=2.5, outbox_max_fee_gwei=80,
                        outbox_settle_batch=2, outbox_replace_after_s=5)
    jobs = [escrow(mesh, 5 * TOKEN) for _ in range(3)]
    for job_id in jobs:
        queue_settle(factory, job_id, {PROVIDER: TOKEN})
    service_work: Callable[[Session, float], object] = build_sender(settings, MeshMetrics())
    runner = LeaderRunner(factory, holder="service", clock=clock)
    first_nonce = tx_count(mesh)

    automine(mesh, False)
    try:
        assert runner.run_if_leader(LEASE_NAME, ttl_s=3.0, work=service_work)
        assert [row.nonce for row in rows(factory)] == [first_nonce] * 2 + [first_nonce + 1]
        clock.now += 5  # both transactions unmined 5 s after signing: each is replaced
        assert runner.run_if_leader(LEASE_NAME, ttl_s=3.0, work=service_work)
        mesh.w3.provider.make_request(RPCEndpoint("evm_mine"), [])
    finally:
        automine(mesh, True)
    assert runner.run_if_leader(LEASE_NAME, ttl_s=3.0, work=service_work)

    assert {row.status for row in rows(factory)} == {"confirmed"}
    assert all(settled_on_chain(mesh, job_id) for job_id in jobs)
    with factory() as session:
        versions = list(session.scalars(select(OutboxTransaction)
                                        .order_by(OutboxTransaction.signed_at,
                                                  OutboxTransaction.nonce)))
    tips = [version.max_priority_fee_per_gas for version in versions]
    assert tips[:2] == [int(2.5 * GWEI)] * 2 and all(tip > 2.5 * GWEI for tip in tips[2:])
    assert len(tips) == 4 and all(version.max_fee_per_gas <= 80 * GWEI for version in versions)
