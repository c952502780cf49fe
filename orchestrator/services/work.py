"""Work: what happens to tasks, leases and jobs as nodes pull, run, checkpoint, finish and
vanish; a verified job accepted (its settlement queued, each task's attempt a completed
outcome for PLS); and the failure/lease sweep handed on to PLS, each with its metrics and
logs. Routes and the leader's periodic jobs share them.

Each function is one transaction's worth of change on the caller's session; every status
move goes through the domain tables. Refusals are `WorkError` with a stable code.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from orchestrator.db import blobs as blob_db
from orchestrator.db import jobs as job_db
from orchestrator.db import leases as lease_db
from orchestrator.db import nodes as node_db
from orchestrator.db import statuses as status_db
from orchestrator.db.models import Job, Lease, Node, Task
from orchestrator.domain.errors import Invalid, NotFound, Refused
from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.domain.jobs import input_blobs, pack_of
from orchestrator.domain.lifecycle import (
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    JobStatus,
    LeaseState,
    TaskStatus,
)
from orchestrator.domain.matching import eligible
from orchestrator.domain.reliability import TaskOutcome
from orchestrator.domain.types import NodeHealth
from orchestrator.services import settlement
from orchestrator.services.pls import PlsService
from orchestrator.services.pls_ingest import SweepFacts
from orchestrator.telemetry.metrics import MeshMetrics

log = logging.getLogger("orchestrator")

MAX_ATTEMPTS = 5  # placements per task before it fails for good


class WorkError(Refused):
    """A node's report the work rules refuse; `code` is the stable machine-readable name."""


class WorkNotFound(WorkError, NotFound):
    """The task or blob a report names does not exist."""


@dataclass(frozen=True, slots=True)
class RecoveryRecord:
    task_id: int
    seconds: float  # death/drain -> running elsewhere
    rework: float


@dataclass(frozen=True, slots=True)
class Started:
    """A lease a progress report started (its reservation taken up by the node)."""

    waited_s: float | None  # the task ready -> this start; None for a lease taken back
    recovery: RecoveryRecord | None  # the task resumed after a death, drain or lapse


MAX_MANIFEST_BYTES = 1 << 20


def readable_blobs(session: Session, *, node_id: str) -> set[str]:
    """Blobs a node may download, all of them assigned by the service: for each task it holds
    a live lease on, the task's inputs (.blend and its job's pack, command input), its latest
    checkpoint, and the parts recorded for that checkpoint when it was taken
    (`add_checkpoint`). What a manifest says when read later is never trusted."""
    readable: set[str] = set()
    for lease in lease_db.live_leases(session, node_id=node_id):
        task = job_db.get_task(session, task_id=lease.task_id)
        if task is None:
            continue
        readable.update(input_blobs(task.payload))
        job = job_db.get_job(session, job_id=task.job_id)
        if job is not None:
            readable |= set(pack_of(job.spec).values())
        if task.checkpoint_sha256 is not None:
            readable.add(task.checkpoint_sha256)
            readable |= blob_db.checkpoint_parts(session, task_id=task.id,
                                                 sha256=task.checkpoint_sha256)
    return readable


def manifest_parts(sha256: str, *, read: Callable[[str], bytes],
                   size_of: Callable[[str], int]) -> set[str]:
    """The parts a checkpoint names when it is a manifest (`{"chunks": [{"sha256": ...}]}`,
    how the agent checkpoints sample chunks inside a frame); none when it is not one."""
    try:
        if size_of(sha256) > MAX_MANIFEST_BYTES:
            return set()
        chunks = json.loads(read(sha256)).get("chunks", [])
        return {str(chunk["sha256"]) for chunk in chunks}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return set()  # a checkpoint that is not a manifest names no parts


