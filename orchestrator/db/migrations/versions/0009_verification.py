"""Verification of results: each task attempt's commitment (Merkle root over pixel-window
leaves), the re-checks leased to other nodes, the evidence a dispute reproduces, and each
provider's pooled record for the adaptive sample rate.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 01:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "verification_commitments",
        sa.Column("id", ID, nullable=False),
        sa.Column("task_id", ID, nullable=False),
        sa.Column("job_id", sa.String(length=66), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=42), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("result_sha256", sa.String(length=64), nullable=False),
        sa.Column("root", sa.String(length=66), nullable=False),
        sa.Column("leaves", sa.JSON(), nullable=False),
        sa.Column("windows", sa.Integer(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=True),
        sa.Column("chunks", sa.JSON(), nullable=False),
        sa.Column("policy", sa.String(length=32), nullable=False),
        sa.Column("rate", sa.Float(), nullable=False),
        sa.Column("seed", sa.String(length=66), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("decided_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    for column in ("task_id", "job_id", "provider", "status"):
        op.create_index(f"ix_verification_commitments_{column}", "verification_commitments",
                        [column])
    op.create_table(
        "verification_checks",
        sa.Column("id", ID, nullable=False),
        sa.Column("commitment_id", ID, nullable=False),
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("recipe", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("checker_node", sa.String(length=64), nullable=True),
        sa.Column("checker_provider", sa.String(length=42), nullable=True),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("comparison", sa.JSON(), nullable=True),
        sa.Column("render_s", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("done_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["commitment_id"], ["verification_commitments.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_verification_checks_commitment_id", "verification_checks",
                    ["commitment_id"])
    op.create_index("ix_verification_checks_status_id", "verification_checks", ["status", "id"])
    op.create_table(
        "verification_evidence",
        sa.Column("digest", sa.String(length=66), nullable=False),
        sa.Column("commitment_id", ID, nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["commitment_id"], ["verification_commitments.id"]),
        sa.PrimaryKeyConstraint("digest"),
    )
    op.create_index("ix_verification_evidence_commitment_id", "verification_evidence",
                    ["commitment_id"])
    op.create_table(
        "verification_records",
        sa.Column("provider", sa.String(length=42), nullable=False),
        sa.Column("consecutive_valid", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("provider"),
    )


def downgrade() -> None:
    op.drop_table("verification_records")
    op.drop_index("ix_verification_evidence_commitment_id", table_name="verification_evidence")
    op.drop_table("verification_evidence")
    op.drop_index("ix_verification_checks_status_id", table_name="verification_checks")
    op.drop_index("ix_verification_checks_commitment_id", table_name="verification_checks")
    op.drop_table("verification_checks")
    for column in ("status", "provider", "job_id", "task_id"):
        op.drop_index(f"ix_verification_commitments_{column}",
                      table_name="verification_commitments")
    op.drop_table("verification_commitments")
