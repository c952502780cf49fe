"""Keyword-only data access (FastAPI full-stack template style). Every status change goes
through the domain transition table and lands in `status_history` in the same transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from eth_utils import to_checksum_address
from sqlalchemy import delete, func, insert, or_, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    Blob,
    Checkpoint,
    IdempotencyKey,
    Job,
    LeaderLock,
    Lease,
    Node,
    Provider,
    RecoveryEvent,
    StatusHistory,
    Task,
    UsedNonce,
)
from orchestrator.domain.errors import DomainError
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import (
    JobStatus,
    LeaseState,
    NodeDrain,
    StatusChange,
    TaskStatus,
    job_transition,
    lease_transition,
    node_drain_transition,
    node_health_transition,
    task_transition,
)
from orchestrator.domain.types import NodeHealth, NodeSpec, Priority, TaskNeeds, Tier


class Conflict(DomainError):
    """A concurrent request wrote the same row first; the client may retry."""

    code = "conflict"


def commit_or_conflict(session: Session) -> None:
    """Commit; a unique-key race with another request becomes a 409, never a 500."""
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise Conflict("a concurrent request changed the same record; retry") from None


# ---------------------------------------------------------------- status history


def record_change(session: Session, *, entity_id: str, change: StatusChange) -> None:
    session.add(StatusHistory(entity=change.kind, entity_id=entity_id,
                              from_status=change.from_status, to_status=change.to_status,
                              at=change.at, reason=change.reason))


def set_job_status(session: Session, *, job: Job, target: JobStatus, now: float,
                   reason: str) -> None:
    change = job_transition(JobStatus(job.status), target, at=now, reason=reason)
    job.status = target.value
    job.updated_at = now
    record_change(session, entity_id=job.id, change=change)


def set_task_status(session: Session, *, task: Task, target: TaskStatus, now: float,
                    reason: str) -> None:
    change = task_transition(TaskStatus(task.status), target, at=now, reason=reason)
    task.status = target.value
    task.updated_at = now
    record_change(session, entity_id=str(task.id), change=change)


def status_history(session: Session, *, entity: str, entity_id: str) -> list[StatusHistory]:
    return list(session.scalars(
        select(StatusHistory).where(StatusHistory.entity == entity,
                                    StatusHistory.entity_id == entity_id)
        .order_by(StatusHistory.id)))


# ---------------------------------------------------------------- providers and nodes


def register_node(session: Session, *, spec: NodeSpec, now: float) -> Node:
    """Create the node (and its provider on first sight); re-registering updates the spec."""
    if session.get(Provider, spec.provider) is None:
        session.add(Provider(address=spec.provider, created_at=now))
        session.flush()
    node = session.get(Node, spec.node_id)
    if node is None:
        # The tier is set once: re-registering must not undo a demotion.
        node = Node(id=spec.node_id, registered_at=now, draining=False,
                    health=NodeHealth.ALIVE.value, tier=int(spec.tier))
        session.add(node)
    node.provider = spec.provider
    node.gpu_model = spec.gpu_model
    node.vram_gb = spec.vram_gb
    node.compute_capability = spec.compute_capability
    node.region = spec.region
    node.price_per_gpu_hour = spec.price_per_gpu_hour
    node.slots = spec.slots
    node.last_heartbeat_at = now
    session.flush()
    return node


def node_spec(node: Node) -> NodeSpec:
    return NodeSpec(node_id=node.id, provider=node.provider, gpu_model=node.gpu_model,
                    vram_gb=node.vram_gb, compute_capability=node.compute_capability,
                    region=node.region, price_per_gpu_hour=node.price_per_gpu_hour,
                    slots=node.slots, tier=Tier(node.tier))


def get_node(session: Session, *, node_id: str) -> Node | None:
    return session.get(Node, node_id)


def all_nodes(session: Session) -> list[Node]:
    return list(session.scalars(select(Node)))


def bind_session_key(session: Session, *, node: Node, session_key: str) -> None:
    """Record the session key a node's login named (checksummed, as signers recover)."""
    node.session_key = to_checksum_address(session_key)
    session.flush()