def own_blobs(session: Session, *, node_id: str, named: set[str], carried: set[str],
              now: float) -> None:
    """Refuse unless every blob in `named` is stored and was uploaded by the node, or is in
    `carried` (what earlier checkpoints of the same task recorded); the node's uploads named
    are claimed (kept, no longer counted as unclaimed)."""
    uploader = blob_db.node_uploader(node_id)
    owned = blob_db.uploaded(session, uploader=uploader, hashes=named - carried, now=now)
    for sha256 in sorted(named):
        if blob_db.get_blob(session, sha256=sha256) is None:
            raise WorkNotFound("blob_missing", f"upload blob {sha256} first")
        if sha256 not in owned and sha256 not in carried:
            raise Invalid("blob_not_uploaded", f"blob {sha256} was not uploaded by node "
                          f"{node_id}: a node names only blobs it uploaded")
    blob_db.claim_uploads(session, uploader=uploader, hashes=owned)


def held_lease(session: Session, *, task_id: int, node_id: str) -> tuple[Task, Lease]:
    task = job_db.get_task(session, task_id=task_id)
    if task is None:
        raise WorkNotFound("task_not_found", f"no task {task_id}")
    lease = lease_db.live_lease_for_task(session, task_id=task_id)
    if lease is None or lease.node_id != node_id:
        raise WorkError("lease_not_held", f"node {node_id} holds no live lease on task {task_id}")
    return task, lease


def report_progress(session: Session, *, task_id: int, node_id: str, progress: float,
                    now: float, lease_ttl_s: float) -> tuple[Task, Started | None]:
    """The first report starts the task (reserved -> running); every report renews the lease.
    Says what it started, if it started a lease."""
    task, lease = held_lease(session, task_id=task_id, node_id=node_id)
    started = None
    if lease.state == LeaseState.RESERVED.value:  # a new placement, or one taken back
        waited_s: float | None = None
        recovery: RecoveryRecord | None = None
        if task.status == TaskStatus.RESERVED.value:
            waited_s = now - status_db.ready_since(session, task=task)
            status_db.set_task_status(session, task=task, target=TaskStatus.RUNNING, now=now,
                                 reason=f"started on {node_id}")
            job = job_db.get_job(session, job_id=task.job_id)
            assert job is not None
            if job.status == JobStatus.SCHEDULED.value:
                status_db.set_job_status(session, job=job, target=JobStatus.RUNNING, now=now,
                                    reason="first task started")
        lease_db.activate_lease(session, lease=lease)
        event = lease_db.open_recovery(session, task_id=task.id)
        if event is not None:
            event.resumed_at = now
            event.resumed_on = node_id
            recovery = RecoveryRecord(task.id, now - event.lost_at, event.rework)
        started = Started(waited_s, recovery)
    task.progress = max(task.progress, progress)
    task.node_id = node_id
    lease.expires_at = now + lease_ttl_s
    return task, started


def add_checkpoint(session: Session, *, task_id: int, node_id: str, sha256: str,
                   progress: float, read: Callable[[str], bytes],
                   size_of: Callable[[str], int], now: float) -> Task:
    """Record the node's checkpoint of the task it runs, with the parts its manifest names:
    each the node's own upload or carried from an earlier checkpoint of the task (`own_blobs`);
    the node that resumes the task may read exactly these."""
    task, _ = held_lease(session, task_id=task_id, node_id=node_id)
    if task.status != TaskStatus.RUNNING.value:
        raise WorkError("task_not_running", "checkpoints are taken while running")
    if blob_db.get_blob(session, sha256=sha256) is None:
        raise WorkNotFound("blob_missing", "upload the checkpoint blob first")
    parts = manifest_parts(sha256, read=read, size_of=size_of)
    own_blobs(session, node_id=node_id, named={sha256, *parts},
              carried=blob_db.task_checkpoint_blobs(session, task_id=task.id), now=now)
    blob_db.add_checkpoint(session, task=task, node_id=node_id, sha256=sha256, progress=progress,
                           is_result=False, now=now, parts=parts)
    return task


