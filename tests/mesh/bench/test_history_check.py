"""The history checker bites: a clean history of real DB rows and anvil transactions passes,
and each violation planted in it (a settlement the service never completed, tokens the escrow
does not owe, a task row deleted, an escrowed job the service never saw, a GPU slot leased
twice, an honest provider slashed) is reported as its kind, and only that kind."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from eth_utils import keccak
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from mesh.bench.history_check import check
from orchestrator.chain.anvil import dev_account
from orchestrator.chain.sdk import MeshChain
from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db import statuses as status_db
from orchestrator.db.models import Lease, SlashRecord, Task
from orchestrator.db.session import make_engine, make_session_factory, upgrade_to_head
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus, TaskStatus
from orchestrator.domain.types import NodeSpec, TaskNeeds

pytestmark = pytest.mark.anvil

TOKEN = 10**18
CUSTOMER, ORCHESTRATOR, PROVIDER = dev_account(4), dev_account(1), dev_account(5).address


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(f"sqlite:///{tmp_path / 'history.db'}")
    upgrade_to_head(engine)
    yield make_session_factory(engine)
    engine.dispose()


def escrow(chain: MeshChain, name: str, amount: int) -> str:
    job_id = keccak(text=f"history check {name} {time.time()}")
    deadline = int(chain.w3.eth.get_block("latest")["timestamp"]) + 86_400
    chain.account(CUSTOMER).create_job(job_id, amount, deadline, b"\x05" * 32)
    return "0x" + job_id.hex()


def service_job(factory: sessionmaker[Session], job_id: str, amount: int, *,
                done: bool) -> None:
    """A two-shard command job as the service records it: settled (tasks done) or running."""
    now = time.time()
    spec = {"workload": {"kind": "command", "command": ["true"], "count": 2},
            "deadline": int(now) + 86_400}
    with factory.begin() as session:
        node_db.register_node(session, spec=NodeSpec(
            node_id="honest", provider=PROVIDER, gpu_model="RTX4090", vram_gb=24,
            compute_capability=8.9, region="eu", price_per_gpu_hour=1, slots=1), now=now)
        job = job_db.create_job(session, NewJob(
            job_id=job_id, customer=CUSTOMER.address, spec=spec, spec_hash="0x" + "05" * 32,
            amount=amount, deadline=now + 1e5, needs=TaskNeeds(),
            payloads=({"shard": 0}, {"shard": 1},)), now=now, status=JobStatus.RUNNING)
        session.flush()
        if not done:
            return
        for task in job_db.job_tasks(session, job_id=job_id):
            for status in (TaskStatus.RESERVED, TaskStatus.RUNNING, TaskStatus.DONE):
                status_db.set_task_status(session, task=task, target=status, now=now, reason="test")
        for job_status in (JobStatus.VERIFYING, JobStatus.COMPLETED, JobStatus.SETTLING,
                           JobStatus.SETTLED):
            status_db.set_job_status(session, job=job, target=job_status, now=now, reason="test")


def found(factory: sessionmaker[Session], chain: MeshChain) -> dict[str, int]:
    return {k: v for k, v in check(factory, chain).violations.items() if v}


def test_a_clean_history_passes_and_each_planted_violation_is_reported_as_its_kind(
        factory: sessionmaker[Session], chain: MeshChain) -> None:
    settled, running = escrow(chain, "settled", 3 * TOKEN), escrow(chain, "running", 2 * TOKEN)
    service_job(factory, settled, 3 * TOKEN, done=True)
    service_job(factory, running, 2 * TOKEN, done=False)
    chain.account(ORCHESTRATOR).settle(bytes.fromhex(settled[2:]), [], [], b"\x01" * 32)
    report = check(factory, chain)
    assert report.ok, report.details
    assert report.counts["jobs_completed"] == report.counts["jobs_settled_on_chain"] == 1

    # The chain pays a job the service never completed (a direct settle call).
    chain.account(ORCHESTRATOR).settle(bytes.fromhex(running[2:]), [], [], b"\x02" * 32)
    assert found(factory, chain) == {"paid_not_completed": 1}

    # Tokens reach the escrow that no job or account is owed.
    chain.account(CUSTOMER).transfer(chain.deployment.job_escrow, 5)
    assert found(factory, chain) == {"paid_not_completed": 1, "balance_mismatch": 1}


def test_a_deleted_task_a_lost_job_a_double_lease_and_an_honest_slash_are_each_found(
        factory: sessionmaker[Session], chain: MeshChain) -> None:
    job_id = escrow(chain, "running", 2 * TOKEN)
    service_job(factory, job_id, 2 * TOKEN, done=False)
    assert found(factory, chain) == {}

    with factory.begin() as session:
        session.execute(delete(Task).where(Task.job_id == job_id, Task.index == 1))
    assert found(factory, chain) == {"task_lost": 1}

    escrow(chain, "never submitted", TOKEN)
    assert found(factory, chain) == {"task_lost": 1, "job_lost": 1}

    other = "0x" + "09" * 32  # a second job of the service's (not escrowed: not checked)
    service_job(factory, other, TOKEN, done=False)
    now = time.time()
    with factory.begin() as session:
        first, second = (job_db.job_tasks(session, job_id=job)[0] for job in (job_id, other))
        session.add_all([  # the second starts on the slot before the first was released
            Lease(task_id=first.id, node_id="honest", slot=0, state="released",
                  created_at=now, expires_at=now + 60, released_at=now + 10),
            Lease(task_id=second.id, node_id="honest", slot=0, state="active",
                  created_at=now + 5, expires_at=now + 60)])
        session.add(SlashRecord(slash_id="0x" + "07" * 32, node_id="honest", provider=PROVIDER,
                                reason=1, amount=TOKEN, evidence="0x" + "08" * 32,
                                decided_at=now, detail="planted"))
    assert found(factory, chain) == {"task_lost": 1, "job_lost": 1, "double_lease": 1,
                                     "honest_slashed": 1}
    # A provider the run faulted on purpose may be slashed: that is the design.
    assert check(factory, chain, faulted_providers={PROVIDER}).violations["honest_slashed"] == 0
