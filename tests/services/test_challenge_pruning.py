"""Issued PoPW challenges do not pile up in memory: the periodic nonce job prunes those long
past their deadline, while the DB still refuses a replay of one."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.config import Settings
from orchestrator.db import nodes as node_db
from orchestrator.main import _periodic_jobs, create_app
from orchestrator.services.pls import PlsService
from orchestrator.services.pls_handshake import CHALLENGE_RETENTION_S
from tests.builders import node_spec
from tests.services.pls_harness import FixedStake


def test_the_nonce_job_prunes_challenges_past_their_retention(
        db_url: str, tmp_path: Path, factory: sessionmaker[Session]) -> None:
    app = create_app(Settings(database_url=db_url, data_dir=tmp_path, periodic_enabled=False,
                              json_logs=False), stake_reader=FixedStake())
    ctx = app.state.ctx
    pls: PlsService = ctx.pls
    with factory.begin() as session:
        node = node_db.register_node(session, spec=node_spec("gpu-1"), now=0.0)
        pls.ingest.node_registered(session, node=node, now=0.0)
        old = pls.handshake.issue_challenge(session, node_id="gpu-1", gpu_class="rtx4090",
                                            now=0.0)
        later = old.deadline + CHALLENGE_RETENTION_S + 1.0
        fresh = pls.handshake.issue_challenge(session, node_id="gpu-1", gpu_class="rtx4090",
                                              now=later)
    (nonce_job,) = [job for job in _periodic_jobs(ctx) if job.name == "nonce-gc"]
    with factory.begin() as session:
        nonce_job.work(session, later)
    assert [c.nonce for c in pls.state.challenges.pending(later)] == [fresh.nonce]
    assert pls.handshake.prune_challenges(later) == 0  # the old one is gone already
