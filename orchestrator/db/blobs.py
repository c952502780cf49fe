"""Content-addressed blobs the database knows of, who uploaded each (possession, quotas,
expiry), and the checkpoints and results that name them."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    Blob,
    BlobUpload,
    Checkpoint,
    CheckpointPart,
    Task,
)


def wallet_uploader(address: str) -> str:
    """The `BlobUpload.uploader` of a wallet's uploads (a customer's inputs)."""
    return f"wallet:{address}"


def node_uploader(node_id: str) -> str:
    """The `BlobUpload.uploader` of a node session's uploads."""
    return f"node:{node_id}"


def blob_hashes(session: Session) -> list[str]:
    """Every stored blob the database lists (scenes, checkpoints, results)."""
    return list(session.scalars(select(Blob.sha256).order_by(Blob.sha256)))


def add_blob(session: Session, *, sha256: str, size: int, now: float) -> None:
    if session.get(Blob, sha256) is None:
        session.add(Blob(sha256=sha256, size=size, created_at=now))
        session.flush()


def get_blob(session: Session, *, sha256: str) -> Blob | None:
    return session.get(Blob, sha256)


def reserve_upload(session: Session, *, sha256: str, uploader: str, size: int, now: float,
                   expires_at: float) -> bool:
    """Record, before its body arrives, that `uploader` is sending the blob (`size`: the most
    it may be). The blob's row is locked first, as the upload GC locks it: a blob the GC is
    deleting is not reserved at the same moment. A claimed upload stays claimed. True when the
    row is new (`forget_reservation` undoes it if the body then fails)."""
    session.get(Blob, sha256, with_for_update=True)
    row = session.scalars(select(BlobUpload).where(
        BlobUpload.sha256 == sha256, BlobUpload.uploader == uploader)
        .with_for_update()).first()
    if row is None:
        session.add(BlobUpload(sha256=sha256, uploader=uploader, size=size, uploaded_at=now,
                               expires_at=expires_at))
        session.flush()
        return True
    row.uploaded_at = now
    if row.expires_at is not None:
        row.size, row.expires_at = size, expires_at
    return False


def settle_upload(session: Session, *, sha256: str, uploader: str, size: int) -> None:
    """The body arrived: an unclaimed upload counts its real size from now on."""
    row = session.scalars(select(BlobUpload).where(
        BlobUpload.sha256 == sha256, BlobUpload.uploader == uploader)).first()
    if row is not None and row.expires_at is not None:
        row.size = size


def forget_reservation(session: Session, *, sha256: str, uploader: str) -> None:
    """The body failed: the reservation `reserve_upload` made is dropped (unless claimed)."""
    session.execute(delete(BlobUpload).where(
        BlobUpload.sha256 == sha256, BlobUpload.uploader == uploader,
        BlobUpload.expires_at.is_not(None)))


def uploaded(session: Session, *, uploader: str, hashes: Collection[str],
             now: float) -> set[str]:
    """Which of `hashes` `uploader` holds an upload of (claimed, or unclaimed and unexpired)."""
    if not hashes:
        return set()
    return set(session.scalars(select(BlobUpload.sha256).where(
        BlobUpload.uploader == uploader, BlobUpload.sha256.in_(list(hashes)),
        or_(BlobUpload.expires_at.is_(None), BlobUpload.expires_at > now))))


def claim_uploads(session: Session, *, uploader: str, hashes: Iterable[str]) -> None:
    """The uploads are named by something the service keeps: they no longer expire."""
    wanted = list(set(hashes))
    if wanted:
        for row in session.scalars(select(BlobUpload).where(
                BlobUpload.uploader == uploader, BlobUpload.sha256.in_(wanted))):
            row.expires_at = None


def pending_upload_bytes(session: Session, *, now: float, uploader: str | None = None) -> int:
    """Bytes of unclaimed, unexpired uploads: of `uploader`, or of everyone."""
    query = select(func.coalesce(func.sum(BlobUpload.size), 0)).where(
        BlobUpload.expires_at > now)
    if uploader is not None:
        query = query.where(BlobUpload.uploader == uploader)
    return int(session.scalar(query) or 0)


