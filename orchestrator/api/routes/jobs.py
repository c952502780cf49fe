"""Job submission (signed by the customer, backed by an on-chain escrow) and status."""

from __future__ import annotations

from typing import Annotated, Any

from eth_utils import keccak
from fastapi import APIRouter, Header
from fastapi.responses import FileResponse

from orchestrator.api.deps import CtxDep, EscrowDep, SessionDep, SignedDep
from orchestrator.api.errors import ApiError
from orchestrator.api.routes.blobs import blob_file
from orchestrator.api.schemas import JobOut, JobSubmission, ResultOut, ResultsOut
from orchestrator.db import crud
from orchestrator.db.models import Job
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.lifecycle import JobStatus, TaskStatus
from orchestrator.domain.types import TaskNeeds
from orchestrator.scheduling.jobs import split_tasks

router = APIRouter(tags=["jobs"])
IdempotencyKey = Annotated[str, Header(min_length=8, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]


def job_out(session: SessionDep, job: Job) -> JobOut:
    return JobOut(job_id=job.id, status=job.status, customer=job.customer, amount=job.amount,
                  tasks=crud.task_counts(session, job_id=job.id), merkle_root=job.merkle_root)


@router.post("/jobs", response_model=JobOut,
             summary="Submit a job whose escrow is already funded on chain (signed)")
def submit(body: JobSubmission, signed: SignedDep, session: SessionDep, ctx: CtxDep,
           escrow: EscrowDep, idempotency_key: IdempotencyKey) -> JobOut:
    request_hash = "0x" + keccak(body.model_dump_json().encode()).hex()
    seen = crud.find_idempotent_job(session, principal=signed.address, key=idempotency_key)
    if seen is not None:
        if seen.request_hash != request_hash:
            raise ApiError(409, "idempotency_key_reused", "this key was used for another job")
        job = crud.get_job(session, job_id=seen.job_id)
        assert job is not None
        return job_out(session, job)
    job_id = body.job_id.lower()
    if crud.get_job(session, job_id=job_id) is not None:
        raise ApiError(409, "job_exists", "a job with this id was already submitted")
    escrowed = escrow().escrowed_job(bytes.fromhex(job_id[2:]))
    if escrowed is None or escrowed.status != EscrowStatus.FUNDED:
        raise ApiError(402, "escrow_missing", "no funded escrow for this job id on chain")
    if escrowed.customer != signed.address:
        raise ApiError(403, "escrow_customer_mismatch", "the escrow belongs to another customer")
    spec_hash = body.spec.canonical_hash()
    if escrowed.spec_hash != spec_hash:
        raise ApiError(409, "spec_hash_mismatch", "the escrowed spec hash differs from this spec")
    if escrowed.amount <= 0:
        raise ApiError(402, "escrow_empty", "the escrow holds no funds")
    needs_in = body.spec.needs
    payloads = split_tasks(body.spec.model_dump(mode="json")["workload"])
    needs = TaskNeeds(
        min_vram_gb=needs_in.min_vram_gb,
        gpu_models=None if needs_in.gpu_models is None else frozenset(needs_in.gpu_models),
        regions=None if needs_in.regions is None else frozenset(needs_in.regions),
        max_price_per_gpu_hour=needs_in.max_price_per_gpu_hour, priority=needs_in.priority,
        expected_duration_s=needs_in.expected_duration_s,
        value=escrowed.amount // len(payloads))  # what a task is worth: prices collateral
    now = ctx.now()
    spec = body.spec.model_dump(mode="json")
    job = crud.create_job(session, job_id=job_id, customer=signed.address, spec=spec,
                          spec_hash="0x" + spec_hash.hex(), amount=escrowed.amount,
                          deadline=float(body.spec.deadline), needs=needs,
                          task_payloads=payloads, now=now)
    crud.set_job_status(session, job=job, target=JobStatus.FUNDED, now=now,
                        reason=f"escrow of {escrowed.amount} seen on chain")
    crud.save_idempotency_key(session, principal=signed.address, key=idempotency_key,
                              request_hash=request_hash, job_id=job_id, now=now)
    crud.commit_or_conflict(session)
    return job_out(session, job)


@router.get("/jobs/{job_id}", response_model=JobOut, summary="Job status and task counts")
def status(job_id: str, session: SessionDep) -> JobOut:
    job = crud.get_job(session, job_id=job_id.lower())
    if job is None:
        raise ApiError(404, "job_not_found", f"no job {job_id}")
    return job_out(session, job)


def customer_job(session: SessionDep, *, job_id: str, address: str) -> Job:
    job = crud.get_job(session, job_id=job_id.lower())
    if job is None:
        raise ApiError(404, "job_not_found", f"no job {job_id}")
    if job.customer != address:
        raise ApiError(403, "job_not_owned", "this job belongs to another customer")
    return job


def result_name(payload: dict[str, Any], index: int) -> str:
    if payload.get("kind") == "blender":
        frame, tile = int(payload["frame"]), int(payload.get("tile", 0))
        tiles = int(payload.get("tiles", 1))
        suffix = "exr" if payload.get("format") == "exr" else "png"
        return (f"frame-{frame:04d}.{suffix}" if tiles == 1
                else f"frame-{frame:04d}-tile-{tile:02d}.{suffix}")
    return f"shard-{index:04d}.tar"


@router.get("/jobs/{job_id}/results", response_model=ResultsOut,
            summary="The job's results so far: one content-addressed file per task (signed, "
                    "the job's customer only)")
def results(job_id: str, signed: SignedDep, session: SessionDep) -> ResultsOut:
    job = customer_job(session, job_id=job_id, address=signed.address)
    found = crud.job_results(session, job_id=job.id)
    tasks = crud.task_counts(session, job_id=job.id)
    unfinished = sum(count for status, count in tasks.items()
                     if status not in (TaskStatus.DONE.value, TaskStatus.VERIFIED.value))
    return ResultsOut(job_id=job.id, status=job.status, complete=unfinished == 0, results=[
        ResultOut(task_id=task.id, name=result_name(task.payload, task.index),
                  sha256=blob.sha256, size=blob.size, frame=task.payload.get("frame"),
                  tile=task.payload.get("tile"), tiles=task.payload.get("tiles"))
        for task, blob in found])


@router.get("/jobs/{job_id}/results/{sha256}", response_class=FileResponse,
            summary="Download one result of the job (signed, the job's customer only)")
def download_result(job_id: str, sha256: str, signed: SignedDep, session: SessionDep,
                    ctx: CtxDep) -> FileResponse:
    job = customer_job(session, job_id=job_id, address=signed.address)
    if all(blob.sha256 != sha256 for _, blob in crud.job_results(session, job_id=job.id)):
        raise ApiError(404, "result_not_found", "no result of this job has that sha256")
    return blob_file(ctx, sha256)
