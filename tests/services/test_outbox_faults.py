"""The outbox sender under chain faults, against anvil with automine off where blocks must be
held back: a stuck transaction and its fee-bumped replacement, an earlier version mined after
all, a transaction the pool dropped (`anvil_dropTransaction`), the key's nonce used by
someone else (and a gap left below ours), an RPC node that is down or slow (a real proxy on
loopback), and a transaction a reorg removed (`anvil_reorg`). Every case ends with the job
paid exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hexbytes import HexBytes
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from web3.exceptions import TransactionNotFound
from web3.types import RPCEndpoint

from mesh.bench.reorg import CountingDispatch
from mesh.cutproxy import CutProxy
from orchestrator.chain import tx
from orchestrator.chain.anvil import Anvil, dev_account, reorg
from orchestrator.chain.indexer import ChainIndexReader
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import connect
from orchestrator.db import pls as pls_store
from orchestrator.db.models import OutboxTransaction
from orchestrator.domain.fees import FeePolicy, Fees
from orchestrator.services.chain_events import ChainIndexer
from orchestrator.services.outbox.config import GWEI, SenderConfig
from orchestrator.services.outbox.reorgs import UnindexedCheck, resend_after_reorg, resend_reorged
from orchestrator.services.outbox.sender import OutboxSender
from orchestrator.telemetry.metrics import MeshMetrics
from tests.clients import VirtualClock
from tests.services.test_outbox import (
    ORCHESTRATOR,
    PROVIDER,
    TOKEN,
    accepted_job,
    automine,
    drain,
    escrow,
    grant,
    job_status,
    queue,
    queue_settle,
    rows,
    sample,
    settled_on_chain,
    tx_count,
)

pytestmark = pytest.mark.anvil

REPLACE_AFTER_S = 30.0
CONFIG = SenderConfig(replace_after_s=REPLACE_AFTER_S)


def rpc(mesh: MeshChain, method: str, *params: Any) -> Any:
    return mesh.w3.provider.make_request(RPCEndpoint(method), list(params))


def own_sender(mesh: MeshChain, metrics: MeshMetrics, url: str | None = None,
               timeout_s: float = 30.0, config: SenderConfig = CONFIG) -> OutboxSender:
    """A sender as its own process builds it: its own connection (to `url`) and nonces."""
    endpoint = url or mesh.w3.provider.endpoint_uri  # type: ignore[attr-defined]
    own = MeshChain(connect(endpoint, timeout_s=timeout_s), mesh.deployment)
    own.w3.provider.exception_retry_configuration = None  # type: ignore[attr-defined]
    return OutboxSender(own, own.account(ORCHESTRATOR), metrics, config=config)


def in_pool(mesh: MeshChain, tx_hash: str) -> bool:
    try:
        return mesh.w3.eth.get_transaction(HexBytes(tx_hash))["blockNumber"] is None
    except TransactionNotFound:
        return False


def mined(mesh: MeshChain, tx_hash: str) -> bool:
    try:
        return int(mesh.w3.eth.get_transaction_receipt(HexBytes(tx_hash))["status"]) == 1
    except TransactionNotFound:
        return False


def versions(factory: sessionmaker[Session]) -> list[OutboxTransaction]:
    with factory() as session:
        return list(session.scalars(select(OutboxTransaction)
                                    .order_by(OutboxTransaction.signed_at)))


def fees_of(version: OutboxTransaction) -> Fees:
    return Fees(version.max_fee_per_gas, version.max_priority_fee_per_gas)


@pytest.fixture
def held(mesh: MeshChain) -> Iterator[MeshChain]:
    """Automine off: a broadcast transaction waits in the pool until `evm_mine`."""
    automine(mesh, False)
    try:
        yield mesh
    finally:
        rpc(mesh, "anvil_dropAllTransactions")
        automine(mesh, True)


def settle_one(factory: sessionmaker[Session], mesh: MeshChain) -> str:
    """A funded job (escrowed while blocks are still mined) with its settlement queued."""
    job_id = escrow(mesh, 10 * TOKEN)
    queue_settle(factory, job_id, {PROVIDER: 6 * TOKEN})
    return job_id


def assert_paid_once(factory: sessionmaker[Session], mesh: MeshChain, job_id: str,
                     pending_before: int) -> None:
    (row,) = rows(factory)
    assert row.status == "confirmed" and mined(mesh, row.tx_hash or "")
    assert settled_on_chain(mesh, job_id)
    assert mesh.escrow_balance(PROVIDER).pending == pending_before + 6 * TOKEN


# ---------------------------------------------------------------------- stuck and replaced


def test_a_transaction_unmined_past_the_deadline_is_replaced_and_the_replacement_mined(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    job_id = settle_one(factory, mesh)
    pending_before, sent_before = mesh.escrow_balance(PROVIDER).pending, tx_count(mesh)
    sender = own_sender(mesh, metrics)
    automine(mesh, False)
    try:
        assert drain(factory, sender, clock)
        (first,) = versions(factory)
        assert in_pool(mesh, first.tx_hash)
        clock.now += REPLACE_AFTER_S - 1
        assert drain(factory, sender, clock)
        assert len(versions(factory)) == 1  # not yet due: the same bytes again

        clock.now += 1
        assert drain(factory, sender, clock)
        first, second = versions(factory)
        assert (second.nonce, second.sender) == (first.nonce, first.sender)
        assert second.max_fee_per_gas * 8 >= first.max_fee_per_gas * 9
        assert second.max_priority_fee_per_gas * 8 >= first.max_priority_fee_per_gas * 9
        assert rows(factory)[0].tx_hash == second.tx_hash
        assert in_pool(mesh, second.tx_hash) and not in_pool(mesh, first.tx_hash)

        clock.now += REPLACE_AFTER_S  # stuck again: the replacement is replaced in turn
        assert drain(factory, sender, clock)
        _, _, third = versions(factory)
        assert third.nonce == first.nonce
        assert third.max_fee_per_gas * 8 >= second.max_fee_per_gas * 9
        assert third.max_priority_fee_per_gas * 8 >= second.max_priority_fee_per_gas * 9
        assert in_pool(mesh, third.tx_hash) and not in_pool(mesh, second.tx_hash)
        rpc(mesh, "evm_mine")
    finally:
        automine(mesh, True)
    assert drain(factory, sender, clock)

    assert mined(mesh, third.tx_hash) and not mined(mesh, second.tx_hash)
    assert rows(factory)[0].tx_hash == third.tx_hash
    assert tx_count(mesh) == sent_before + 1
    assert_paid_once(factory, mesh, job_id, pending_before)
    assert sample(metrics, "mesh_outbox_replacements_total", kind="settle") == 2


def test_a_transaction_evicted_by_a_base_fee_spike_is_replaced_at_once_above_the_new_fee(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    job_id, behind = settle_one(factory, mesh), escrow(mesh, 10 * TOKEN)
    pending_before = mesh.escrow_balance(PROVIDER).pending
    sender = own_sender(mesh, metrics)
    automine(mesh, False)
    try:
        assert drain(factory, sender, clock)
        (first,) = versions(factory)
        spike = 4 * first.max_fee_per_gas
        rpc(mesh, "anvil_setNextBlockBaseFeePerGas", hex(spike))
        rpc(mesh, "evm_mine")  # it cannot pay the base fee: anvil drops it from the pool
        assert not in_pool(mesh, first.tx_hash) and not mined(mesh, first.tx_hash)
        queue_settle(factory, behind, {PROVIDER: TOKEN})
        # Restarted now, it resyncs its nonce from a chain that no longer counts the evicted
        # transaction: the in-flight row's nonce stays taken.
        sender = own_sender(mesh, MeshMetrics())

        assert drain(factory, sender, clock)  # no waiting: the node refuses the old fees
        first, second, signed_behind = versions(factory)
        base_fee = int(mesh.w3.eth.get_block("pending")["baseFeePerGas"])
        assert second.max_fee_per_gas >= 2 * base_fee + second.max_priority_fee_per_gas
        assert second.max_priority_fee_per_gas * 8 >= first.max_priority_fee_per_gas * 9
        # The replaced nonce is accounted for: the row behind it went out in the same pass.
        assert [row.tx_hash for row in rows(factory)] == [second.tx_hash, signed_behind.tx_hash]
        assert signed_behind.nonce == first.nonce + 1
        rpc(mesh, "evm_mine")
    finally:
        automine(mesh, True)
    assert drain(factory, sender, clock)

    assert rows(factory)[0].tx_hash == second.tx_hash
    assert [row.status for row in rows(factory)] == ["confirmed"] * 2
    assert settled_on_chain(mesh, job_id) and settled_on_chain(mesh, behind)
    assert mesh.escrow_balance(PROVIDER).pending == pending_before + 7 * TOKEN


def test_an_earlier_version_mined_after_its_replacement_was_sent_is_the_one_recorded(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    job_id = settle_one(factory, mesh)
    pending_before, sent_before = mesh.escrow_balance(PROVIDER).pending, tx_count(mesh)
    sender = own_sender(mesh, metrics)
    automine(mesh, False)
    try:
        assert drain(factory, sender, clock)
        first_raw = rows(factory)[0].raw_tx or ""
        clock.now += REPLACE_AFTER_S
        assert drain(factory, sender, clock)
        first, second = versions(factory)
        # The replacement is lost and a node elsewhere still mines the first version.
        rpc(mesh, "anvil_dropTransaction", second.tx_hash)
        mesh.w3.eth.send_raw_transaction(HexBytes(first_raw))
        rpc(mesh, "evm_mine")
    finally:
        automine(mesh, True)
    assert drain(factory, sender, clock)

    assert mined(mesh, first.tx_hash) and not mined(mesh, second.tx_hash)
    assert rows(factory)[0].tx_hash == first.tx_hash
    assert tx_count(mesh) == sent_before + 1
    assert_paid_once(factory, mesh, job_id, pending_before)


def test_a_transaction_the_pool_dropped_is_broadcast_again(
        factory: sessionmaker[Session], held: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    mesh = held
    automine(mesh, True)
    job_id = settle_one(factory, mesh)
    automine(mesh, False)
    pending_before = mesh.escrow_balance(PROVIDER).pending
    sender = own_sender(mesh, metrics)
    assert drain(factory, sender, clock)
    (row,) = rows(factory)
    rpc(mesh, "anvil_dropAllTransactions")
    assert not in_pool(mesh, row.tx_hash or "")

    assert drain(factory, sender, clock)
    assert in_pool(mesh, row.tx_hash or "") and len(versions(factory)) == 1  # same bytes
    rpc(mesh, "evm_mine")
    assert drain(factory, sender, clock)

    assert rows(factory)[0].tx_hash == row.tx_hash
    assert_paid_once(factory, mesh, job_id, pending_before)


def test_a_transaction_mined_after_its_deadline_is_confirmed_and_never_replaced(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    job_id = settle_one(factory, mesh)
    pending_before = mesh.escrow_balance(PROVIDER).pending
    sender = own_sender(mesh, metrics)
    automine(mesh, False)
    try:
        assert drain(factory, sender, clock)
        clock.now += REPLACE_AFTER_S  # due for a replacement, but mined first
        rpc(mesh, "evm_mine")
    finally:
        automine(mesh, True)

    assert drain(factory, sender, clock)

    assert len(versions(factory)) == 1
    assert sample(metrics, "mesh_outbox_replacements_total", kind="settle") == 0
    assert_paid_once(factory, mesh, job_id, pending_before)


def test_a_transaction_the_pool_dropped_past_its_deadline_is_replaced_with_higher_fees(
        factory: sessionmaker[Session], held: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    mesh = held
    automine(mesh, True)
    job_id = settle_one(factory, mesh)
    automine(mesh, False)
    pending_before = mesh.escrow_balance(PROVIDER).pending
    sender = own_sender(mesh, metrics)
    assert drain(factory, sender, clock)
    rpc(mesh, "anvil_dropAllTransactions")  # no nonce below ours is missing: no gap either
    clock.now += REPLACE_AFTER_S

    assert drain(factory, sender, clock)
    first, second = versions(factory)
    assert second.nonce == first.nonce and in_pool(mesh, second.tx_hash)
    assert second.max_priority_fee_per_gas * 8 >= first.max_priority_fee_per_gas * 9
    assert sample(metrics, "mesh_outbox_gap_fillers_total") == 0
    rpc(mesh, "evm_mine")
    assert drain(factory, sender, clock)

    assert rows(factory)[0].tx_hash == second.tx_hash
    assert_paid_once(factory, mesh, job_id, pending_before)


def test_two_stuck_transactions_are_each_replaced_and_neither_is_taken_for_a_gap(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    job_id = settle_one(factory, mesh)
    queue(factory, "tier", "tier:1", {"provider": PROVIDER, "tier": 2})
    pending_before, sent_before = mesh.escrow_balance(PROVIDER).pending, tx_count(mesh)
    sender = own_sender(mesh, metrics)
    automine(mesh, False)
    try:
        assert drain(factory, sender, clock)
        assert [row.nonce for row in rows(factory)] == [sent_before, sent_before + 1]
        clock.now += REPLACE_AFTER_S
        assert drain(factory, sender, clock)
        assert len(versions(factory)) == 4
        assert all(in_pool(mesh, row.tx_hash or "") for row in rows(factory))
        rpc(mesh, "evm_mine")
    finally:
        automine(mesh, True)
    assert drain(factory, sender, clock)

    assert sample(metrics, "mesh_outbox_gap_fillers_total") == 0
    for kind in ("settle", "tier"):
        assert sample(metrics, "mesh_outbox_replacements_total", kind=kind) == 1
    assert tx_count(mesh) == sent_before + 2
    assert [row.status for row in rows(factory)] == ["confirmed"] * 2
    assert mesh.provider_stake(PROVIDER).tier == 2
    assert settled_on_chain(mesh, job_id)
    assert mesh.escrow_balance(PROVIDER).pending == pending_before + 6 * TOKEN


def test_a_stuck_transaction_at_the_fee_cap_is_sent_again_as_it_is(
        factory: sessionmaker[Session], held: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    mesh = held
    automine(mesh, True)
    job_id = settle_one(factory, mesh)
    automine(mesh, False)
    pending_before = mesh.escrow_balance(PROVIDER).pending
    base_fee = int(mesh.w3.eth.get_block("pending")["baseFeePerGas"])
    capped = FeePolicy(priority_fee_wei=GWEI, max_fee_cap_wei=base_fee + GWEI + 1)
    sender = own_sender(mesh, metrics, config=SenderConfig(replace_after_s=REPLACE_AFTER_S,
                                                           fees=capped))
    assert drain(factory, sender, clock)
    (row,) = rows(factory)
    assert versions(factory)[0].max_fee_per_gas == capped.max_fee_cap_wei
    rpc(mesh, "anvil_dropAllTransactions")
    clock.now += REPLACE_AFTER_S  # due, but no bump fits under the cap

    assert drain(factory, sender, clock)
    assert len(versions(factory)) == 1 and in_pool(mesh, row.tx_hash or "")
    rpc(mesh, "evm_mine")
    assert drain(factory, sender, clock)

    assert rows(factory)[0].tx_hash == row.tx_hash
    assert_paid_once(factory, mesh, job_id, pending_before)


def test_a_revert_behind_a_transaction_just_replaced_is_no_verdict_until_it_lands(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    job_id, overpaid = settle_one(factory, mesh), escrow(mesh, 5 * TOKEN)
    pending_before = mesh.escrow_balance(PROVIDER).pending
    sender = own_sender(mesh, metrics)
    automine(mesh, False)
    try:
        assert drain(factory, sender, clock)
        queue_settle(factory, overpaid, {PROVIDER: 6 * TOKEN})
        clock.now += REPLACE_AFTER_S
        assert drain(factory, sender, clock)  # replaced: still unmined ahead of the next row
        assert len(versions(factory)) == 2
        behind = rows(factory)[1]
        assert (behind.status, behind.note) == ("pending", None)
        rpc(mesh, "evm_mine")
    finally:
        automine(mesh, True)

    assert drain(factory, sender, clock)  # landed: now the revert is a verdict
    settled, behind = rows(factory)
    assert settled.status == "confirmed" and behind.status == "failed"
    assert (behind.note or "").startswith("JobEscrowPayoutExceedsEscrow(job_id=" + overpaid)
    assert settled_on_chain(mesh, job_id)
    assert mesh.escrow_balance(PROVIDER).pending == pending_before + 6 * TOKEN


def test_a_settlement_of_one_job_waiting_in_the_pool_fails_only_that_job_of_the_batch(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    """Another settler's settlement of the second job waits in the node's pool while the
    sender builds its batch, whose estimate (on the pending block) reverts on that job: that
    job alone is judged, and the first goes out in the same pass and is paid. (Simulated
    alone on the latest block, neither job reverted, so both were failed with the second
    one's error, and the first was never paid.)"""
    jobs = [escrow(mesh, 5 * TOKEN) for _ in range(2)]
    for job_id in jobs:
        queue_settle(factory, job_id, {PROVIDER: TOKEN})
    grant(mesh, "job_escrow", "ORCHESTRATOR_ROLE", dev_account(7).address)
    settler = mesh.account(dev_account(7)).sender
    contract = mesh.job_escrow
    elsewhere = settler.sign(contract.address, contract.encode_abi(
        "settle", (bytes.fromhex(jobs[1][2:]), [PROVIDER], [TOKEN], b"\x02" * 32)))
    pending_before = mesh.escrow_balance(PROVIDER).pending
    sender = own_sender(mesh, metrics)
    automine(mesh, False)
    try:
        mesh.w3.eth.send_raw_transaction(elsewhere.raw)
        assert drain(factory, sender, clock)
        ours, theirs = rows(factory)
        assert ours.status == "sent"
        assert (theirs.status, theirs.note) == (
            "failed", f"JobEscrowAlreadySettled(job_id={jobs[1]})")
        rpc(mesh, "evm_mine")
    finally:
        automine(mesh, True)
    assert drain(factory, sender, clock)

    assert rows(factory)[0].status == "confirmed"
    assert all(settled_on_chain(mesh, job_id) for job_id in jobs)
    assert mesh.escrow_balance(PROVIDER).pending == pending_before + 2 * TOKEN


def test_a_settlement_that_ran_out_of_gas_is_signed_again_and_paid_once(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = settle_one(factory, mesh)
    pending_before = mesh.escrow_balance(PROVIDER).pending
    sender = own_sender(mesh, metrics)
    with monkeypatch.context() as short:  # an estimate that came out short: 90 % of the need
        short.setattr(tx, "GAS_LIMIT_MARGIN", 0.9)
        short.setattr(tx, "GAS_LIMIT_HEADROOM", 0)
        assert drain(factory, sender, clock)
    (row,) = rows(factory)
    exhausted = row.tx_hash or ""
    assert mesh.w3.eth.get_transaction_receipt(HexBytes(exhausted))["status"] == 0

    assert drain(factory, sender, clock)  # no verdict on the job: its row is signed again
    (row,) = rows(factory)
    assert row.status == "sent" and row.tx_hash != exhausted
    assert (row.note or "").startswith(f"transaction {exhausted} ran out of gas")
    assert (row.note or "").endswith("; signed again with a fresh estimate")
    assert drain(factory, sender, clock)

    assert_paid_once(factory, mesh, job_id, pending_before)


# ---------------------------------------------------------------------- nonces


def test_a_nonce_spent_by_another_sender_of_the_key_is_resynced_and_the_row_re_signed(
        factory: sessionmaker[Session], held: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    mesh = held
    automine(mesh, True)
    job_id = settle_one(factory, mesh)
    automine(mesh, False)
    pending_before = mesh.escrow_balance(PROVIDER).pending
    sender = own_sender(mesh, metrics)
    assert drain(factory, sender, clock)
    (row,) = rows(factory)
    nonce = row.nonce or 0
    # Another process with the orchestrator key takes the same nonce, paying more, and wins.
    intruder = own_sender(mesh, MeshMetrics()).tx.account.sender
    rich = Fees(max_fee_per_gas=10**12, max_priority_fee_per_gas=10**11)
    mesh.w3.eth.send_raw_transaction(intruder.filler(nonce, rich).raw)
    rpc(mesh, "evm_mine")
    assert not mined(mesh, row.tx_hash or "")

    assert drain(factory, sender, clock)  # nonce too low, no receipt: re-signed at nonce + 1
    (row,) = rows(factory)
    assert (row.status, row.nonce) == ("sent", nonce + 1)
    assert row.note == f"nonce {nonce} was spent by another transaction; re-signed"
    rpc(mesh, "evm_mine")
    assert drain(factory, sender, clock)

    assert_paid_once(factory, mesh, job_id, pending_before)


def test_a_gap_below_our_nonce_is_filled_with_an_empty_transfer(
        factory: sessionmaker[Session], held: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    mesh = held
    automine(mesh, True)
    job_id = settle_one(factory, mesh)
    intruder = own_sender(mesh, MeshMetrics()).tx.account.sender
    earlier = intruder.filler(tx_count(mesh), Fees(10**11, 10**9))  # the key's history
    mesh.w3.eth.wait_for_transaction_receipt(mesh.w3.eth.send_raw_transaction(earlier.raw))
    automine(mesh, False)
    pending_before, sent_before = mesh.escrow_balance(PROVIDER).pending, tx_count(mesh)
    # Another process with the key has transactions waiting at the next two nonces...
    foreign = [intruder.filler(sent_before + i, Fees(10**11, 10**9)) for i in range(2)]
    for signed in foreign:
        mesh.w3.eth.send_raw_transaction(signed.raw)
    sender = own_sender(mesh, metrics)
    assert drain(factory, sender, clock)
    assert rows(factory)[0].nonce == sent_before + 2  # ...so ours goes above them
    # ...and the pool loses them: ours now waits above two nonces nobody holds.
    for signed in foreign:
        rpc(mesh, "anvil_dropTransaction", signed.tx_hash)
    rpc(mesh, "evm_mine")
    assert tx_count(mesh) == sent_before

    clock.now += REPLACE_AFTER_S
    assert drain(factory, sender, clock)
    assert sample(metrics, "mesh_outbox_gap_fillers_total") == 2
    rpc(mesh, "evm_mine")
    assert drain(factory, sender, clock)

    assert tx_count(mesh) == sent_before + 3  # the two fillers and our settlement
    assert len(versions(factory)) == 1  # filled, not bumped
    assert_paid_once(factory, mesh, job_id, pending_before)


@pytest.mark.parametrize("restarted", [False, True], ids=["same-process", "restarted"])
def test_a_row_signed_after_a_reorg_the_index_has_not_seen_yet_leaves_the_reorged_one_its_nonce(
        restarted: bool, factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    """A reorg took a confirmed settlement off the chain and no index pass has noticed yet:
    the chain's pending count no longer holds its nonce. The next row must not take it, even
    from a sender restarted meanwhile (which resyncs from that count): when the reorged row is
    reopened its own bytes land again, and no row is confirmed on another row's receipt (once
    a restarted sender reused the nonce, the reorged row was confirmed by the later row's
    transaction at that nonce, and its job was never paid)."""
    first, second = settle_one(factory, mesh), escrow(mesh, 10 * TOKEN)
    pending_before = mesh.escrow_balance(PROVIDER).pending
    sender = own_sender(mesh, metrics)
    assert drain(factory, sender, clock) and drain(factory, sender, clock)
    (reorged,) = rows(factory)
    reorg(mesh.w3, int(mesh.w3.eth.block_number) - mined_block(mesh, reorged.tx_hash) + 1)
    queue_settle(factory, second, {PROVIDER: 6 * TOKEN})
    if restarted:
        sender = own_sender(mesh, MeshMetrics())

    assert drain(factory, sender, clock)
    assert rows(factory)[1].nonce == (reorged.nonce or 0) + 1
    with factory.begin() as session:
        assert resend_reorged(session, tx_hashes=[reorged.tx_hash or ""],
                              now=clock.now) == [reorged.id]
    for _ in range(3):
        assert drain(factory, sender, clock)

    again, later = rows(factory)
    assert again.status == later.status == "confirmed"
    assert (again.tx_hash, again.nonce) == (reorged.tx_hash, reorged.nonce)  # the same bytes
    assert later.tx_hash != again.tx_hash
    assert settled_on_chain(mesh, first) and settled_on_chain(mesh, second)
    assert mesh.escrow_balance(PROVIDER).pending == pending_before + 12 * TOKEN


# ---------------------------------------------------------------------- the RPC node


@pytest.fixture
def proxy(anvil: Anvil) -> Iterator[CutProxy]:
    node = CutProxy(int(anvil.rpc_url.rsplit(":", 1)[1])).restore()
    yield node
    node.tap, node.delay_s = None, 0.0
    node.cut()


def test_rpc_down_then_slow_backs_off_and_the_job_is_paid_once_when_it_recovers(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        proxy: CutProxy, clock: VirtualClock) -> None:
    job_id = settle_one(factory, mesh)
    pending_before, sent_before = mesh.escrow_balance(PROVIDER).pending, tx_count(mesh)
    sender = own_sender(mesh, metrics, url=proxy.url, timeout_s=1.0)

    proxy.cut()
    assert drain(factory, sender, clock)
    (row,) = rows(factory)
    assert (row.status, row.attempts, row.next_attempt_at) == ("pending", 1, clock.now + 1)
    assert (row.note or "").startswith("transient ConnectionError")

    proxy.restore()
    proxy.delay_s = 2.0  # every answer comes after the client's 1 s timeout
    clock.now += 1
    assert drain(factory, sender, clock)
    (row,) = rows(factory)
    assert (row.status, row.attempts, row.next_attempt_at) == ("pending", 2, clock.now + 2)
    assert (row.note or "").startswith("transient ReadTimeout")

    proxy.delay_s = 0.0
    clock.now += 2
    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)
    assert tx_count(mesh) == sent_before + 1
    assert sample(metrics, "mesh_outbox_transient_errors_total") == 2
    assert_paid_once(factory, mesh, job_id, pending_before)


def test_a_broadcast_that_times_out_but_reaches_the_node_is_not_sent_twice(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        proxy: CutProxy, clock: VirtualClock) -> None:
    job_id = settle_one(factory, mesh)
    pending_before, sent_before = mesh.escrow_balance(PROVIDER).pending, tx_count(mesh)
    sender = own_sender(mesh, metrics, url=proxy.url, timeout_s=1.0)
    proxy.delay_s, proxy.delay_only = 2.0, b"eth_sendRawTransaction"

    assert drain(factory, sender, clock)  # the broadcast times out; the node gets it later
    (row,) = rows(factory)
    assert row.status == "sent"
    deadline = time.monotonic() + 60  # generous: the proxy holds it 2 s, on a busy machine
    while not mined(mesh, row.tx_hash or "") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mined(mesh, row.tx_hash or ""), "the delayed broadcast never reached the node"
    proxy.delay_s = 0.0
    assert drain(factory, sender, clock)

    assert tx_count(mesh) == sent_before + 1
    assert rows(factory)[0].tx_hash == row.tx_hash
    assert_paid_once(factory, mesh, job_id, pending_before)


def test_while_a_receipt_cannot_be_read_nothing_new_is_signed_and_other_receipts_are_read(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        proxy: CutProxy, clock: VirtualClock) -> None:
    job_id = settle_one(factory, mesh)
    queue(factory, "tier", "tier:1", {"provider": PROVIDER, "tier": 2})
    sender = own_sender(mesh, metrics, url=proxy.url)
    assert drain(factory, sender, clock)  # both sent (and mined)
    settle, tier = rows(factory)
    queue(factory, "tier", "tier:2", {"provider": PROVIDER, "tier": 1})
    unreadable = (settle.tx_hash or "").encode()
    proxy.tap = lambda request, _: unreadable not in request  # its receipt requests fail

    assert drain(factory, sender, clock)  # the pass stops at the first transaction
    assert [(row.status, row.attempts) for row in rows(factory)] == [
        ("sent", 2), ("sent", 1), ("pending", 0)]
    assert (rows(factory)[0].note or "").startswith("transient ")
    assert drain(factory, sender, clock)  # it backs off: the others are resolved, none signed
    assert [row.status for row in rows(factory)] == ["sent", "confirmed", "pending"]

    proxy.tap = None
    clock.now += 2
    for _ in range(2):
        assert drain(factory, sender, clock)
    assert [row.status for row in rows(factory)] == ["confirmed"] * 3
    assert settled_on_chain(mesh, job_id) and mesh.provider_stake(PROVIDER).tier == 1
    assert tier.nonce == (settle.nonce or 0) + 1


def test_a_pass_reads_the_keys_pending_nonce_once_however_many_transactions_it_signs(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        proxy: CutProxy, clock: VirtualClock) -> None:
    settle_one(factory, mesh)
    queue(factory, "tier", "tier:1", {"provider": PROVIDER, "tier": 2})
    queue(factory, "commit", "commit:3", {"epoch": 3, "root": "0x" + "44" * 32})
    sender = own_sender(mesh, metrics, url=proxy.url)
    reads: set[bytes] = set()

    def tap(request: bytes, response: bytes | None) -> bool:
        if response is not None and b'"eth_getTransactionCount"' in request:
            reads.add(request)
        return True

    proxy.tap = tap
    assert drain(factory, sender, clock)

    nonces = [row.nonce or 0 for row in rows(factory)]
    assert [row.status for row in rows(factory)] == ["sent"] * 3
    assert nonces == list(range(nonces[0], nonces[0] + 3))
    assert len(reads) == 1  # the rest come from the database


# ---------------------------------------------------------------------- reorged out


def test_a_confirmed_settlement_a_reorg_removed_is_sent_again_with_the_same_bytes(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    job_id = settle_one(factory, mesh)
    pending_before, sent_before = mesh.escrow_balance(PROVIDER).pending, tx_count(mesh)
    sender = own_sender(mesh, metrics)
    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)
    (row,) = rows(factory)
    assert row.status == "confirmed"
    receipt = mesh.w3.eth.get_transaction_receipt(HexBytes(row.tx_hash or ""))
    mined_at = int(receipt["blockNumber"])
    # A real reorg: the block holding it and those above it replaced by empty ones.
    reorg(mesh.w3, int(mesh.w3.eth.block_number) - mined_at + 1)
    assert not settled_on_chain(mesh, job_id)

    with factory.begin() as session:
        assert resend_reorged(session, tx_hashes=[(row.tx_hash or "").upper()],
                              now=clock.now) == [row.id]
        assert resend_reorged(session, tx_hashes=[row.tx_hash or ""], now=clock.now) == []
    assert rows(factory)[0].status == "sent"
    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)

    assert rows(factory)[0].tx_hash == row.tx_hash  # the very same transaction
    assert tx_count(mesh) == sent_before + 1
    assert_paid_once(factory, mesh, job_id, pending_before)


def test_a_reorged_settle_batch_whose_nonce_the_new_chain_spent_is_re_signed_whole(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    jobs = [escrow(mesh, 10 * TOKEN) for _ in range(3)]
    for job_id in jobs:
        queue_settle(factory, job_id, {PROVIDER: TOKEN})
    pending_before = mesh.escrow_balance(PROVIDER).pending
    sender = own_sender(mesh, metrics, config=SenderConfig(replace_after_s=REPLACE_AFTER_S,
                                                           settle_batch_size=3))
    assert drain(factory, sender, clock)
    assert drain(factory, sender, clock)
    batch = rows(factory)
    assert {row.status for row in batch} == {"confirmed"} and len({r.tx_hash for r in batch}) == 1
    tx_hash, nonce = batch[0].tx_hash or "", batch[0].nonce or 0
    mined_at = int(mesh.w3.eth.get_transaction_receipt(HexBytes(tx_hash))["blockNumber"])
    # The chain that wins holds another transaction of the key at the batch's nonce.
    intruder = own_sender(mesh, MeshMetrics()).tx.account.sender
    foreign = intruder.filler(nonce, Fees(max_fee_per_gas=10**12, max_priority_fee_per_gas=10**11))
    reorg(mesh.w3, int(mesh.w3.eth.block_number) - mined_at + 1, [(foreign.raw, 0)])
    assert not any(settled_on_chain(mesh, job_id) for job_id in jobs)

    with factory.begin() as session:
        assert resend_reorged(session, tx_hashes=[tx_hash],
                              now=clock.now) == [row.id for row in batch]
    for _ in range(3):
        assert drain(factory, sender, clock)

    again = rows(factory)
    assert {row.status for row in again} == {"confirmed"}
    assert len({row.tx_hash for row in again}) == 1 and again[0].tx_hash != tx_hash
    assert all(settled_on_chain(mesh, job_id) for job_id in jobs)
    assert mesh.escrow_balance(PROVIDER).pending == pending_before + 3 * TOKEN


def confirmed_settlement(factory: sessionmaker[Session], mesh: MeshChain, sender: OutboxSender,
                         clock: VirtualClock) -> str:
    """An accepted job whose settlement the sender confirmed on its receipt; its 0x id."""
    job_id = accepted_job(factory, mesh, amount=10 * TOKEN, task_providers=[PROVIDER],
                          now=clock.now)
    assert drain(factory, sender, clock) and drain(factory, sender, clock)
    assert job_status(factory, job_id) == "settled"
    return job_id


def mined_block(mesh: MeshChain, tx_hash: str | None) -> int:
    return int(mesh.w3.eth.get_transaction_receipt(HexBytes(tx_hash or ""))["blockNumber"])


def test_a_reorged_settlement_and_epoch_commitment_go_back_in_flight_with_their_job_and_epoch(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    sender = own_sender(mesh, metrics)
    root = b"\x33" * 32
    with factory.begin() as session:
        pls_store.add_epoch(session, epoch=9, root=root, closed_at=clock.now, leaves=[])
    queue(factory, "commit", "commit:9", {"epoch": 9, "root": "0x" + root.hex()})
    job_id = confirmed_settlement(factory, mesh, sender, clock)
    commit, settle = rows(factory)
    with factory.begin() as session:  # the index found the commitment final
        epoch = pls_store.get_epoch(session, epoch=9)
        assert epoch is not None
        pls_store.set_epoch_committed(epoch, tx_hash=commit.tx_hash,
                                      block=mined_block(mesh, commit.tx_hash))
    reorg(mesh.w3, int(mesh.w3.eth.block_number) - mined_block(mesh, commit.tx_hash) + 1)
    assert mesh.epoch_root(9) is None and not settled_on_chain(mesh, job_id)

    with factory.begin() as session:
        assert resend_reorged(session, tx_hashes=[settle.tx_hash or "", commit.tx_hash or ""],
                              now=clock.now) == [commit.id, settle.id]
    assert [(row.status, row.note) for row in rows(factory)] == [
        ("sent", "its transaction was reorged out; sent again")] * 2
    assert job_status(factory, job_id) == "settling"
    with factory() as session:
        epoch = pls_store.get_epoch(session, epoch=9)
        assert epoch is not None and (epoch.committed_tx, epoch.committed_block) == (None, None)

    assert drain(factory, sender, clock) and drain(factory, sender, clock)
    assert [(row.status, row.tx_hash) for row in rows(factory)] == [
        ("confirmed", commit.tx_hash), ("confirmed", settle.tx_hash)]
    assert mesh.epoch_root(9) == root and settled_on_chain(mesh, job_id)
    assert job_status(factory, job_id) == "settling"  # its final event settles it now


def test_confirmed_transactions_the_index_never_saw_are_checked_for_15_minutes(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    """No index pass read either settlement's block: the check asks the chain about both; the
    one a reorg took is sent again, the final one is not asked about again."""
    sender = own_sender(mesh, metrics)
    kept_job = confirmed_settlement(factory, mesh, sender, clock)
    lost_job = confirmed_settlement(factory, mesh, sender, clock)
    kept, lost = rows(factory)
    kept_block = mined_block(mesh, kept.tx_hash)
    reorg(mesh.w3, int(mesh.w3.eth.block_number) - mined_block(mesh, lost.tx_hash) + 1)
    reader = ChainIndexReader(mesh, finality_tag="none")
    asked: list[list[str]] = []

    def mined_at(tx_hashes: Sequence[str]) -> dict[str, int]:
        asked.append(sorted(tx_hashes))
        return reader.mined_at(tx_hashes)

    def check(unindexed: UnindexedCheck, now: float, final_block: int) -> list[int]:
        with factory.begin() as session:
            return unindexed.run(session, now=now, final_block=final_block, mined_at=mined_at)

    unindexed = UnindexedCheck()
    assert check(unindexed, clock.now, kept_block) == [lost.id]
    assert asked == [sorted([kept.tx_hash or "", lost.tx_hash or ""])]
    assert [(row.status, row.note) for row in rows(factory)] == [
        ("confirmed", None), ("sent", "its transaction was reorged out; sent again")]
    assert (job_status(factory, kept_job), job_status(factory, lost_job)) == (
        "settled", "settling")

    # Mined at the final height: not asked about again, up to the end of the window.
    assert check(unindexed, clock.now + 900, kept_block) == []
    assert len(asked) == 1
    # A check that never found it final (a restarted service) asks for 15 minutes.
    restarted = UnindexedCheck()
    assert check(restarted, clock.now + 900, kept_block - 1) == []
    assert asked[1:] == [[kept.tx_hash]]
    assert check(restarted, clock.now + 900.5, kept_block - 1) == []
    assert len(asked) == 2


def test_a_reorg_the_index_found_sends_the_settlements_confirmed_in_the_last_day_again(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics,
        clock: VirtualClock) -> None:
    sender = own_sender(mesh, metrics)
    job_id = confirmed_settlement(factory, mesh, sender, clock)
    (row,) = rows(factory)
    indexer = ChainIndexer(lambda: ChainIndexReader(mesh, finality_tag="none"),
                           CountingDispatch(), margin=6)
    with factory.begin() as session:
        indexer.run(session, clock.now)  # the settlement indexed, provisional
    reorg(mesh.w3, int(mesh.w3.eth.block_number) - mined_block(mesh, row.tx_hash) + 1)
    with factory.begin() as session:
        assert indexer.run(session, clock.now).reorg_depth > 0

    with factory.begin() as session:  # confirmed more than a day ago: not looked at
        assert resend_after_reorg(session, now=clock.now + 86_400.5) == []
    assert rows(factory)[0].status == "confirmed"
    with factory.begin() as session:
        assert resend_after_reorg(session, now=clock.now + 86_400) == [row.id]
    assert [(r.status, r.note) for r in rows(factory)] == [
        ("sent", "its transaction was reorged out; sent again")]
    assert job_status(factory, job_id) == "settling"

    assert drain(factory, sender, clock) and drain(factory, sender, clock)
    assert [(r.status, r.tx_hash) for r in rows(factory)] == [("confirmed", row.tx_hash)]
    assert settled_on_chain(mesh, job_id)