def set_node_health(session: Session, *, node: Node, health: NodeHealth, now: float,
                    reason: str) -> None:
    """Move the node's health along `NODE_HEALTH_TRANSITIONS` (the same verdict is no move)."""
    if node.health == health.value:
        return
    change = node_health_transition(NodeHealth(node.health), health, at=now, reason=reason)
    record_change(session, entity_id=node.id, change=change)
    node.health = health.value


def start_drain(session: Session, *, node: Node, now: float, reason: str) -> bool:
    """accepting -> draining (`NODE_DRAIN_TRANSITIONS`); False when it already drains."""
    if node.draining:
        return False
    record_change(session, entity_id=node.id, change=node_drain_transition(
        NodeDrain.ACCEPTING, NodeDrain.DRAINING, at=now, reason=reason))
    node.draining = True
    return True


def touch_heartbeats(session: Session, *, beats: dict[str, float], lease_ttl_s: float) -> None:
    """Apply a batch of heartbeats: last-seen times and lease renewals in one transaction."""
    if not beats:
        return
    session.execute(update(Node), [{"id": node_id, "last_heartbeat_at": at}
                                   for node_id, at in beats.items()])
    latest = max(beats.values())
    # Only started leases are renewed: a reservation the node never starts must lapse even
    # while the node keeps beating, or a failed start would hold the slot forever.
    session.execute(update(Lease).where(Lease.node_id.in_(list(beats)),
                                        Lease.released_at.is_(None),
                                        Lease.state == LeaseState.ACTIVE.value)
                    .values(expires_at=latest + lease_ttl_s))


# ---------------------------------------------------------------- jobs and tasks


def needs_to_json(needs: TaskNeeds) -> dict[str, Any]:
    data = asdict(needs)
    for key in ("gpu_models", "regions", "providers", "excluded_providers"):
        if data[key] is not None:
            data[key] = sorted(data[key])
    data["priority"] = needs.priority.value
    return data


def needs_from_json(data: dict[str, Any]) -> TaskNeeds:
    return TaskNeeds(
        min_vram_gb=int(data.get("min_vram_gb", 0)),
        gpu_models=None if data.get("gpu_models") is None else frozenset(data["gpu_models"]),
        regions=None if data.get("regions") is None else frozenset(data["regions"]),
        providers=None if data.get("providers") is None else frozenset(data["providers"]),
        excluded_providers=frozenset(data.get("excluded_providers", ())),
        max_price_per_gpu_hour=data.get("max_price_per_gpu_hour"),
        priority=Priority(data.get("priority", Priority.NORMAL.value)),
        expected_duration_s=float(data.get("expected_duration_s", 60.0)),
        value=int(data.get("value", 0)),
        critical_path_s=float(data.get("critical_path_s", 0.0)),
    )


def create_job(session: Session, job: NewJob, *, now: float,
               status: JobStatus = JobStatus.SUBMITTED) -> Job:
    """Insert `job` and one pending task per payload; the history starts at `status`."""
    row = Job(id=job.job_id, customer=job.customer, status=status.value, spec=dict(job.spec),
              spec_hash=job.spec_hash, amount=job.amount, deadline=job.deadline,
              priority=job.needs.priority.value, created_at=now, updated_at=now)
    session.add(row)
    session.flush()
    session.add(StatusHistory(entity="job", entity_id=job.job_id, from_status=None,
                              to_status=status.value, at=now, reason="submitted"))
    needs_json = needs_to_json(job.needs)
    session.execute(insert(Task), [
        {"job_id": job.job_id, "index": index, "payload": dict(payload), "needs": needs_json,
         "latest_start": job.latest_start, "status": TaskStatus.PENDING.value, "attempts": 0,
         "progress": 0.0, "checkpoint_progress": 0.0, "created_at": now, "updated_at": now}
        for index, payload in enumerate(job.payloads)])
    return row


def get_job(session: Session, *, job_id: str) -> Job | None:
    return session.get(Job, job_id)


def lock_job(session: Session, *, job_id: str) -> Job | None:
    """The job, row-locked and re-read (another process may have just moved it)."""
    return session.get(Job, job_id, with_for_update=True, populate_existing=True)


