"""Job submission (signed by the customer, backed by an on-chain escrow) and status."""

from __future__ import annotations

from typing import Annotated, Any

from eth_utils import keccak, to_checksum_address
from fastapi import APIRouter, Header
from fastapi.responses import FileResponse

from orchestrator.api.deps import CtxDep, EscrowDep, NonceAfterValidation, SessionDep, SignedDep
from orchestrator.api.errors import errors
from orchestrator.api.routes.blobs import blob_file
from orchestrator.api.schemas import (
    JobIdPath,
    JobNeeds,
    JobOut,
    JobSubmission,
    QuoteIn,
    QuoteOut,
    ResultOut,
    ResultsOut,
    Sha256Path,
)
from orchestrator.domain.errors import Forbidden, Missing, Refused, Unfunded
from orchestrator.domain.ids import hex0x
from orchestrator.domain.types import TaskNeeds
from orchestrator.services import jobs, quotes
from orchestrator.services.jobs import JobView, Submission

router = APIRouter(tags=["jobs"], route_class=NonceAfterValidation)
CUSTOMER_JOBS_LISTED = 200
IdempotencyKey = Annotated[str, Header(min_length=8, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]


def job_out(job: JobView) -> JobOut:
    return JobOut(job_id=job.job_id, status=job.status, customer=job.customer,
                  amount=job.amount, tasks=job.tasks, merkle_root=job.merkle_root,
                  reason=job.reason, warning=job.warning)


def task_needs(needs: JobNeeds) -> TaskNeeds:
    """What each of a spec's tasks needs (its value is set from the escrowed amount)."""
    return TaskNeeds(
        min_vram_gb=needs.min_vram_gb,
        gpu_models=None if needs.gpu_models is None else frozenset(needs.gpu_models),
        regions=None if needs.regions is None else frozenset(needs.regions),
        providers=None if needs.providers is None
        else frozenset(to_checksum_address(p) for p in needs.providers),
        max_price_per_gpu_hour=needs.max_price_per_gpu_hour, priority=needs.priority,
        expected_duration_s=needs.expected_duration_s)


@router.post("/quotes", response_model=QuoteOut,
             summary="What a job would cost, when it would finish, how likely by its deadline "
                     "and the collateral providers would lock, on the grid as it is, before "
                     "anything is paid (public)")
def quote(body: QuoteIn, session: SessionDep, ctx: CtxDep) -> QuoteOut:
    found = quotes.quote(session, workload=body.spec.model_dump(mode="json")["workload"],
                         needs=task_needs(body.spec.needs), amount=body.amount,
                         deadline=float(body.spec.deadline), gate=ctx.pls.placement,
                         now=ctx.now())
    forecast = found.forecast
    return QuoteOut(
        tasks=found.tasks, eligible_nodes=found.eligible_nodes, warning=found.warning,
        nodes=0 if forecast is None else forecast.nodes,
        p_deadline=0.0 if forecast is None else forecast.p_deadline,
        **({} if forecast is None else {
            "price_min": forecast.price_min, "price_expected": forecast.price_expected,
            "price_max": forecast.price_max, "completion_s": forecast.completion_s,
            "collateral_min": forecast.collateral_min,
            "collateral_max": forecast.collateral_max,
            "collateral_total": forecast.collateral_total}))


@router.post("/jobs", response_model=JobOut,
             responses=errors(Refused, Unfunded, Forbidden),
             summary="Submit a job whose escrow is already funded on chain (signed)")
def submit(body: JobSubmission, signed: SignedDep, session: SessionDep, ctx: CtxDep,
           escrow: EscrowDep, idempotency_key: IdempotencyKey) -> JobOut:
    return job_out(jobs.submit(session, job=Submission(
        job_id=body.job_id, customer=signed.address, spec=body.spec.model_dump(mode="json"),
        spec_hash=body.spec.canonical_hash(), deadline=float(body.spec.deadline),
        needs=task_needs(body.spec.needs), idempotency_key=idempotency_key,
        request_hash=hex0x(keccak(body.model_dump_json().encode()))),
        read_escrow=lambda job_id: escrow().escrowed_job(job_id), now=ctx.now()))


@router.get("/jobs", response_model=list[JobOut],
            summary=f"The signing customer's newest {CUSTOMER_JOBS_LISTED} jobs, newest first "
                    "(signed)")
def customer_jobs(signed: SignedDep, session: SessionDep) -> list[JobOut]:
    return [job_out(job) for job in jobs.customer_jobs(
        session, customer=signed.address, limit=CUSTOMER_JOBS_LISTED)]


@router.get("/jobs/{job_id}", response_model=JobOut, responses=errors(Missing),
            summary="Job status and task counts")
def status(job_id: JobIdPath, session: SessionDep) -> JobOut:
    return job_out(jobs.status(session, job_id=job_id))


@router.post("/jobs/{job_id}/cancel", response_model=JobOut,
             responses=errors(Missing, Forbidden, Refused),
             summary="Stop a job, started or not, and settle it: verified tasks paid, the rest "
                     "refunded (signed, the job's customer only)")
def cancel(job_id: JobIdPath, signed: SignedDep, session: SessionDep, ctx: CtxDep) -> JobOut:
    return job_out(jobs.cancel(session, job_id=job_id, customer=signed.address, now=ctx.now()))


def result_name(payload: dict[str, Any], index: int) -> str:
    if payload.get("kind") == "blender":
        frame, tile = int(payload["frame"]), int(payload.get("tile", 0))
        tiles = int(payload.get("tiles", 1))
        suffix = "exr" if payload.get("format") == "exr" else "png"
        return (f"frame-{frame:04d}.{suffix}" if tiles == 1
                else f"frame-{frame:04d}-tile-{tile:02d}.{suffix}")
    return f"shard-{index:04d}.tar"


@router.get("/jobs/{job_id}/results", response_model=ResultsOut,
            responses=errors(Missing, Forbidden),
            summary="The job's results so far: one content-addressed file per task (signed, "
                    "the job's customer only)")
def results(job_id: JobIdPath, signed: SignedDep, session: SessionDep) -> ResultsOut:
    found = jobs.results(session, job_id=job_id, customer=signed.address)
    return ResultsOut(job_id=found.job_id, status=found.status, complete=found.complete, results=[
        ResultOut(task_id=task.id, name=result_name(task.payload, task.index),
                  sha256=blob.sha256, size=blob.size, frame=task.payload.get("frame"),
                  tile=task.payload.get("tile"), tiles=task.payload.get("tiles"))
        for task, blob in found.results])


@router.get("/jobs/{job_id}/results/{sha256}", response_class=FileResponse,
            responses=errors(Missing, Forbidden),
            summary="Download one result of the job (signed, the job's customer only)")
def download_result(job_id: JobIdPath, sha256: Sha256Path, signed: SignedDep, session: SessionDep,
                    ctx: CtxDep) -> FileResponse:
    jobs.check_result(session, job_id=job_id, customer=signed.address, sha256=sha256)
    return blob_file(ctx, sha256)
