"""Who uploaded which blob (possession, quotas, expiry of unclaimed uploads), and the parts
each checkpoint manifest named when it was recorded.

Blobs stored before this revision have no upload rows: they stay (the upload GC deletes only
blobs whose every upload expired unclaimed), and a principal names one again after uploading it.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 06:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blob_uploads",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("uploader", sa.String(80), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("uploaded_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.UniqueConstraint("sha256", "uploader", name="uq_blob_uploads_sha256_uploader"),
    )
    op.create_index("ix_blob_uploads_uploader_expires", "blob_uploads", ["uploader", "expires_at"])
    op.create_index("ix_blob_uploads_expires", "blob_uploads", ["expires_at"])
    op.create_table(
        "checkpoint_parts",
        sa.Column("checkpoint_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  sa.ForeignKey("checkpoints.id"), primary_key=True),
        sa.Column("sha256", sa.String(64), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("checkpoint_parts")
    op.drop_index("ix_blob_uploads_expires", table_name="blob_uploads")
    op.drop_index("ix_blob_uploads_uploader_expires", table_name="blob_uploads")
    op.drop_table("blob_uploads")
