"""The task queue's order: each task's latest start (`matching.latest_start`), least laxity
first, instead of task id.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT_DURATION_S = 60.0  # `TaskNeeds.expected_duration_s` when a row's needs omit it


def upgrade() -> None:
    op.add_column("tasks", sa.Column("latest_start", sa.Float(), nullable=True))
    tasks = sa.table("tasks", sa.column("id", sa.BigInteger()), sa.column("job_id", sa.String()),
                     sa.column("needs", sa.JSON()), sa.column("latest_start", sa.Float()))
    jobs = sa.table("jobs", sa.column("id", sa.String()), sa.column("deadline", sa.Float()))
    bind = op.get_bind()
    rows = bind.execute(sa.select(tasks.c.id, tasks.c.needs, jobs.c.deadline)
                        .join(jobs, jobs.c.id == tasks.c.job_id)).all()
    for task_id, needs, deadline in rows:
        duration = float((needs or {}).get("expected_duration_s", DEFAULT_DURATION_S))
        bind.execute(sa.update(tasks).where(tasks.c.id == task_id)
                     .values(latest_start=deadline - duration))
    with op.batch_alter_table("tasks") as batch:
        batch.alter_column("latest_start", existing_type=sa.Float(), nullable=False)
    op.create_index("ix_tasks_status_latest_start_id", "tasks", ["status", "latest_start", "id"])


def downgrade() -> None:
    op.drop_index("ix_tasks_status_latest_start_id", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("latest_start")