def complete_task(session: Session, *, task_id: int, node_id: str, result_sha256: str,
                  now: float, report_chunks: Sequence[str] = ()) -> Task:
    """The node delivers the task's result (its own upload), with the chunks its render
    report names (its own uploads or carried from the task's checkpoints)."""
    task, lease = held_lease(session, task_id=task_id, node_id=node_id)
    if blob_db.get_blob(session, sha256=result_sha256) is None:
        raise WorkNotFound("blob_missing", "upload the result blob first")
    own_blobs(session, node_id=node_id, named={result_sha256, *report_chunks},
              carried=blob_db.task_checkpoint_blobs(session, task_id=task.id), now=now)
    status_db.set_task_status(session, task=task, target=TaskStatus.DONE, now=now,
                         reason=f"completed on {node_id}")
    blob_db.add_checkpoint(session, task=task, node_id=node_id, sha256=result_sha256, progress=1.0,
                        is_result=True, now=now)
    lease_db.release_lease(session, lease=lease, now=now, reason="completed")
    session.flush()
    # Locked before counting: the last two tasks completed at once (two replicas) would each
    # see the other's still running, and the job would never move to verifying.
    job = job_db.lock_job(session, job_id=task.job_id)
    assert job is not None
    counts = job_db.task_counts(session, job_id=job.id)
    if set(counts) == {TaskStatus.DONE.value}:
        job.merkle_root = settlement.job_merkle_root(session, job_id=job.id)
        status_db.set_job_status(session, job=job, target=JobStatus.VERIFYING, now=now,
                            reason="all tasks done")
    return task


def fail_task(session: Session, *, task_id: int, node_id: str, reason: str, now: float,
              message: str = "") -> Task:
    """start_failed: the slot is freed at once; drain: the task moves (after its checkpoint);
    error: retried elsewhere until the attempt budget is spent. The node's `message` (what
    went wrong, in its words) goes into the task's history and, when the task fails for
    good, into its job's: the reason a customer is shown."""
    task, lease = held_lease(session, task_id=task_id, node_id=node_id)
    said = reported(node_id, message)
    if reason == "error" and task.attempts >= MAX_ATTEMPTS:
        lease_db.release_lease(session, lease=lease, now=now, reason="failed")
        status_db.set_task_status(session, task=task, target=TaskStatus.FAILED, now=now,
                             reason=f"failed {task.attempts} times{said}")
        job = job_db.get_job(session, job_id=task.job_id)
        assert job is not None
        if JobStatus.FAILED in JOB_TRANSITIONS[JobStatus(job.status)]:
            status_db.set_job_status(session, job=job, target=JobStatus.FAILED, now=now,
                                reason=f"frame task {task.index} failed {task.attempts} "
                                       f"times{said}")
            settlement.queue_refund(session, job=job, now=now)
        return task
    cause = "drain" if reason == "drain" else None
    requeue_task(session, task=task, lease=lease, now=now, reason=reason, cause=cause,
                 detail=said)
    return task


def reported(node_id: str, message: str) -> str:
    """A node's own words about a failure, as a suffix for a status reason: one line of
    printable text (a node is not trusted to format what a customer reads), named as its."""
    text = " ".join("".join(c if c.isprintable() else " " for c in message).split())[:300]
    return f"; node {node_id} reported: {text}" if text else ""


def drain_node(session: Session, *, node: Node, now: float) -> int:
    """No new leases; unstarted reservations go back at once. Running tasks keep their lease
    until the agent checkpoints and reports `fail(drain)`. Returns reservations released."""
    node_db.start_drain(session, node=node, now=now, reason="graceful drain requested")
    released = 0
    for lease in lease_db.live_leases(session, node_id=node.id):
        if lease.state == LeaseState.RESERVED.value:
            task = job_db.get_task(session, task_id=lease.task_id)
            assert task is not None
            requeue_task(session, task=task, lease=lease, now=now, reason="node draining",
                              cause=None)
            released += 1
    return released


