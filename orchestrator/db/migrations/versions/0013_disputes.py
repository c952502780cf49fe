"""Disputes as the orchestrator follows them from the chain: one row per on-chain dispute
(what it froze, who ruled what, where the money went), and the reversal of a slash a dispute
overturned on the slash record it undid.

Revision ID: 0013
Revises: 0014
Create Date: 2026-12-02 05:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "disputes",
        sa.Column("dispute_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=66), nullable=False),
        sa.Column("job_id", sa.String(length=66), nullable=True),
        sa.Column("slash_id", sa.String(length=80), nullable=True),
        sa.Column("opener", sa.String(length=42), nullable=False),
        sa.Column("respondent", sa.String(length=42), nullable=False),
        sa.Column("bond", sa.String(length=80), nullable=False),
        sa.Column("frozen_amount", sa.String(length=80), nullable=False),
        sa.Column("evidence", sa.String(length=66), nullable=False),
        sa.Column("ruling_deadline", sa.Float(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("opened_tx", sa.String(length=66), nullable=False),
        sa.Column("opened_at", sa.Float(), nullable=False),
        sa.Column("slashed_provider", sa.String(length=42), nullable=True),
        sa.Column("slash_evidence", sa.String(length=66), nullable=True),
        sa.Column("slash_reason", sa.Integer(), nullable=True),
        sa.Column("prior_tier", sa.Integer(), nullable=True),
        sa.Column("ruled_tx", sa.String(length=66), nullable=True),
        sa.Column("ruled_at", sa.Float(), nullable=True),
        sa.Column("ruling_slash_id", sa.String(length=80), nullable=True),
        sa.Column("ruling_evidence", sa.String(length=66), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("dispute_id"),
    )
    op.create_index("ix_disputes_status", "disputes", ["status"])
    op.create_index("ix_disputes_job_id", "disputes", ["job_id"])
    with op.batch_alter_table("pls_slashes") as batch:
        batch.add_column(sa.Column("reversed_by", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pls_slashes") as batch:
        batch.drop_column("reversed_by")
    op.drop_index("ix_disputes_job_id", table_name="disputes")
    op.drop_index("ix_disputes_status", table_name="disputes")
    op.drop_table("disputes")
