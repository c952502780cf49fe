"""Engines and sessions: SQLite in WAL mode by default, PostgreSQL by URL; schema by Alembic;
the commit that turns a unique-key race into a `Conflict`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.domain.errors import DomainError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

DatabaseError = DBAPIError  # what a query raises when the database fails it, whatever the backend


def database_away(error: DatabaseError) -> bool:
    """Whether `error` says the database did not answer (refused, restarting, the connection
    cut, locked past the timeout) rather than that it refused this query: the same request
    may then succeed when retried."""
    return bool(error.connection_invalidated) or isinstance(
        error, OperationalError | InterfaceError)


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine with the per-backend settings the service relies on."""
    if url.startswith("sqlite"):
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            # WAL lets readers run beside the one writer; foreign keys are off by default.
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        @event.listens_for(engine, "before_execute")
        def _lock_for_update(conn: Any, clause: Any, *_args: Any) -> None:
            # SQLite has no row locks and pysqlite begins its transaction only at the first
            # write, so a read "FOR UPDATE" would lock nothing and later reads of the same
            # transaction could be stale: take the database's write lock instead, as
            # PostgreSQL would take the row's.
            if getattr(clause, "_for_update_arg", None) is None:
                return
            raw = conn.connection.dbapi_connection
            if not raw.in_transaction:
                raw.execute("BEGIN IMMEDIATE")

        return engine
    kwargs.setdefault("pool_size", 20)
    kwargs.setdefault("max_overflow", 20)
    return create_engine(url, pool_pre_ping=True, **kwargs)


def unreachable(url: str) -> str | None:
    """Why the database at `url` cannot be opened (its server's first line: `database "x"
    does not exist`, a refused connection), or None when it can."""
    engine = make_engine(url)
    try:
        with engine.connect():
            return None
    except OperationalError as error:
        return str(error.orig or error).strip().splitlines()[0]
    finally:
        engine.dispose()


def upgrade_to_head(engine: Engine) -> None:
    """Bring the schema to the newest migration (run at start; idempotent)."""
    config = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error."""
    with factory() as session, session.begin():
        yield session


def create_scratch_database(base_url: str, name: str) -> str:
    """Create an empty PostgreSQL database beside `base_url`'s; returns its URL."""
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return make_url(base_url).set(database=name).render_as_string(hide_password=False)


def drop_database(base_url: str, name: str) -> None:
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


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


def ping(session: Session) -> None:
    session.execute(text("SELECT 1"))