def requeue_task(session: Session, *, task: Task, lease: Lease, now: float, reason: str,
                 cause: str | None, detail: str = "") -> None:
    """Free the slot and put the task back in line, resuming from its last checkpoint.
    `cause` (dead, drain, lapsed, restart) records a recovery event with the work lost;
    `detail` goes after `reason` in the task's history (the lease keeps the short reason)."""
    lease_db.release_lease(session, lease=lease, now=now, reason=reason)
    was_running = task.status == TaskStatus.RUNNING.value
    status_db.set_task_status(session, task=task, target=TaskStatus.RETRY, now=now,
                              reason=reason + detail)
    if cause is not None and was_running:
        lease_db.add_recovery_event(session, task_id=task.id, from_node=lease.node_id, cause=cause,
                                lost_at=now,
                                rework=max(task.progress - task.checkpoint_progress, 0.0))
    task.progress = task.checkpoint_progress
    task.node_id = None


@dataclass(frozen=True, slots=True)
class TakenBack:
    """What a node's new agent process found of its started tasks: offered to it again, or
    released because the node as it registered now cannot run them."""

    offered: list[int] = field(default_factory=list)  # task ids
    released: list[int] = field(default_factory=list)


def take_back_leases(session: Session, *, node: Node, now: float,
                     reservation_ttl_s: float) -> TakenBack:
    """The node's agent restarted (a login with a new session key): the old process and its
    work since the last checkpoint are gone, but the node is back, so it keeps its started
    leases, held through a lone silence or not, as a render grid wants: each goes back to
    reserved and the new process pulls it and resumes from the checkpoint, on the same slot
    and under the same collateral; the registration an agent sends before it logs in opened
    the node's new session, which ended a lone hold without an abandonment. A lease it can no
    longer run (its slot is gone, its spec no longer fits the task, it drains) is released
    to be placed again at once. A lease already past its expiry is left to the sweep: a lone
    hold that lapsed is an abandonment whoever comes back."""
    spec = node_db.node_spec(node)
    taken = TakenBack()
    for lease in lease_db.live_leases(session, node_id=node.id):
        if lease.state != LeaseState.ACTIVE.value or lease.expires_at <= now:
            continue
        task = job_db.get_task(session, task_id=lease.task_id)
        assert task is not None
        fits = (not node.draining and lease.slot < node.slots
                and eligible(spec, job_db.needs_from_json(task.needs)))
        if not fits:
            requeue_task(session, task=task, lease=lease, now=now,
                         reason="node restarted, cannot take it back", cause="restart")
            taken.released.append(task.id)
            continue
        lease_db.add_recovery_event(session, task_id=task.id, from_node=node.id, cause="restart",
                                lost_at=now,
                                rework=max(task.progress - task.checkpoint_progress, 0.0))
        task.progress = task.checkpoint_progress
        lease_db.reserve_again(session, lease=lease, now=now, ttl_s=reservation_ttl_s)
        taken.offered.append(task.id)
    if taken.offered or taken.released:
        log.warning("node %s restarted: tasks %s offered again, %s released", node.id,
                    taken.offered, taken.released)
    return taken


def revoke_node_leases(session: Session, *, node_id: str, now: float, cause: str) -> int:
    """Move every task off a dead or drained node; returns how many moved."""
    moved = 0
    for lease in lease_db.live_leases(session, node_id=node_id):
        task = job_db.get_task(session, task_id=lease.task_id)
        assert task is not None
        requeue_task(session, task=task, lease=lease, now=now, reason=f"node {cause}", cause=cause)
        moved += 1
    return moved


@dataclass(frozen=True, slots=True)
class Expired:
    """What `expire_leases` released."""

    leases: int
    failed_starts: list[tuple[str, int]]  # (node id, task id) of reservations never started


