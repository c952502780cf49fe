"""Chain bridge: slashes and epoch commitments as the final indexed events show them (the
chain's slash id and the transactions that slashed and released it; the transaction and
block of an epoch's final commitment).

Revision ID: 0015
Revises: 0011
Create Date: 2026-12-02 15:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("pls_slashes") as batch:
        batch.add_column(sa.Column("chain_slash_id", sa.String(length=80), nullable=True))
        batch.add_column(sa.Column("chain_tx", sa.String(length=66), nullable=True))
        batch.add_column(sa.Column("released_tx", sa.String(length=66), nullable=True))
    with op.batch_alter_table("score_epochs") as batch:
        batch.add_column(sa.Column("committed_tx", sa.String(length=66), nullable=True))
        batch.add_column(sa.Column("committed_block", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("score_epochs") as batch:
        batch.drop_column("committed_block")
        batch.drop_column("committed_tx")
    with op.batch_alter_table("pls_slashes") as batch:
        batch.drop_column("released_tx")
        batch.drop_column("chain_tx")
        batch.drop_column("chain_slash_id")
