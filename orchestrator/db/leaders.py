"""Leader leases: one process at a time runs a named periodic job, across replicas."""

from __future__ import annotations

from sqlalchemy import or_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    LeaderLock,
)


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
