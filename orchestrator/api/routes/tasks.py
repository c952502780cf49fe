"""What a node reports about a task it leases: progress, checkpoints, completion, failure."""

from __future__ import annotations

from fastapi import APIRouter

from orchestrator.api.deps import CtxDep, NodeDep, NonceAfterValidation, SessionDep
from orchestrator.api.errors import errors
from orchestrator.api.schemas import CheckpointIn, CompleteIn, FailIn, ProgressIn, RowId, TaskOut
from orchestrator.db.models import Task
from orchestrator.domain.errors import Forbidden, Invalid, Missing, Refused
from orchestrator.services import tasks

router = APIRouter(tags=["tasks"], route_class=NonceAfterValidation)


def task_out(task: Task) -> TaskOut:
    return TaskOut(task_id=task.id, status=task.status, progress=task.progress)


@router.post("/tasks/{task_id}/progress", response_model=TaskOut,
             responses=errors(Missing, Forbidden, Refused, Invalid),
             summary="Report progress; the first report starts the task and renews its lease")
def progress(task_id: RowId, body: ProgressIn, claims: NodeDep, session: SessionDep,
             ctx: CtxDep) -> TaskOut:
    return task_out(tasks.progress(session, task_id=task_id, node_id=claims.node_id,
                                   progress=body.progress, lease_ttl_s=ctx.settings.lease_ttl_s,
                                   metrics=ctx.metrics, now=ctx.now()))


@router.post("/tasks/{task_id}/checkpoints", response_model=TaskOut,
             responses=errors(Missing, Forbidden, Refused, Invalid),
             summary="Record an uploaded checkpoint blob as the task's resume point")
def checkpoint(task_id: RowId, body: CheckpointIn, claims: NodeDep, session: SessionDep,
               ctx: CtxDep) -> TaskOut:
    return task_out(tasks.checkpoint(session, task_id=task_id, node_id=claims.node_id,
                                     sha256=body.sha256, progress=body.progress,
                                     cost_s=body.cost_s, store=ctx.blobs, pls=ctx.pls,
                                     now=ctx.now()))


@router.post("/tasks/{task_id}/complete", response_model=TaskOut,
             responses=errors(Missing, Forbidden, Refused, Invalid),
             summary="Finish the task with an uploaded result blob (committed, then challenged)")
def complete(task_id: RowId, body: CompleteIn, claims: NodeDep, session: SessionDep,
             ctx: CtxDep) -> TaskOut:
    return task_out(tasks.complete(session, task_id=task_id, node_id=claims.node_id,
                                   result_sha256=body.result_sha256, render=body.render,
                                   verifier=ctx.verifier, now=ctx.now()))


@router.post("/tasks/{task_id}/fail", response_model=TaskOut,
             responses=errors(Missing, Forbidden, Refused, Invalid),
             summary="Give the task back: failed start, drain, or a workload error")
def fail(task_id: RowId, body: FailIn, claims: NodeDep, session: SessionDep,
         ctx: CtxDep) -> TaskOut:
    return task_out(tasks.fail(session, task_id=task_id, node_id=claims.node_id,
                               reason=body.reason, message=body.message, metrics=ctx.metrics,
                               now=ctx.now()))
