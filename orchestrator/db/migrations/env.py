"""Alembic environment: uses the caller's connection when given (the service at start,
tests), else the URL from the MESH_* settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from orchestrator.config import get_settings
from orchestrator.db.models import Base
from orchestrator.db.session import make_engine

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(get_settings().sqlalchemy_url)
    with engine.connect() as fresh:
        _run(fresh)
        fresh.commit()


run_migrations_online()
