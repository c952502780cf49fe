"""The event indexer under injected reorgs (`mesh bench reorg --json`).

A seeded run on a fresh anvil: rounds of settlements (escrow, collateral lock, `settle` or
`settleBatch`) and epoch commitments, each indexed, then taken off the chain by an
`anvil_reorg` of depth 1 to 5 (some transactions moved into the new blocks, the rest dropped),
an `anvil_rollback` followed by new blocks, or an `evm_snapshot`/`evm_revert`; every few rounds
a reorg deeper than the safety margin replaces events already final and applied. After each,
the transactions the index reports as reorged out (and any other without a receipt) are
broadcast again with the same signed bytes, as the outbox does.

At the end the index and what its handlers were handed are compared with a ground truth read
in one go from the final canonical chain: `events_lost` (on chain, not indexed or not
applied), `events_duplicated` (indexed or applied more than once, or not on chain), and
`double_payments` (a job whose settlement was applied twice, or settled twice on chain).
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.chain.anvil import Anvil, dev_account, mine, reorg, revert_to, rollback, snapshot
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.indexer import ChainIndexReader
from orchestrator.chain.sdk import MeshAccount, MeshChain, Settlement, settle_batch_call
from orchestrator.chain.tx import connect
from orchestrator.db.chain_events import events as indexed_events
from orchestrator.db.session import make_engine, make_session_factory, upgrade_to_head
from orchestrator.domain.chain_events import ChainEvent
from orchestrator.services.chain_events import (
    ChainIndexer,
    EventDispatch,
    PassReport,
    reorged_out,
)

TARGETS = {"reorgs": 20, "events_lost": 0, "events_duplicated": 0, "double_payments": 0}
STAKE = 10_000 * 10**18
PAYMENT = 10 * 10**18
COLLATERAL = 10**18
SETTLEMENTS = ("JobSettled", "JobsSettled")


def content_key(event: ChainEvent) -> tuple[Any, ...]:
    """An event as it is wherever its transaction lands (block and log index aside)."""
    return (event.tx_hash, event.contract, event.name, tuple(sorted(event.args.items())))


@dataclass
class Sent:
    raw: bytes
    tx_hash: str
    by_orchestrator: bool


class ReorgWorld:
    """A fresh deployment with a customer, a staked provider and the orchestrator, whose
    transactions are signed first and kept, so that any of them can be broadcast again."""

    def __init__(self, anvil: Anvil) -> None:
        self.rpc_url = anvil.rpc_url
        w3 = connect(anvil.rpc_url)
        deployment = deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                                  slasher=dev_account(2).address, arbiter=dev_account(3).address)
        self.chain = MeshChain(w3, deployment)
        self.w3 = w3
        admin = self.chain.account(dev_account(0))
        self.orchestrator = self.chain.account(dev_account(1))
        self.customer = self.chain.account(dev_account(4))
        self.provider = self.chain.account(dev_account(5))
        admin.mint(self.customer.address, 10**12 * 10**18)
        admin.mint(self.provider.address, STAKE)
        self.customer.approve(self.chain.job_escrow.address, 10**12 * 10**18)
        self.provider.stake(STAKE)
        self.sent: list[Sent] = []
        self._jobs = 0
        self._epochs = 0

    def send(self, account: MeshAccount, contract: Any, function: str, *args: Any) -> Sent:
        signed = account.sender.sign(contract.address, contract.encode_abi(function, args))
        account.sender.broadcast(signed.raw)
        receipt = self.w3.eth.wait_for_transaction_receipt(
            signed.tx_hash, timeout=30)  # type: ignore[arg-type]
        if receipt["status"] != 1:
            raise RuntimeError(f"{function} reverted in {signed.tx_hash}")
        sent = Sent(raw=signed.raw, tx_hash=signed.tx_hash,
                    by_orchestrator=account is self.orchestrator)
        self.sent.append(sent)
        return sent

    def new_job_id(self) -> bytes:
        self._jobs += 1
        return self._jobs.to_bytes(32, "big")

    def settle_jobs(self, count: int) -> list[bytes]:
        """Escrow `count` jobs, lock the provider's collateral for each, settle them in one
        `settle` (one job) or one batch."""
        job_ids = []
        deadline = int(self.w3.eth.get_block("latest")["timestamp"]) + 86_400
        for _ in range(count):
            job_id = self.new_job_id()
            self.send(self.customer, self.chain.job_escrow, "createJob", job_id, PAYMENT,
                      deadline, bytes(31) + b"\x01")
            self.send(self.orchestrator, self.chain.job_escrow, "lockCollateral", job_id,
                      [self.provider.address], [COLLATERAL])
            job_ids.append(job_id)
        settlements = [Settlement(job_id=job_id, providers=(self.provider.address,),
                                  payouts=(PAYMENT // 2,), result_root=b"\x02" * 32)
                       for job_id in job_ids]
        if count == 1:
            self.send(self.orchestrator, self.chain.job_escrow, "settle", job_ids[0],
                      [self.provider.address], [PAYMENT // 2], b"\x02" * 32)
        else:
            function, args = settle_batch_call(settlements)
            self.send(self.orchestrator, self.chain.job_escrow, function, args)
        return job_ids

    def commit_epoch(self) -> None:
        self._epochs += 1
        self.send(self.orchestrator, self.chain.stake_manager, "commitEpoch", self._epochs,
                  self._epochs.to_bytes(32, "big"))

    def missing(self) -> list[Sent]:
        """Sent transactions with no receipt on the canonical chain now, in send order."""
        gone = []
        for sent in self.sent:
            try:
                self.w3.eth.get_transaction_receipt(sent.tx_hash)  # type: ignore[arg-type]
            except Exception:
                gone.append(sent)
        return gone

    def resend(self, sents: Sequence[Sent]) -> None:
        """Broadcast the same signed bytes again, in their original order (same nonces)."""
        for sent in sents:
            self.chain.w3.eth.send_raw_transaction(sent.raw)
            self.w3.eth.wait_for_transaction_receipt(sent.tx_hash, timeout=30)  # type: ignore[arg-type]


class CountingDispatch(EventDispatch):
    """Every final event is handed to one handler that counts it by content."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: Counter[tuple[Any, ...]] = Counter()
        self.settled: Counter[bytes] = Counter()

    def handlers(self, event: ChainEvent) -> Sequence[Any]:
        return (self._count,)

    def _count(self, session: Session, event: ChainEvent, now: float) -> None:
        self.applied[content_key(event)] += 1
        if event.name in SETTLEMENTS:
            for job_id in _jobs_of(event):
                self.settled[job_id] += 1


