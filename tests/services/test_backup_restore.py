"""Backup mid-run, keep working until the job is settled on chain, restore the older backup:
the service re-reads the chain before it sends anything, so the settlement made after the
backup is recognised and nothing is paid twice, and a job that was still running in the backup
is run again and found settled (anvil, SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.chain.anvil import increase_time
from orchestrator.chain.sdk import MeshChain
from orchestrator.config import Settings
from orchestrator.db import backup
from orchestrator.db.session import transaction
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.main import _periodic_jobs, create_app
from orchestrator.scheduling.periodic import LeaderRunner
from orchestrator.services.outbox.sender import OutboxSender
from orchestrator.telemetry.metrics import MeshMetrics
from tests.clients import VirtualClock
from tests.services.pls_harness import FixedStake
from tests.services.test_outbox import (
    CUSTOMER,
    ORCHESTRATOR,
    OTHER_PROVIDER,
    PROVIDER,
    TOKEN,
    accept,
    accepted_job,
    drain,
    job_status,
    rows,
    running_job,
    settled_on_chain,
    tx_count,
)

pytestmark = pytest.mark.anvil


Tick = Callable[[str], None]


@pytest.fixture
def tick(factory: sessionmaker[Session], mesh: MeshChain, db_url: str, tmp_path: Path,
         clock: VirtualClock) -> Tick:
    """Runs one of the service's periodic jobs (the chain index, the outbox sender) once."""
    mesh.deployment.save(tmp_path)
    settings = Settings(database_url=db_url, data_dir=tmp_path, json_logs=False,
                        periodic_enabled=False, chain_reorg_margin=0, chain_finality_tag="none",
                        rpc_url=mesh.w3.provider.endpoint_uri,  # type: ignore[attr-defined]
                        orchestrator_key=SecretStr(ORCHESTRATOR.key.hex()))
    jobs = {job.name: job for job in _periodic_jobs(create_app(
        settings, stake_reader=FixedStake()).state.ctx)}
    runner = LeaderRunner(factory, holder="service", clock=clock)

    def run(name: str) -> None:
        assert runner.run_if_leader(name, ttl_s=10.0, work=jobs[name].work)
    return run


def holdings_of(mesh: MeshChain) -> dict[str, int]:
    return {who: mesh.token_balance(who) for who in
            (CUSTOMER.address, PROVIDER, OTHER_PROVIDER, mesh.job_escrow.address)}


def restore(factory: sessionmaker[Session], db_url: str, copy: Path) -> None:
    """`mesh orchestrator restore`: the older database back, and its marker."""
    backup.restore(db_url, copy)
    with transaction(factory) as session:
        backup.mark_restored(session)


def test_restore_of_an_older_backup_reconciles_before_sending_and_pays_once(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics, db_url: str,
        tmp_path: Path, clock: VirtualClock, tick: Tick) -> None:
    sender = OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics)
    amount = 30 * TOKEN
    job_id = accepted_job(factory, mesh, amount=amount, now=clock.now,
                          task_providers=[PROVIDER, PROVIDER, OTHER_PROVIDER])
    tick("chain-index")  # the backup's cursor: before the settlement
    copy = tmp_path / "mesh.backup"
    backup.backup(db_url, copy)

    # Keep working after the backup until the job is settled and final on chain.
    assert drain(factory, sender, clock) and drain(factory, sender, clock)
    assert settled_on_chain(mesh, job_id) and job_status(factory, job_id) == JobStatus.SETTLED
    sent = tx_count(mesh)
    holdings = holdings_of(mesh)

    restore(factory, db_url, copy)
    assert job_status(factory, job_id) == JobStatus.SETTLING  # the older state is back
    assert [row.status for row in rows(factory)] == ["pending"]

    tick("outbox-sender")  # reconcile first: nothing is signed while the marker stands
    assert tx_count(mesh) == sent and [row.status for row in rows(factory)] == ["pending"]
    tick("chain-index")  # re-reads the JobsSettled since the backup's cursor
    assert job_status(factory, job_id) == JobStatus.SETTLED
    with factory() as session:
        assert not backup.reconcile_pending(session)
    for _ in range(2):
        tick("outbox-sender")
    assert [row.status for row in rows(factory)] == ["confirmed"]
    assert tx_count(mesh) == sent  # the settlement was never sent again

    # Paid exactly once, and no token moved: the escrow still holds what it paid out.
    assert holdings_of(mesh) == holdings
    increase_time(mesh.w3, mesh.settlement_dispute_window() + mesh.payout_period())
    assert mesh.escrow_balance(PROVIDER).claimable == amount * 2 // 3
    assert mesh.escrow_balance(OTHER_PROVIDER).claimable == amount // 3


def test_a_job_still_running_in_the_backup_is_run_again_and_found_paid_not_paid_twice(
        factory: sessionmaker[Session], mesh: MeshChain, metrics: MeshMetrics, db_url: str,
        tmp_path: Path, clock: VirtualClock, tick: Tick) -> None:
    sender = OutboxSender(mesh, mesh.account(ORCHESTRATOR), metrics)
    amount = 30 * TOKEN
    job_id = running_job(factory, mesh, amount=amount, now=clock.now,
                         task_providers=[PROVIDER, OTHER_PROVIDER])
    tick("chain-index")
    copy = tmp_path / "mesh.backup"
    backup.backup(db_url, copy)  # the job's tasks still running

    accept(factory, job_id, now=clock.now)  # after the backup: done, verified, settled
    assert drain(factory, sender, clock) and settled_on_chain(mesh, job_id)
    sent = tx_count(mesh)
    holdings = holdings_of(mesh)

    restore(factory, db_url, copy)
    tick("chain-index")  # the settlement is on chain, but our job is running: left alone
    assert job_status(factory, job_id) == JobStatus.RUNNING
    with factory() as session:
        assert not backup.reconcile_pending(session)

    accept(factory, job_id, now=clock.now)  # the work is done (and verified) again
    for _ in range(3):
        tick("outbox-sender")
        tick("chain-index")
    assert [row.status for row in rows(factory)] == ["confirmed"]
    assert job_status(factory, job_id) == JobStatus.SETTLED
    assert tx_count(mesh) == sent  # found settled on chain, never sent again
    assert holdings_of(mesh) == holdings
    increase_time(mesh.w3, mesh.settlement_dispute_window() + mesh.payout_period())
    assert mesh.escrow_balance(PROVIDER).claimable == amount // 2
    assert mesh.escrow_balance(OTHER_PROVIDER).claimable == amount // 2


def test_backup_and_restore_refuse_what_they_cannot_copy_in_one_line(
        tmp_path: Path) -> None:
    with pytest.raises(backup.BackupError, match="no database file"):
        backup.backup(f"sqlite:///{tmp_path / 'absent.db'}", tmp_path / "out")
    with pytest.raises(backup.BackupError, match="no backup file"):
        backup.restore(f"sqlite:///{tmp_path / 'mesh.db'}", tmp_path / "absent.backup")
    (tmp_path / "junk.backup").write_text("not a database")
    with pytest.raises(backup.BackupError, match="not a SQLite database"):
        backup.restore(f"sqlite:///{tmp_path / 'mesh.db'}", tmp_path / "junk.backup")
