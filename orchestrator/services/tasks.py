"""What a node reports about a task it leases: progress, checkpoints, completion, failure.
Each call is one report's transaction (`work` holds the rules); it commits, then counts what
the report means for the metrics."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from orchestrator.db.models import Task
from orchestrator.services import work
from orchestrator.services.pls import PlsService
from orchestrator.services.verification import Verifier, report_of
from orchestrator.storage.blobs import BlobStore
from orchestrator.telemetry.metrics import MeshMetrics


def progress(session: Session, *, task_id: int, node_id: str, progress: float,
             lease_ttl_s: float, metrics: MeshMetrics, now: float) -> Task:
    task, started = work.report_progress(session, task_id=task_id, node_id=node_id,
                                         progress=progress, now=now, lease_ttl_s=lease_ttl_s)
    session.commit()
    if started is not None and started.waited_s is not None:
        metrics.assigned(started.waited_s)
    if started is not None and started.recovery is not None:
        metrics.recovery_time.observe(started.recovery.seconds)
        metrics.rework.observe(started.recovery.rework)
    return task


def checkpoint(session: Session, *, task_id: int, node_id: str, sha256: str, progress: float,
               cost_s: float | None, store: BlobStore, pls: PlsService, now: float) -> Task:
    """Record the checkpoint (with the parts its manifest in `store` names); its cost (when
    measured) tunes the node's checkpoint interval."""
    task = work.add_checkpoint(session, task_id=task_id, node_id=node_id, sha256=sha256,
                               progress=progress, read=store.read,
                               size_of=lambda sha: store.path_of(sha).stat().st_size, now=now)
    if cost_s is not None:
        pls.ingest.observe_checkpoint_cost(session, node_id=node_id, seconds=cost_s, now=now)
    session.commit()
    return task


def complete(session: Session, *, task_id: int, node_id: str, result_sha256: str,
             render: Any, verifier: Verifier, now: float) -> Task:
    """The task is done; its result is committed and challenged. `render`: the body's render
    report (see `report_of`), or None."""
    task = verifier.complete_task(session, task_id=task_id, node_id=node_id,
                                  result_sha256=result_sha256, report=report_of(render),
                                  now=now)
    session.commit()
    return task


def fail(session: Session, *, task_id: int, node_id: str, reason: str, message: str,
         metrics: MeshMetrics, now: float) -> Task:
    task = work.fail_task(session, task_id=task_id, node_id=node_id, reason=reason, now=now,
                          message=message)
    session.commit()
    metrics.retries.labels(reason).inc()
    return task
