"""Whether this process can serve: its database answers."""

from __future__ import annotations

from sqlalchemy.orm import Session

from orchestrator.db import session as db_session
from orchestrator.domain.errors import Unavailable


def check_database(session: Session) -> None:
    """Refuse (`Unavailable`) when the database does not answer, whatever the reason."""
    try:
        db_session.ping(session)
    except Exception:
        raise Unavailable("database_unavailable", "the database does not answer") from None
