"""One PLS engine: each collateral lock keeps the raw RS its placement was made at and how its
attempt ended, so a restart replays the recalibrator; the never-written `telemetry_windows`
table goes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 22:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("collateral_locks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("raw_rs", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("ended_at", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("finished", sa.Boolean(), nullable=True))
    op.drop_table("telemetry_windows")


def downgrade() -> None:
    op.create_table(
        "telemetry_windows",
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("metric", sa.String(length=32), nullable=False),
        sa.Column("window_start", sa.Float(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.Column("total_sq", sa.Float(), nullable=False),
        sa.Column("maximum", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("node_id", "metric", "window_start"),
    )
    with op.batch_alter_table("collateral_locks", schema=None) as batch_op:
        batch_op.drop_column("finished")
        batch_op.drop_column("ended_at")
        batch_op.drop_column("raw_rs")