def expire_leases(session: Session, *, now: float) -> Expired:
    """Release reservations never started (`START_LAPSED`: a failed start, the node gets no
    placement until it is heard from again, `db.placement.load_slot_view`, and the sweep tells
    PLS, `PlsIngest.after_sweep`) and running leases whose renewals stopped (cause "dead" when
    the node is DEAD: a lease held through a silence that did not end)."""
    expired = lease_db.lapsed_leases(session, now=now)
    failed_starts: list[tuple[str, int]] = []
    for lease in expired:
        task = job_db.get_task(session, task_id=lease.task_id)
        assert task is not None
        node = node_db.get_node(session, node_id=lease.node_id)
        dead = node is not None and node.health == NodeHealth.DEAD.value
        unstarted = lease.state == LeaseState.RESERVED.value
        if unstarted:
            failed_starts.append((lease.node_id, lease.task_id))
        requeue_task(session, task=task, lease=lease, now=now,
                     reason=lease_db.START_LAPSED if unstarted else "lease lapsed",
                     cause="dead" if dead else "lapsed")
    return Expired(len(expired), failed_starts)


@dataclass(frozen=True, slots=True)
class SweepResult:
    expired_leases: int
    dead_nodes: list[str]
    revoked: int
    draining_dead: set[str] = field(default_factory=set)  # of dead_nodes: a graceful end
    abandoned: list[tuple[str, int]] = field(default_factory=list)  # (node, started task) lost
    returned: list[str] = field(default_factory=list)  # dead nodes heard from again
    held: list[str] = field(default_factory=list)  # of dead_nodes: leases kept, not revoked
    failed_starts: list[tuple[str, int]] = field(default_factory=list)  # (node, task) lapsed


LeaseHolds = Callable[[Sequence[str], float], Mapping[str, float]]
"""Nodes just called DEAD (not draining) -> seconds (> 0) to keep the leases of those whose
leases are held; the rest are revoked (`PlsIngest.lease_holds`)."""


def _reconcile(session: Session, *, detector: PhiAccrualDetector, now: float,
               lease_holds: LeaseHolds | None) -> SweepResult:
    """One reconcile pass: sync heartbeats from the DB into the detector (any replica may have
    received them), act on its verdicts, then release lapsed leases. A node just called DEAD
    loses its leases at once unless `lease_holds` keeps them for a while (a silence its peers
    share); a held lease lapses like any other if the node stays silent."""
    nodes = node_db.all_nodes(session)
    for node in nodes:
        if node.last_heartbeat_at is not None:
            detector.heartbeat(node.id, node.last_heartbeat_at)
    verdicts = {node.id: detector.health(node.id, now) for node in nodes if node.id in detector}
    dead = [node.id for node in nodes if verdicts.get(node.id) is NodeHealth.DEAD
            and node.health != NodeHealth.DEAD.value]
    newly_dead = set(dead)
    holds = (lease_holds([node.id for node in nodes if node.id in newly_dead and not node.draining],
                         now) if lease_holds is not None and dead else {})
    revoked = 0
    abandoned: list[tuple[str, int]] = []
    returned: list[str] = []
    held: list[str] = []
    for node in nodes:
        verdict = verdicts.get(node.id)
        if verdict is None:
            continue
        if node.id in newly_dead:
            if node.id in holds:
                lease_db.hold_node_leases(session, node_id=node.id, until=now + holds[node.id])
                held.append(node.id)
            else:
                abandoned.extend((node.id, lease.task_id)
                                 for lease in lease_db.live_leases(session, node_id=node.id)
                                 if lease.state == LeaseState.ACTIVE.value)
                revoked += revoke_node_leases(session, node_id=node.id, now=now,
                                                   cause="dead")
        elif verdict is not NodeHealth.DEAD and node.health == NodeHealth.DEAD.value:
            returned.append(node.id)
        node_db.set_node_health(session, node=node, health=verdict, now=now, reason="detector")
    expired = expire_leases(session, now=now)
    expire_overdue_jobs(session, now=now)
    draining = {node.id for node in nodes if node.draining}
    return SweepResult(expired_leases=expired.leases, dead_nodes=dead, revoked=revoked,
                       draining_dead=draining & newly_dead, abandoned=abandoned,
                       returned=returned, held=held, failed_starts=expired.failed_starts)


