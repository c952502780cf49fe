"""Withdrawn abandonments: a node's process that rendered on through a network cut showed its
chunks on reconnect, so that departure is not slashed (and its chunks cannot be shown again).

Revision ID: 0008
Revises: 0005
Create Date: 2026-12-02 01:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "progress_withdrawals",
        sa.Column("task_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("session_key", sa.String(length=42), nullable=False),
        sa.Column("departed_at", sa.Float(), nullable=False),
        sa.Column("withdrawn_at", sa.Float(), nullable=False),
        sa.Column("chunks", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("task_id"),
    )
    op.create_index("ix_progress_withdrawals_node_id", "progress_withdrawals", ["node_id"])


def downgrade() -> None:
    op.drop_index("ix_progress_withdrawals_node_id", table_name="progress_withdrawals")
    op.drop_table("progress_withdrawals")
