"""Outbox sender: the nonce of each signing key kept in the database, and every signed version
of a transaction (a stuck one is replaced at its nonce with higher fees; any may be mined).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 05:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "chain_nonces",
        sa.Column("address", sa.String(length=42), nullable=False),
        sa.Column("next_nonce", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("address"),
    )
    op.create_table(
        "outbox_transactions",
        sa.Column("tx_hash", sa.String(length=66), nullable=False),
        sa.Column("sender", sa.String(length=42), nullable=False),
        sa.Column("nonce", sa.BigInteger(), nullable=False),
        sa.Column("max_fee_per_gas", sa.String(length=80), nullable=False),
        sa.Column("max_priority_fee_per_gas", sa.String(length=80), nullable=False),
        sa.Column("signed_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tx_hash"),
    )
    op.create_index("ix_outbox_transactions_sender_nonce", "outbox_transactions",
                    ["sender", "nonce"])


def downgrade() -> None:
    op.drop_index("ix_outbox_transactions_sender_nonce", table_name="outbox_transactions")
    op.drop_table("outbox_transactions")
    op.drop_table("chain_nonces")
