"""Outbox sender: keep each action's signed transaction (bytes, nonce) so a crash between
persisting and broadcasting resends the very same bytes; error notes; retry backoff.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 13:45:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("raw_tx", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("nonce", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("next_attempt_at", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("note", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_column("note")
        batch_op.drop_column("next_attempt_at")
        batch_op.drop_column("nonce")
        batch_op.drop_column("raw_tx")
