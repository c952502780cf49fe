"""SIGKILL of a real `mesh orchestrator serve` process at each step of the settlement path,
then a restart: every job is paid exactly once, nothing is lost, and balances are conserved.

No crash hook inside the service: its JSON-RPC traffic goes through a proxy on loopback
(`mesh.cutproxy`) that watches each exchange and kills the process at the exact step,
before passing the bytes on (so the process never learns the answer):

- before_send: the signed batch is committed, its eth_sendRawTransaction has not reached the node;
- after_send: the node took the transaction, the process never heard back (no DB update);
- after_receipt: the process asked for the receipt of a mined settlement and dies before its
  transaction commits `confirmed`;
- mid_batch: three settleBatch transactions go out in one pass; it dies at the second;
- while_signing: it dies estimating the second batch, before anything was committed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy.orm import Session, sessionmaker

from mesh.cutproxy import CutProxy
from mesh.processes import OrchestratorProcess, ServiceError
from orchestrator.chain.anvil import Anvil, dev_account, increase_time
from orchestrator.chain.sdk import MeshChain
from tests.clients import VirtualClock
from tests.services.test_outbox import (
    CUSTOMER,
    ORCHESTRATOR,
    PROVIDER,
    TOKEN,
    accepted_job,
    job_status,
    rows,
)

pytestmark = pytest.mark.anvil

JOBS = 5
BATCH = 2  # 5 jobs: three settleBatch transactions in the first pass
STARTUP_S = 180.0  # a service process imports for 20 s on a quiet 2-core box, 50 s on a busy one
SEND, RECEIPT, ESTIMATE = b"eth_sendRawTransaction", b"eth_getTransactionReceipt", \
    b"eth_estimateGas"


# (row statuses, settleBatch transactions mined) at the moment of the kill.
AT_KILL = {"before_send": ({"sent"}, 0), "after_send": ({"sent"}, 1),
           "after_receipt": ({"sent"}, 3), "mid_batch": ({"sent"}, 1),
           "while_signing": ({"pending"}, 0)}


def kill_point(name: str) -> Callable[[bytes, bytes | None], bool]:
    """Whether the exchange (request, response chunk or None) is where `name` kills."""
    counts = {SEND: 0, ESTIMATE: 0}

    def nth(method: bytes, request: bytes, response: bytes | None, n: int) -> bool:
        if method not in request or response is not None:
            return False
        counts[method] += 1
        return counts[method] == n

    def at(request: bytes, response: bytes | None) -> bool:
        if name == "before_send":
            return nth(SEND, request, response, 1)
        if name == "after_send":
            return SEND in request and response is not None
        if name == "after_receipt":
            return RECEIPT in request and response is not None and b'"status":"0x1"' in response
        if name == "mid_batch":
            return nth(SEND, request, response, 2)
        assert name == "while_signing"
        return nth(ESTIMATE, request, response, 2)

    return at


@pytest.fixture
def proxy(anvil: Anvil) -> Iterator[CutProxy]:
    node = CutProxy(int(anvil.rpc_url.rsplit(":", 1)[1])).restore()
    yield node
    node.tap = None
    node.cut()


def service_env(db_url: str, data_dir: Path, rpc_url: str) -> dict[str, str]:
    return {"MESH_DATABASE_URL": db_url, "MESH_DATA_DIR": str(data_dir), "MESH_RPC_URL": rpc_url,
            "MESH_CHAIN_ID": "31337", "MESH_ORCHESTRATOR_KEY": "0x" + ORCHESTRATOR.key.hex(),
            "MESH_ADMIN_KEY": SecretStr("kill-matrix-admin").get_secret_value(),
            "MESH_OUTBOX_INTERVAL_S": "0.2", "MESH_OUTBOX_SETTLE_BATCH": str(BATCH),
            "MESH_SWEEP_INTERVAL_S": "3600", "MESH_JSON_LOGS": "false"}


def settlements(mesh: MeshChain, first_block: int) -> list[Any]:
    """The JobsSettled events mined since `first_block` (none while no block is there yet)."""
    if mesh.w3.eth.block_number < first_block:
        return []
    return list(mesh.job_escrow.events.JobsSettled().get_logs(from_block=first_block))


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# PostgreSQL only (the production database; each case starts two service processes).
@pytest.mark.parametrize("db_url", [pytest.param("postgresql", marks=pytest.mark.postgres)],
                         indirect=True)
@pytest.mark.parametrize("point", ["before_send", "after_send", "after_receipt", "mid_batch",
                                   "while_signing"])
def test_sigkill_at_each_settlement_step_then_restart_pays_every_job_exactly_once(
        point: str, factory: sessionmaker[Session], db_url: str, mesh: MeshChain,
        proxy: CutProxy, tmp_path: Path) -> None:
    clock = VirtualClock(time.time())
    amounts = [(3 + n) * TOKEN for n in range(JOBS)]
    jobs = [accepted_job(factory, mesh, amount=amount, task_providers=[PROVIDER], now=clock.now)
            for amount in amounts]
    payouts = {row.payload["job_id"]: sum(int(p) for p in row.payload["payouts"])
               for row in rows(factory)}
    first_block = mesh.w3.eth.block_number + 1
    escrow_tokens = mesh.token_balance(mesh.deployment.job_escrow)
    pending_before = mesh.escrow_balance(PROVIDER).pending
    mesh.deployment.save(tmp_path)
    env = service_env(db_url, tmp_path, proxy.url)

    killed = threading.Event()
    doomed = OrchestratorProcess(env, tmp_path / "first.log", startup_timeout_s=STARTUP_S)
    hits = kill_point(point)

    def tap(request: bytes, response: bytes | None) -> bool:
        if killed.is_set():
            return False  # the process is dead: nothing more of its traffic gets through
        if not hits(request, response):
            return True
        doomed.kill()  # SIGKILL, then reaped
        killed.set()
        return False

    proxy.tap = tap
    try:
        with doomed:
            assert killed.wait(STARTUP_S), f"{point} never happened:\n{doomed.log_tail()}"
    except ServiceError:  # killed before it answered /healthz: as good a moment as any
        assert killed.is_set(), doomed.log_tail()
    proxy.tap = None
    # Where it died: the rows' statuses and the settlement transactions the chain holds.
    at_kill = ({row.status for row in rows(factory)}, len(settlements(mesh, first_block)))
    assert at_kill == AT_KILL[point], doomed.log_tail()

    restart_at = time.monotonic()
    with OrchestratorProcess(env, tmp_path / "restarted.log",
                             startup_timeout_s=STARTUP_S) as restarted:
        healthy_at = time.monotonic()
        wait_until(lambda: all(row.status == "confirmed" for row in rows(factory)), STARTUP_S,
                   f"every row confirmed after the restart:\n{restarted.log_tail()}")

        print(f"\nkill point {point}: restart healthy in {healthy_at - restart_at:.1f} s, "
              f"all rows confirmed {time.monotonic() - healthy_at:.1f} s later")
    outbox = rows(factory)
    assert len(outbox) == JOBS and {row.kind for row in outbox} == {"settle"}
    assert [job_status(factory, job_id) for job_id in jobs] == ["settled"] * JOBS
    settled_ids = ["0x" + bytes(job_id).hex() for log in settlements(mesh, first_block)
                   for job_id in log["args"]["jobIds"]]
    assert sorted(settled_ids) == sorted(jobs)  # each job settled once, none lost
    assert mesh.escrow_balance(PROVIDER).pending == pending_before + sum(payouts.values())

    # Balances conserved: what the escrow took in goes out exactly, to provider and customer.
    increase_time(mesh.w3, mesh.settlement_dispute_window() + mesh.payout_period())
    claimed, _ = mesh.account(dev_account(5)).claim()
    refunds = sum(mesh.account(CUSTOMER).claim_refund(bytes.fromhex(job_id[2:]))[0]
                  for job_id, amount in zip(jobs, amounts, strict=True)
                  if amount > payouts[job_id])
    assert claimed == pending_before + sum(payouts.values())
    assert claimed - pending_before + refunds == sum(amounts)
    assert mesh.token_balance(mesh.deployment.job_escrow) == escrow_tokens - claimed
