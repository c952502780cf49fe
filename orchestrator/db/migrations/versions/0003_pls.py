"""Predictive Latency Staking: node sessions, task outcomes, PoPW challenges and verdicts,
collateral locks, slash decisions, epoch score roots and their leaves.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 13:55:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "node_sessions",
        sa.Column("id", ID, nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("abrupt", sa.Boolean(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_node_sessions_node_id", "node_sessions", ["node_id"])
    op.create_table(
        "task_outcomes",
        sa.Column("id", ID, nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_task_outcomes_node_id", "task_outcomes", ["node_id"])
    op.create_table(
        "popw_challenges",
        sa.Column("nonce", sa.String(length=66), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("gpu_class", sa.String(length=32), nullable=False),
        sa.Column("issued_at", sa.Float(), nullable=False),
        sa.Column("deadline", sa.Float(), nullable=False),
        sa.Column("consumed_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("nonce"),
    )
    op.create_index("ix_popw_challenges_node_id", "popw_challenges", ["node_id"])
    op.create_table(
        "popw_verdicts",
        sa.Column("id", ID, nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("nonce", sa.String(length=66), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("tier", sa.Integer(), nullable=False),
        sa.Column("decided_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_popw_verdicts_node_id", "popw_verdicts", ["node_id"])
    op.create_table(
        "collateral_locks",
        sa.Column("id", ID, nullable=False),
        sa.Column("task_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=66), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=42), nullable=False),
        sa.Column("amount", sa.String(length=80), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "attempt", name="uq_collateral_task_attempt"),
    )
    op.create_index("ix_collateral_locks_task_id", "collateral_locks", ["task_id"])
    op.create_table(
        "pls_slashes",
        sa.Column("slash_id", sa.String(length=66), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=42), nullable=False),
        sa.Column("reason", sa.Integer(), nullable=False),
        sa.Column("amount", sa.String(length=80), nullable=False),
        sa.Column("evidence", sa.String(length=66), nullable=False),
        sa.Column("task_id", sa.BigInteger(), nullable=True),
        sa.Column("decided_at", sa.Float(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("slash_id"),
    )
    op.create_index("ix_pls_slashes_node_id", "pls_slashes", ["node_id"])
    op.create_index("ix_pls_slashes_epoch", "pls_slashes", ["epoch"])
    op.create_table(
        "score_epochs",
        sa.Column("epoch", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("root", sa.String(length=66), nullable=False),
        sa.Column("closed_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("epoch"),
    )
    op.create_table(
        "score_leaves",
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("provider", sa.String(length=42), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("score_bps", sa.Integer(), nullable=False),
        sa.Column("telemetry_digest", sa.String(length=66), nullable=False),
        sa.ForeignKeyConstraint(["epoch"], ["score_epochs.epoch"]),
        sa.PrimaryKeyConstraint("epoch", "provider"),
    )


def downgrade() -> None:
    op.drop_table("score_leaves")
    op.drop_table("score_epochs")
    op.drop_index("ix_pls_slashes_epoch", table_name="pls_slashes")
    op.drop_index("ix_pls_slashes_node_id", table_name="pls_slashes")
    op.drop_table("pls_slashes")
    op.drop_index("ix_collateral_locks_task_id", table_name="collateral_locks")
    op.drop_table("collateral_locks")
    op.drop_index("ix_popw_verdicts_node_id", table_name="popw_verdicts")
    op.drop_table("popw_verdicts")
    op.drop_index("ix_popw_challenges_node_id", table_name="popw_challenges")
    op.drop_table("popw_challenges")
    op.drop_index("ix_task_outcomes_node_id", table_name="task_outcomes")
    op.drop_table("task_outcomes")
    op.drop_index("ix_node_sessions_node_id", table_name="node_sessions")
    op.drop_table("node_sessions")
