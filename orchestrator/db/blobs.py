"""Content-addressed blobs the database knows of, and the checkpoints and results that name
them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    Blob,
    Checkpoint,
    Task,
)


def blob_hashes(session: Session) -> list[str]:
    """Every stored blob the database lists (scenes, checkpoints, results)."""
    return list(session.scalars(select(Blob.sha256).order_by(Blob.sha256)))


def add_blob(session: Session, *, sha256: str, size: int, now: float) -> None:
    if session.get(Blob, sha256) is None:
        session.add(Blob(sha256=sha256, size=size, created_at=now))
        session.flush()


def get_blob(session: Session, *, sha256: str) -> Blob | None:
    return session.get(Blob, sha256)


def add_checkpoint(session: Session, *, task: Task, node_id: str, sha256: str, progress: float,
                   is_result: bool, now: float) -> Checkpoint:
    checkpoint = Checkpoint(task_id=task.id, node_id=node_id, sha256=sha256, progress=progress,
                            is_result=is_result, created_at=now)
    session.add(checkpoint)
    if is_result:
        task.result_sha256 = sha256
    else:
        task.checkpoint_sha256 = sha256
        task.checkpoint_progress = max(task.checkpoint_progress, progress)
    task.progress = max(task.progress, progress)
    return checkpoint


def delivered_result(session: Session, *, task_id: int, node_id: str) -> bool:
    """Whether the node delivered a result of the task (in any attempt)."""
    return session.scalars(select(Checkpoint.id).where(
        Checkpoint.task_id == task_id, Checkpoint.node_id == node_id,
        Checkpoint.is_result.is_(True)).limit(1)).first() is not None


def job_results(session: Session, *, job_id: str) -> list[tuple[Task, Blob]]:
    """Tasks of the job that have a result, with the result's blob, in task order."""
    return [(task, blob) for task, blob in session.execute(
        select(Task, Blob).join(Blob, Blob.sha256 == Task.result_sha256)
        .where(Task.job_id == job_id).order_by(Task.index)).tuples()]


def job_artifact_hashes(session: Session, *, job_id: str) -> list[str]:
    return list(session.scalars(select(Checkpoint.sha256).join(Task, Task.id == Checkpoint.task_id)
                                .where(Task.job_id == job_id).distinct()))
