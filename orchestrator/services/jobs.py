"""What a customer (or an operator) asks about jobs: submit one backed by an on-chain escrow,
cancel it (running or not: verified work is paid, the rest refunded), and read its status and
results.

Each function is one request's use case: it commits what it changes and returns a plain
result; refusals are typed (`Missing`, `Forbidden`, `Unfunded`, `Refused`) and the API gives
them their status.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from orchestrator.db import blobs as blob_db
from orchestrator.db import jobs as job_db
from orchestrator.db import leases as lease_db
from orchestrator.db import nodes as node_db
from orchestrator.db import session as db_session
from orchestrator.db import statuses as status_db
from orchestrator.db import verification as verification_db
from orchestrator.db.models import Blob, Job, Task
from orchestrator.domain.chain_views import EscrowedJob, EscrowStatus
from orchestrator.domain.errors import Forbidden, Invalid, Missing, Refused, Unfunded
from orchestrator.domain.ids import JobId, hex0x
from orchestrator.domain.jobs import NewJob, input_blobs, pack_of, split_tasks
from orchestrator.domain.lifecycle import (
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    JobStatus,
    TaskStatus,
    VerificationStatus,
)
from orchestrator.domain.matching import eligible
from orchestrator.domain.types import TaskNeeds
from orchestrator.services import settlement


@dataclass(frozen=True, slots=True)
class JobView:
    job_id: str
    status: str
    customer: str
    amount: int
    tasks: dict[str, int]  # task status -> how many
    merkle_root: str | None
    reason: str | None = None  # why a job stopped (failed, cancelled, expired)
    warning: str | None = None  # why a funded job may never start (no node can take it)


def stop_reason(session: Session, job: Job) -> str | None:
    """Why a failed, cancelled or expired job stopped (its last move's reason); None for a
    job that did not stop."""
    if job.status not in settlement.STOPPED:
        return None
    history = status_db.status_history(session, entity="job", entity_id=job.id)
    return history[-1].reason if history else None


def unplaceable(session: Session, job: Job) -> str | None:
    """Why no node can take a job waiting for its first placement (`no_node_for`); None
    when one can, or the job is past waiting."""
    if job.status != JobStatus.FUNDED.value:
        return None
    reason = no_node_for(session, job_db.needs_from_json(
        job_db.job_tasks(session, job_id=job.id)[0].needs))
    return None if reason is None else (f"{reason}: it waits until one registers; "
                                        "`mesh job cancel` refunds its escrow at once")


def no_node_for(session: Session, needs: TaskNeeds) -> str | None:
    """Why no node can take tasks of these needs (no registered node that accepts work fits
    them, e.g. they name providers with no nodes); None when one can."""
    if any(not node.draining and eligible(node_db.node_spec(node), needs)
           for node in node_db.all_nodes(session)):
        return None
    restricted = (f" among providers {', '.join(sorted(needs.providers))}"
                  if needs.providers is not None else "")
    return f"no registered node{restricted} can take this job"


def view(session: Session, job: Job) -> JobView:
    return JobView(job_id=job.id, status=job.status, customer=job.customer, amount=job.amount,
                   tasks=job_db.task_counts(session, job_id=job.id), merkle_root=job.merkle_root,
                   reason=stop_reason(session, job), warning=unplaceable(session, job))


def job_named(session: Session, *, job_id: str) -> Job:
    try:
        key = JobId(job_id)
    except ValueError:
        raise Missing("job_not_found", f"no job {job_id}") from None
    job = job_db.get_job(session, job_id=key)
    if job is None:
        raise Missing("job_not_found", f"no job {job_id}")
    return job


def status(session: Session, *, job_id: str) -> JobView:
    return view(session, job_named(session, job_id=job_id))


@dataclass(frozen=True, slots=True)
class Submission:
    """A customer's signed job, as the API validated it."""

    job_id: str
    customer: str
    spec: dict[str, Any]  # the spec as JSON, stored as sent
    spec_hash: bytes  # the spec's canonical hash, which the escrow must name
    deadline: float
    needs: TaskNeeds  # per task; `value` is set here from the escrowed amount
    idempotency_key: str
    request_hash: str  # of the whole request: a reused key must name the same request


def customer_jobs(session: Session, *, customer: str, limit: int) -> list[JobView]:
    """The customer's newest jobs (at most `limit`), newest first."""
    return [view(session, job) for job in job_db.customer_jobs(session, customer=customer,
                                                                  limit=limit)]


def submit(session: Session, *, job: Submission,
           read_escrow: Callable[[bytes], EscrowedJob | None], now: float) -> JobView:
    """Create the job and its tasks once its funded escrow matches (customer, spec hash, a
    non-zero amount); a retry with the same idempotency key gets the same job back. The chain
    is read only when the job is new."""
    seen = job_db.find_idempotent_job(session, principal=job.customer, key=job.idempotency_key)
    if seen is not None:
        if seen.request_hash != job.request_hash:
            raise Refused("idempotency_key_reused", "this key was used for another job")
        return status(session, job_id=seen.job_id)
    if job.deadline <= now:  # funded, it would only wait for its reclaim
        raise Invalid("deadline_passed", f"the spec's deadline {job.deadline:.0f} is not in "
                      "the future; escrow the job again with a later deadline")
    job_id = JobId(job.job_id)
    if job_db.get_job(session, job_id=job_id) is not None:
        raise Refused("job_exists", "a job with this id was already submitted")
    payloads = split_tasks(job.spec["workload"])
    inputs = set().union(*(input_blobs(payload) for payload in payloads),
                         set(pack_of(job.spec).values()))
    uploader = blob_db.wallet_uploader(job.customer)
    missing = sorted(inputs - blob_db.uploaded(session, uploader=uploader, hashes=inputs,
                                               now=now))
    if missing:
        raise Invalid("input_not_uploaded", f"the job's input {missing[0]} was not uploaded by "
                      f"{job.customer}: upload it first (mesh job submit does)")
    escrowed = read_escrow(job_id.raw)
    if escrowed is None or escrowed.status != EscrowStatus.FUNDED:
        raise Unfunded("escrow_missing", "no funded escrow for this job id on chain")
    if escrowed.customer != job.customer:
        raise Forbidden("escrow_customer_mismatch", "the escrow belongs to another customer")
    if escrowed.spec_hash != job.spec_hash:
        raise Refused("spec_hash_mismatch", "the escrowed spec hash differs from this spec")
    if escrowed.amount <= 0:
        raise Unfunded("escrow_empty", "the escrow holds no funds")
    blob_db.claim_uploads(session, uploader=uploader, hashes=inputs)
    needs = replace(job.needs, value=escrowed.amount // len(payloads))  # prices collateral
    created = job_db.create_job(session, NewJob(
        job_id=job_id, customer=job.customer, spec=job.spec, spec_hash=hex0x(job.spec_hash),
        amount=escrowed.amount, deadline=job.deadline, needs=needs, payloads=tuple(payloads)),
        now=now)
    status_db.set_job_status(session, job=created, target=JobStatus.FUNDED, now=now,
                        reason=f"escrow of {escrowed.amount} seen on chain")
    job_db.save_idempotency_key(session, principal=job.customer, key=job.idempotency_key,
                              request_hash=job.request_hash, job_id=job_id, now=now)
    db_session.commit_or_conflict(session)
    return view(session, created)


def cancel(session: Session, *, job_id: str, customer: str, now: float) -> JobView:
    """The customer stops a job, started or not: leases are released (each agent learns it on
    its next call, which finds its lease gone, and abandons the task), unfinished tasks fail,
    open re-checks are void, and the settlement is queued: verified tasks paid, the rest of
    the escrow refunded (`settlement.queue_refund`; the whole escrow at once when nothing was
    verified). A job already stopped (failed, expired, cancelled) is refunded the same way,
    once; one whose every task is done (verifying, settling, settled) cannot be cancelled:
    its results are being checked and paid."""
    job = _customer_job(session, job_id=job_id, customer=customer)
    locked = job_db.lock_job(session, job_id=job.id)
    assert locked is not None
    job = locked
    if job.status not in settlement.STOPPED:
        if JobStatus.CANCELLED not in JOB_TRANSITIONS[JobStatus(job.status)]:
            raise Refused("job_not_cancellable",
                          f"the job is {job.status}: every task is done, so it is "
                          "verified and paid as delivered; it cannot be cancelled")
        _stop_tasks(session, job=job, now=now)
        status_db.set_job_status(session, job=job, target=JobStatus.CANCELLED, now=now,
                                 reason="cancelled by its customer")
    settlement.queue_refund(session, job=job, now=now)
    db_session.commit_or_conflict(session)
    return view(session, job)


def _stop_tasks(session: Session, *, job: Job, now: float) -> None:
    """Release every live lease of the job, fail its unfinished tasks and void the re-checks
    of its undecided results (a done task keeps its result, paid if it verified)."""
    undecided = {VerificationStatus.COMMITTED.value, VerificationStatus.CHECKING.value,
                 VerificationStatus.DISPUTED.value}
    for row in verification_db.latest_commitments(session, job_id=job.id).values():
        if row.status in undecided:
            verification_db.void_open_checks(session, commitment=row, now=now,
                                             reason="job cancelled by its customer")
    for task in job_db.job_tasks(session, job_id=job.id):
        lease = lease_db.live_lease_for_task(session, task_id=task.id)
        if lease is not None:
            lease_db.release_lease(session, lease=lease, now=now, reason="job cancelled")
        if (task.status != TaskStatus.DONE.value
                and TaskStatus.FAILED in TASK_TRANSITIONS[TaskStatus(task.status)]):
            status_db.set_task_status(session, task=task, target=TaskStatus.FAILED, now=now,
                                      reason="job cancelled by its customer")


def _customer_job(session: Session, *, job_id: str, customer: str) -> Job:
    job = job_named(session, job_id=job_id)
    if job.customer != customer:
        raise Forbidden("job_not_owned", "this job belongs to another customer")
    return job


@dataclass(frozen=True, slots=True)
class JobResults:
    job_id: str
    status: str
    complete: bool  # every task done or verified
    results: Sequence[tuple[Task, Blob]]  # each task's result so far


def results(session: Session, *, job_id: str, customer: str) -> JobResults:
    """The job's results so far, for its customer only."""
    job = _customer_job(session, job_id=job_id, customer=customer)
    found = blob_db.job_results(session, job_id=job.id)
    tasks = job_db.task_counts(session, job_id=job.id)
    unfinished = sum(count for status, count in tasks.items()
                     if status not in (TaskStatus.DONE.value, TaskStatus.VERIFIED.value))
    return JobResults(job_id=job.id, status=job.status, complete=unfinished == 0,
                      results=found)


def check_result(session: Session, *, job_id: str, customer: str, sha256: str) -> None:
    """Refuse unless `sha256` is a result of the customer's job."""
    job = _customer_job(session, job_id=job_id, customer=customer)
    if all(blob.sha256 != sha256 for _, blob in blob_db.job_results(session, job_id=job.id)):
        raise Missing("result_not_found", "no result of this job has that sha256")
