"""working dir and usage history

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 22:17:11.859860
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("bucket_s", sa.Float(), nullable=False),
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("device_index", sa.Integer(), nullable=False),
        sa.Column("project", sa.String(length=63), nullable=False),
        sa.Column("workload", sa.String(length=63), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("allocated_milli_sum", sa.Integer(), nullable=False),
        sa.Column("utilized_milli_sum", sa.Integer(), nullable=False),
        sa.Column("memory_used_max_mib", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("bucket_s", "node", "device_index", "project", "workload"),
    )
    op.create_index("ix_usage_bucket", "usage", ["bucket_s"], unique=False)
    op.add_column("workloads", sa.Column("working_dir", sa.String(length=1024), nullable=True))


def downgrade() -> None:
    op.drop_column("workloads", "working_dir")
    op.drop_index("ix_usage_bucket", table_name="usage")
    op.drop_table("usage")