OPEN_JOB_STATUSES = (JobStatus.SUBMITTED, JobStatus.FUNDED, JobStatus.SCHEDULED, JobStatus.RUNNING)


def expire_overdue_jobs(session: Session, *, now: float) -> list[str]:
    """Jobs past their deadline stop: leases are released and unfinished tasks fail, so no
    slot stays held for work nobody will pay for; verified work is paid and the rest of the
    escrow refunded (`settlement.queue_refund`)."""
    overdue = job_db.jobs_in_status(session, statuses=OPEN_JOB_STATUSES, deadline_before=now)
    for job in overdue:
        for task in job_db.job_tasks(session, job_id=job.id):
            if TaskStatus.FAILED not in TASK_TRANSITIONS[TaskStatus(task.status)]:
                continue
            lease = lease_db.live_lease_for_task(session, task_id=task.id)
            if lease is not None:
                lease_db.release_lease(session, lease=lease, now=now, reason="job expired")
            status_db.set_task_status(session, task=task, target=TaskStatus.FAILED, now=now,
                                 reason="job deadline passed")
        status_db.set_job_status(session, job=job, target=JobStatus.EXPIRED, now=now,
                            reason="deadline passed")
        settlement.queue_refund(session, job=job, now=now)
    return [job.id for job in overdue]


# ---------------------------------------------------------------- composed with PLS


@dataclass(frozen=True, slots=True)
class Grant:
    """A lease a node pulled, its task, and the checkpoint interval PLS sets for it."""

    lease: Lease
    task: Task
    checkpoint_interval_s: float


def pull_lease(session: Session, *, node_id: str, pls: PlsService, now: float) -> Grant | None:
    """The node's oldest reservation it has not started (placed by the placement pass,
    `services.placement`, or offered back after a restart), or None."""
    lease = lease_db.oldest_reservation(session, node_id=node_id)
    if lease is None:
        return None
    task = job_db.get_task(session, task_id=lease.task_id)
    if task is None:
        raise RuntimeError(f"lease {lease.id} names a task that does not exist")
    interval = pls.placement.checkpoint_interval_s(
        node_id, now, job_db.needs_from_json(task.needs).expected_duration_s)
    return Grant(lease, task, interval)


def accept_job(session: Session, *, job: Job, pls: PlsService, now: float) -> None:
    """Verified: queue the settlement (exactly once) and tell PLS every placed task finished."""
    settlement.queue_settlement(session, job=job, now=now)
    for task in job_db.job_tasks(session, job_id=job.id):
        if task.node_id is not None:
            pls.ingest.task_outcome(session, node_id=task.node_id, task_id=task.id,
                                    outcome=TaskOutcome.COMPLETED, now=now)


def sweep_facts(result: SweepResult) -> SweepFacts:
    """A drained node left cleanly and a held one went silent with its peers (`LeaseHold`):
    neither session ends in a departure of the node's own."""
    own = set(result.dead_nodes) - result.draining_dead - set(result.held)
    return SweepFacts(dead=[(node_id, node_id in own) for node_id in result.dead_nodes],
                      abandoned=result.abandoned, returned=result.returned, held=result.held,
                      failed_starts=result.failed_starts)


def sweep(session: Session, *, detector: PhiAccrualDetector, pls: PlsService,
          metrics: MeshMetrics, now: float) -> SweepResult:
    """Expire lapsed leases, call silent nodes dead (keeping the leases of a shared silence),
    and tell PLS what happened."""
    result = _reconcile(session, detector=detector, now=now, lease_holds=pls.ingest.sweep_holds)
    pls.ingest.after_sweep(session, facts=sweep_facts(result), now=now)
    metrics.node_failures.inc(len(result.dead_nodes))
    metrics.retries.labels("lapsed").inc(result.expired_leases)
    metrics.retries.labels("dead").inc(result.revoked)
    if result.dead_nodes:
        log.warning("nodes declared dead: %s (%d tasks moved)", result.dead_nodes,
                    result.revoked)
    return result