def jobs_in_status(session: Session, *, statuses: Sequence[JobStatus],
                   deadline_before: float | None = None) -> list[Job]:
    """Jobs in any of `statuses` (past their deadline, when `deadline_before` is given)."""
    query = select(Job).where(Job.status.in_([s.value for s in statuses]))
    if deadline_before is not None:
        query = query.where(Job.deadline < deadline_before)
    return list(session.scalars(query))


def get_task(session: Session, *, task_id: int) -> Task | None:
    return session.get(Task, task_id)


def job_tasks(session: Session, *, job_id: str) -> list[Task]:
    return list(session.scalars(select(Task).where(Task.job_id == job_id).order_by(Task.index)))


def task_counts(session: Session, *, job_id: str) -> dict[str, int]:
    rows = session.execute(select(Task.status, func.count()).where(Task.job_id == job_id)
                           .group_by(Task.status))
    return {status: count for status, count in rows}


def find_idempotent_job(session: Session, *, principal: str, key: str) -> IdempotencyKey | None:
    return session.get(IdempotencyKey, (principal, key))


def save_idempotency_key(session: Session, *, principal: str, key: str, request_hash: str,
                         job_id: str, now: float) -> None:
    session.add(IdempotencyKey(principal=principal, key=key, request_hash=request_hash,
                               job_id=job_id, created_at=now))


# ---------------------------------------------------------------- leases


def live_leases(session: Session, *, node_id: str | None = None) -> list[Lease]:
    query = select(Lease).where(Lease.released_at.is_(None))
    if node_id is not None:
        query = query.where(Lease.node_id == node_id)
    return list(session.scalars(query.order_by(Lease.id)))


def oldest_reservation(session: Session, *, node_id: str) -> Lease | None:
    """The node's oldest live lease it has not started yet."""
    return session.scalars(select(Lease).where(
        Lease.node_id == node_id, Lease.released_at.is_(None),
        Lease.state == LeaseState.RESERVED.value).order_by(Lease.id)).first()


def live_lease_for_task(session: Session, *, task_id: int) -> Lease | None:
    return session.scalars(select(Lease).where(Lease.task_id == task_id,
                                               Lease.released_at.is_(None))).first()


def activate_lease(session: Session, *, lease: Lease) -> None:
    """reserved -> active: the node started the task; its heartbeats renew the lease now."""
    lease_transition(LeaseState(lease.state), LeaseState.ACTIVE)
    lease.state = LeaseState.ACTIVE.value


def reserve_again(session: Session, *, lease: Lease, now: float, ttl_s: float) -> None:
    """active -> reserved: offered to the node's new agent process, which must start it
    within `ttl_s` (heartbeats do not renew a reservation)."""
    lease_transition(LeaseState(lease.state), LeaseState.RESERVED)
    lease.state = LeaseState.RESERVED.value
    lease.expires_at = now + ttl_s


def release_lease(session: Session, *, lease: Lease, now: float, reason: str) -> None:
    lease_transition(LeaseState(lease.state), LeaseState.RELEASED)
    lease.released_at = now
    lease.state = LeaseState.RELEASED.value
    lease.release_reason = reason


def hold_node_leases(session: Session, *, node_id: str, until: float) -> int:
    """Keep a silent node's started leases live until `until` instead of revoking them, and
    no longer (the verdict decides, not what was left of the lease's renewal window); its
    renewals take over again if it comes back. Returns how many were held."""
    held = 0
    for lease in live_leases(session, node_id=node_id):
        if lease.state == LeaseState.ACTIVE.value:
            lease.expires_at = until
            held += 1
    return held


def lapsed_leases(session: Session, *, now: float) -> list[Lease]:
    """Live leases past their expiry, oldest first; on PostgreSQL rows another process is
    handling are skipped."""
    return list(session.scalars(select(Lease).where(Lease.released_at.is_(None),
                                                    Lease.expires_at < now)
                                .order_by(Lease.id).with_for_update(skip_locked=True)))


