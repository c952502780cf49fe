"""Nonces of signed requests, each accepted once until its signature expires (replay
protection)."""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    UsedNonce,
)


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
