"""Leases (a node's hold on a task in one of its slots) and the recoveries of tasks whose
node went away."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    Lease,
    RecoveryEvent,
)
from orchestrator.domain.lifecycle import (
    LeaseState,
    lease_transition,
)


def live_leases(session: Session, *, node_id: str | None = None) -> list[Lease]:
    query = select(Lease).where(Lease.released_at.is_(None))
    if node_id is not None:
        query = query.where(Lease.node_id == node_id)
    return list(session.scalars(query.order_by(Lease.id)))


def leased_since(session: Session, *, node_id: str, since: float) -> bool:
    """Whether the node holds a live lease, or held one that ended at `since` or later."""
    return session.scalars(select(Lease.id).where(
        Lease.node_id == node_id,
        (Lease.released_at.is_(None)) | (Lease.released_at >= since)).limit(1)).first() \
        is not None


START_LAPSED = "start lapsed"  # release reason: a reservation its node never started


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