def _jobs_of(settlement: ChainEvent) -> tuple[bytes, ...]:
    args = settlement.args
    return tuple(args["jobIds"]) if "jobIds" in args else (args["jobId"],)


def canonical_events(reader: ChainIndexReader, head: int) -> list[ChainEvent]:
    """The ground truth: every mesh event on the canonical chain now, read from scratch."""
    found: list[ChainEvent] = []
    block = reader.start_block
    while block <= head:
        chunk = reader.read_logs(block, head, reader.max_chunk)
        found += chunk.events
        block = chunk.last_block + 1
    return found


def _index(indexer: ChainIndexer, factory: sessionmaker[Session]) -> PassReport:
    with factory.begin() as session:
        return indexer.run(session, time.time())


def _catch_up(indexer: ChainIndexer, factory: sessionmaker[Session]) -> None:
    for _ in range(100):
        report = _index(indexer, factory)
        if report.next_block > report.head:
            return
    raise RuntimeError("the indexer did not reach the head in 100 passes")


def run(*, seed: int = 17, rounds: int = 25, margin: int = 6,
        deep_every: int = 8) -> dict[str, Any]:
    # The indexer logs every reorg it handles; here they are the point, counted below.
    logging.getLogger("orchestrator.chain_index").setLevel(logging.CRITICAL)
    rng = random.Random(seed)
    started = time.perf_counter()
    with Anvil() as anvil, tempfile.TemporaryDirectory() as tmp:
        world = ReorgWorld(anvil)
        engine = make_engine(f"sqlite:///{Path(tmp) / 'reorg.db'}")
        upgrade_to_head(engine)
        factory = make_session_factory(engine)
        reader = ChainIndexReader(world.chain, finality_tag="none", max_chunk=64)
        dispatch = CountingDispatch()
        indexer = ChainIndexer(lambda: reader, dispatch, margin=margin, first_chunk=8)
        mine(world.w3, margin + 1)
        _catch_up(indexer, factory)
        stats: Counter[str] = Counter()
        depths: list[int] = []
        for round_ in range(1, rounds + 1):
            deep = round_ % deep_every == 0
            mark = snapshot(world.w3)
            for _ in range(rng.randint(1, 3)):
                if rng.random() < 0.6:
                    stats["settled_jobs"] += len(world.settle_jobs(rng.randint(1, 3)))
                else:
                    world.commit_epoch()
                    stats["commitments"] += 1
            if deep:
                mine(world.w3, margin)  # this round's events pass the margin and are applied
            _catch_up(indexer, factory)
            kind = "reorg" if deep else rng.choice(("reorg", "reorg", "rollback", "revert"))
            head = int(world.w3.eth.block_number)
            if kind == "revert":
                revert_to(world.w3, mark)
                depth = head - int(world.w3.eth.block_number)
            else:
                depth = margin + rng.randint(2, 4) if deep else 1 + round_ % 5
                if kind == "rollback":
                    rollback(world.w3, depth)
                    mine(world.w3, rng.randint(0, depth + 1))
                else:
                    gone = [s for s in world.sent[-depth:]
                            if int(world.w3.eth.get_transaction_receipt(
                                s.tx_hash)["blockNumber"]) > head - depth]  # type: ignore[arg-type]
                    moved = gone[:rng.randint(0, len(gone))]  # a prefix: nonces stay in order
                    reorg(world.w3, depth, [(s.raw, i) for i, s in enumerate(moved)])
            world.chain.resync_nonces()
            depths.append(depth)
            stats[kind] += 1
            stats["deep_reorgs"] += deep
            report = _index(indexer, factory)
            stats["final_events_dropped"] += report.dropped_final
            stats["provisional_events_dropped"] += report.dropped - report.dropped_final
            missing = world.missing()
            ours = [s.tx_hash for s in world.sent if s.by_orchestrator]
            with factory() as session:
                detected = reorged_out(session, ours)
            expected = {s.tx_hash for s in missing if s.by_orchestrator}
            stats["orchestrator_txs_dropped"] += len(expected)
            stats["dropped_detected"] += len(detected & expected)
            stats["detected_but_on_chain"] += len(detected - expected)
            world.resend(missing)
            stats["resent"] += len(missing)
            _catch_up(indexer, factory)
        mine(world.w3, margin + 1)
        _catch_up(indexer, factory)
        head = int(world.w3.eth.block_number)
        truth = Counter(content_key(event) for event in canonical_events(reader, head))
        with factory() as session:
            stored = indexed_events(session, cursor=indexer.cursor, final_only=True)
        indexed = Counter(content_key(s.event) for s in stored)
        settled_on_chain = Counter(job_id for event in canonical_events(reader, head)
                                   if event.name in SETTLEMENTS for job_id in _jobs_of(event))
        engine.dispose()
    lost = sum((truth - indexed).values()) + sum((truth - dispatch.applied).values())
    duplicated = sum((indexed - truth).values()) + sum((dispatch.applied - truth).values())
    double_paid = {job for job, n in dispatch.settled.items() if n > 1} | {
        job for job, n in settled_on_chain.items() if n > 1}
    reorgs = stats["reorg"] + stats["rollback"] + stats["revert"]
    return {
        "seed": seed,
        "margin": margin,
        "reorgs": reorgs,
        "reorg_kinds": {"anvil_reorg": stats["reorg"], "anvil_rollback": stats["rollback"],
                        "evm_revert": stats["revert"]},
        "deep_reorgs": stats["deep_reorgs"],
        "max_depth": max(depths, default=0),
        "depths": dict(sorted(Counter(depths).items())),
        "events_on_chain": sum(truth.values()),
        "events_lost": lost,
        "events_duplicated": duplicated,
        "double_payments": len(double_paid),
        "settled_jobs": stats["settled_jobs"],
        "commitments": stats["commitments"],
        "provisional_events_dropped": stats["provisional_events_dropped"],
        "final_events_dropped": stats["final_events_dropped"],
        "orchestrator_txs_dropped": stats["orchestrator_txs_dropped"],
        "dropped_detected": stats["dropped_detected"],
        "detected_but_on_chain": stats["detected_but_on_chain"],
        "resent": stats["resent"],
        "targets": TARGETS,
        "wall_s": round(time.perf_counter() - started, 2),
    }
