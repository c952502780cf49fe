"""Chain event index: the indexer's cursor, the block hashes it checks for reorgs, every
decoded event of the mesh contracts, and the subjects (providers, jobs, disputes) each
concerns.

Revision ID: 0010
Revises: 0013
Create Date: 2026-12-02 05:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "chain_cursors",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("next_block", sa.BigInteger(), nullable=False),
        sa.Column("final_block", sa.BigInteger(), nullable=False),
        sa.Column("chunk", sa.Integer(), nullable=False),
        sa.Column("reorgs", sa.Integer(), nullable=False),
        sa.Column("deepest_reorg", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "chain_blocks",
        sa.Column("cursor", sa.String(length=64), nullable=False),
        sa.Column("number", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(length=66), nullable=False),
        sa.PrimaryKeyConstraint("cursor", "number"),
    )
    op.create_table(
        "chain_events",
        sa.Column("id", ID, nullable=False),
        sa.Column("cursor", sa.String(length=64), nullable=False),
        sa.Column("contract", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("block_number", sa.BigInteger(), nullable=False),
        sa.Column("block_hash", sa.String(length=66), nullable=False),
        sa.Column("log_index", sa.Integer(), nullable=False),
        sa.Column("tx_hash", sa.String(length=66), nullable=False),
        sa.Column("tx_position", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("applied", sa.Boolean(), nullable=False),
        sa.Column("seen_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("cursor", "tx_hash", "tx_position"),
    )
    op.create_index("ix_chain_events_cursor_status_block", "chain_events",
                    ["cursor", "status", "block_number", "log_index"])
    op.create_index("ix_chain_events_tx_hash", "chain_events", ["tx_hash"])
    op.create_table(
        "chain_event_subjects",
        sa.Column("event_id", ID, nullable=False),
        sa.Column("subject", sa.String(length=96), nullable=False),
        sa.ForeignKeyConstraint(["event_id"], ["chain_events.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("event_id", "subject"),
    )
    op.create_index("ix_chain_event_subjects_subject", "chain_event_subjects", ["subject"])


def downgrade() -> None:
    op.drop_index("ix_chain_event_subjects_subject", table_name="chain_event_subjects")
    op.drop_table("chain_event_subjects")
    op.drop_index("ix_chain_events_tx_hash", table_name="chain_events")
    op.drop_index("ix_chain_events_cursor_status_block", table_name="chain_events")
    op.drop_table("chain_events")
    op.drop_table("chain_blocks")
    op.drop_table("chain_cursors")
