"""Re-check renders of a job restricted to named providers go only to those providers' nodes
(a window of a sensitive scene is still the scene)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import jobs as job_db
from orchestrator.db import verification as store
from orchestrator.domain.types import TaskNeeds
from tests.builders import PROVIDER

TRUSTED = "0x" + "b" * 40
ALSO_TRUSTED = "0x" + "d" * 40
STRANGER = "0x" + "e" * 40


def open_check(session: Session, job_id: str, allowed: list[str] | None) -> int:
    (task,) = job_db.job_tasks(session, job_id=job_id)
    commitment = store.add_commitment(
        session, task_id=task.id, job_id=job_id, node_id="renderer", provider=PROVIDER,
        attempt=1, result_sha256="a" * 64, root="0x" + "0" * 64, leaves=[], windows=8,
        env=None, chunks=[], policy="adaptive", rate=1.0, seed="0x" + "1" * 64, created_at=0.0)
    return store.add_check(session, commitment=commitment, window=0, role="check", now=0.0,
                           recipe={"excluded_providers": [PROVIDER],
                                   "allowed_providers": allowed}).id


def test_aRestrictedJobsCheck_goesOnlyToANamedProvider(
        factory: sessionmaker[Session], make_job: Callable[..., str]) -> None:
    job_id = make_job(1, needs=TaskNeeds(providers=frozenset({PROVIDER, TRUSTED})))
    with factory.begin() as session:
        check_id = open_check(session, job_id, [PROVIDER, TRUSTED])
        assert store.lease_check(session, node_id="outsider", provider=STRANGER, now=1.0,
                                 ttl_s=60) is None
        leased = store.lease_check(session, node_id="insider", provider=TRUSTED, now=1.0,
                                   ttl_s=60)
        assert leased is not None and leased.id == check_id


def test_anOpenJobsCheck_goesToAnyOtherProvider(
        factory: sessionmaker[Session], make_job: Callable[..., str]) -> None:
    job_id = make_job(1)
    with factory.begin() as session:
        check_id = open_check(session, job_id, None)
        leased = store.lease_check(session, node_id="anyone", provider=ALSO_TRUSTED, now=1.0,
                                   ttl_s=60)
        assert leased is not None and leased.id == check_id