def next_expiry(session: Session, *, now: float, uploader: str | None = None) -> float | None:
    """When the soonest unclaimed upload (of `uploader`, or of anyone) expires."""
    query = select(func.min(BlobUpload.expires_at)).where(BlobUpload.expires_at > now)
    if uploader is not None:
        query = query.where(BlobUpload.uploader == uploader)
    soonest = session.scalar(query)
    return None if soonest is None else float(soonest)


def uploaded_since(session: Session, *, uploader: str, since: float) -> tuple[int, float | None]:
    """Bytes `uploader` sent (claimed or not) since `since`, and when the first of them was."""
    total, first = session.execute(select(
        func.coalesce(func.sum(BlobUpload.size), 0), func.min(BlobUpload.uploaded_at)).where(
        BlobUpload.uploader == uploader, BlobUpload.uploaded_at >= since)).one()
    return int(total or 0), None if first is None else float(first)


def forget_expired_uploads(session: Session, *, now: float, limit: int) -> list[str]:
    """Delete up to `limit` unclaimed uploads that expired; return the blobs that no upload,
    checkpoint or task names any more, their rows deleted under their lock (the caller
    deletes their files in the same transaction). Blobs that never had an upload row (stored
    before uploads were recorded) are never among them."""
    expired = list(session.scalars(select(BlobUpload).where(BlobUpload.expires_at <= now)
                                   .order_by(BlobUpload.expires_at).limit(limit)))
    for row in expired:
        session.delete(row)
    session.flush()
    orphans = []
    for sha256 in sorted({row.sha256 for row in expired}):
        blob = session.get(Blob, sha256, with_for_update=True)
        if blob is None or _still_named(session, sha256):
            continue
        session.delete(blob)
        orphans.append(sha256)
    session.flush()
    return orphans


def _still_named(session: Session, sha256: str) -> bool:
    return any(session.scalars(query.limit(1)).first() is not None for query in (
        select(BlobUpload.id).where(BlobUpload.sha256 == sha256),
        select(Checkpoint.id).where(Checkpoint.sha256 == sha256),
        select(CheckpointPart.checkpoint_id).where(CheckpointPart.sha256 == sha256)))


def task_checkpoint_blobs(session: Session, *, task_id: int) -> set[str]:
    """Every checkpoint of the task and every part they named (what a resume may carry)."""
    rows = list(session.scalars(select(Checkpoint).where(Checkpoint.task_id == task_id,
                                                         Checkpoint.is_result.is_(False))))
    named = {row.sha256 for row in rows}
    if rows:
        named.update(session.scalars(select(CheckpointPart.sha256).where(
            CheckpointPart.checkpoint_id.in_([row.id for row in rows]))))
    return named


def checkpoint_parts(session: Session, *, task_id: int, sha256: str) -> set[str]:
    """The parts recorded for the task's checkpoint(s) `sha256`."""
    return set(session.scalars(select(CheckpointPart.sha256).join(
        Checkpoint, Checkpoint.id == CheckpointPart.checkpoint_id).where(
        Checkpoint.task_id == task_id, Checkpoint.sha256 == sha256)))


def add_checkpoint(session: Session, *, task: Task, node_id: str, sha256: str, progress: float,
                   is_result: bool, now: float, parts: Collection[str] = ()) -> Checkpoint:
    """Record a checkpoint (or the result) of the task, with the parts its manifest named."""
    checkpoint = Checkpoint(task_id=task.id, node_id=node_id, sha256=sha256, progress=progress,
                            is_result=is_result, created_at=now)
    session.add(checkpoint)
    if parts:
        session.flush()
        session.add_all(CheckpointPart(checkpoint_id=checkpoint.id, sha256=part)
                        for part in sorted(set(parts)))
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
