"""The PLS observation log: every replica feeds its engine from it in one order, so two
orchestrators on one database score alike (`services.pls_log`).

Revision ID: 0007
Revises: 0005
Create Date: 2026-12-02 01:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pls_observations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=False, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    head = op.create_table(
        "pls_log_head",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(head, [{"id": 1, "last_id": 0}])
    op.create_table(
        "pls_log_cursors",
        sa.Column("replica", sa.String(length=64), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("seen_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("replica"),
    )


def downgrade() -> None:
    op.drop_table("pls_log_cursors")
    op.drop_table("pls_log_head")
    op.drop_table("pls_observations")
