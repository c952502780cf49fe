"""Pending probes in the DB: any replica times a probe's echo, and one records it lost.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 18:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pending_probes",
        sa.Column("nonce", sa.String(length=32), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("sent_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("nonce"),
    )
    op.create_index("ix_pending_probes_node_id", "pending_probes", ["node_id"])
    op.create_index("ix_pending_probes_sent_at", "pending_probes", ["sent_at"])


def downgrade() -> None:
    op.drop_index("ix_pending_probes_sent_at", table_name="pending_probes")
    op.drop_index("ix_pending_probes_node_id", table_name="pending_probes")
    op.drop_table("pending_probes")