def add_recovery_event(session: Session, *, task_id: int, from_node: str, cause: str,
                       lost_at: float, rework: float) -> None:
    session.add(RecoveryEvent(task_id=task_id, from_node=from_node, cause=cause,
                              lost_at=lost_at, rework=rework))


def recovery_events(session: Session, *, task_id: int) -> list[RecoveryEvent]:
    return list(session.scalars(select(RecoveryEvent).where(RecoveryEvent.task_id == task_id)
                                .order_by(RecoveryEvent.id)))


def open_recovery(session: Session, *, task_id: int) -> RecoveryEvent | None:
    return session.scalars(select(RecoveryEvent).where(RecoveryEvent.task_id == task_id,
                                                       RecoveryEvent.resumed_at.is_(None))
                           .order_by(RecoveryEvent.id.desc())).first()


# ---------------------------------------------------------------- blobs and checkpoints


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


def job_results(session: Session, *, job_id: str) -> list[tuple[Task, Blob]]:
    """Tasks of the job that have a result, with the result's blob, in task order."""
    return [(task, blob) for task, blob in session.execute(
        select(Task, Blob).join(Blob, Blob.sha256 == Task.result_sha256)
        .where(Task.job_id == job_id).order_by(Task.index)).tuples()]


def job_artifact_hashes(session: Session, *, job_id: str) -> list[str]:
    return list(session.scalars(select(Checkpoint.sha256).join(Task, Task.id == Checkpoint.task_id)
                                .where(Task.job_id == job_id).distinct()))


# ---------------------------------------------------------------- nonces, leaders


def claim_nonce(session: Session, *, address: str, nonce: str, expires_at: float) -> bool:
    """Remember a signed request's nonce; False when it was already used (a replay)."""
    try:
        with session.begin_nested():
            session.add(UsedNonce(address=address, nonce=nonce, expires_at=expires_at))
    except IntegrityError:
        return False
    return True


def forget_expired_nonces(session: Session, *, now: float) -> int:
    result = session.execute(delete(UsedNonce).where(UsedNonce.expires_at < now))
    return int(getattr(result, "rowcount", 0) or 0)


def try_lead(session: Session, *, name: str, holder: str, now: float, ttl_s: float) -> bool:
    """Take or renew the named leader lease; at most one holder owns it until it lapses."""
    result = session.execute(
        update(LeaderLock)
        .where(LeaderLock.name == name,
               or_(LeaderLock.holder == holder, LeaderLock.expires_at < now))
        .values(holder=holder, expires_at=now + ttl_s))
    if getattr(result, "rowcount", 0):
        return True
    try:
        with session.begin_nested():
            session.add(LeaderLock(name=name, holder=holder, expires_at=now + ttl_s))
    except IntegrityError:
        return False
    return True


def ping(session: Session) -> None:
    session.execute(text("SELECT 1"))


def bulk_register_nodes(session: Session, *, specs: Sequence[NodeSpec], now: float) -> None:
    """Insert many new nodes at once (fleet import, benchmarks, simulation)."""
    providers = sorted({s.provider for s in specs})
    known = set(session.scalars(select(Provider.address).where(Provider.address.in_(providers))))
    new = [{"address": p, "created_at": now} for p in providers if p not in known]
    if new:
        session.execute(insert(Provider), new)
    session.execute(insert(Node), [
        {"id": s.node_id, "provider": s.provider, "gpu_model": s.gpu_model, "vram_gb": s.vram_gb,
         "compute_capability": s.compute_capability, "region": s.region,
         "price_per_gpu_hour": s.price_per_gpu_hour, "slots": s.slots, "tier": int(s.tier),
         "health": NodeHealth.ALIVE.value, "draining": False, "registered_at": now,
         "last_heartbeat_at": now} for s in specs])


def provider_node_count(session: Session, *, provider: str) -> int:
    return int(session.scalar(select(func.count()).select_from(Node)
                              .where(Node.provider == provider)) or 0)


def nodes_seen_since(session: Session, *, since: float) -> int:
    return int(session.scalar(select(func.count()).select_from(Node)
                              .where(Node.last_heartbeat_at >= since)) or 0)
