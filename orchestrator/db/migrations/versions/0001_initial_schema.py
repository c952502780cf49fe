"""Initial schema: providers, nodes, jobs, tasks, leases (live-slot guard), blobs,
checkpoints, telemetry, status history, chain outbox, idempotency, nonces, leader locks.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-30 13:15:19.035006
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

LIVE = sa.text("released_at IS NULL")  # a lease is live until released

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("principal", sa.String(length=42), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("request_hash", sa.String(length=66), nullable=False),
        sa.Column("job_id", sa.String(length=66), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("principal", "key"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=66), nullable=False),
        sa.Column("customer", sa.String(length=42), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(length=66), nullable=False),
        sa.Column("amount", sa.String(length=80), nullable=False),
        sa.Column("deadline", sa.Float(), nullable=False),
        sa.Column("priority", sa.String(length=8), nullable=False),
        sa.Column("merkle_root", sa.String(length=66), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_customer"), ["customer"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_status"), ["status"], unique=False)

    op.create_table(
        "leader_locks",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("idempotency_key", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("tx_hash", sa.String(length=66), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("idempotency_key"),
    )
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_outbox_status"), ["status"], unique=False)

    op.create_table(
        "providers",
        sa.Column("address", sa.String(length=42), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("address"),
    )
    op.create_table(
        "status_history",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("entity", sa.String(length=8), nullable=False),
        sa.Column("entity_id", sa.String(length=66), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("status_history", schema=None) as batch_op:
        batch_op.create_index("ix_status_history_entity", ["entity", "entity_id"], unique=False)

    op.create_table(
        "telemetry_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("metric", sa.String(length=32), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("telemetry_samples", schema=None) as batch_op:
        batch_op.create_index(
            "ix_telemetry_node_metric_at", ["node_id", "metric", "at"], unique=False
        )

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
    op.create_table(
        "used_nonces",
        sa.Column("address", sa.String(length=42), nullable=False),
        sa.Column("nonce", sa.String(length=80), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("address", "nonce"),
    )
    with op.batch_alter_table("used_nonces", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_used_nonces_expires_at"), ["expires_at"], unique=False)

    op.create_table(
        "nodes",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=42), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=False),
        sa.Column("vram_gb", sa.Integer(), nullable=False),
        sa.Column("compute_capability", sa.Float(), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("price_per_gpu_hour", sa.String(length=80), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("tier", sa.Integer(), nullable=False),
        sa.Column("health", sa.String(length=16), nullable=False),
        sa.Column("draining", sa.Boolean(), nullable=False),
        sa.Column("registered_at", sa.Float(), nullable=False),
        sa.Column("last_heartbeat_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["provider"],
            ["providers.address"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_nodes_provider"), ["provider"], unique=False)

    op.create_table(
        "tasks",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.String(length=66), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("needs", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=True),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("checkpoint_progress", sa.Float(), nullable=False),
        sa.Column("checkpoint_sha256", sa.String(length=64), nullable=True),
        sa.Column("result_sha256", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "index", name="uq_tasks_job_index"),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tasks_job_id"), ["job_id"], unique=False)
        batch_op.create_index("ix_tasks_status_id", ["status", "id"], unique=False)

    op.create_table(
        "checkpoints",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("task_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("is_result", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["sha256"],
            ["blobs.sha256"],
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_checkpoints_task_id"), ["task_id"], unique=False)

    op.create_table(
        "leases",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("task_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("released_at", sa.Float(), nullable=True),
        sa.Column("release_reason", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["nodes.id"],
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.create_index("ix_leases_expires", ["expires_at"], unique=False)
        batch_op.create_index(
            "uq_leases_live_slot",
            ["node_id", "slot"],
            unique=True,
            sqlite_where=LIVE,
            postgresql_where=LIVE,
        )
        batch_op.create_index(
            "uq_leases_live_task",
            ["task_id"],
            unique=True,
            sqlite_where=LIVE,
            postgresql_where=LIVE,
        )

    op.create_table(
        "recovery_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("task_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("from_node", sa.String(length=64), nullable=False),
        sa.Column("cause", sa.String(length=16), nullable=False),
        sa.Column("lost_at", sa.Float(), nullable=False),
        sa.Column("rework", sa.Float(), nullable=False),
        sa.Column("resumed_at", sa.Float(), nullable=True),
        sa.Column("resumed_on", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("recovery_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_recovery_events_task_id"), ["task_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("recovery_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_recovery_events_task_id"))

    op.drop_table("recovery_events")
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_leases_live_task",
            sqlite_where=LIVE,
            postgresql_where=LIVE,
        )
        batch_op.drop_index(
            "uq_leases_live_slot",
            sqlite_where=LIVE,
            postgresql_where=LIVE,
        )
        batch_op.drop_index("ix_leases_expires")

    op.drop_table("leases")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_checkpoints_task_id"))

    op.drop_table("checkpoints")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_status_id")
        batch_op.drop_index(batch_op.f("ix_tasks_job_id"))

    op.drop_table("tasks")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_nodes_provider"))

    op.drop_table("nodes")
    with op.batch_alter_table("used_nonces", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_used_nonces_expires_at"))

    op.drop_table("used_nonces")
    op.drop_table("telemetry_windows")
    with op.batch_alter_table("telemetry_samples", schema=None) as batch_op:
        batch_op.drop_index("ix_telemetry_node_metric_at")

    op.drop_table("telemetry_samples")
    with op.batch_alter_table("status_history", schema=None) as batch_op:
        batch_op.drop_index("ix_status_history_entity")

    op.drop_table("status_history")
    op.drop_table("providers")
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_outbox_status"))

    op.drop_table("outbox")
    op.drop_table("leader_locks")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_status"))
        batch_op.drop_index(batch_op.f("ix_jobs_customer"))

    op.drop_table("jobs")
    op.drop_table("idempotency_keys")
    op.drop_table("blobs")
