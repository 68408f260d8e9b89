"""history store (project, cluster, device; per minute and per hour) and web sessions

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_SUMS = (
    "samples",
    "allocated_milli_sum",
    "utilized_milli_sum",
    "utilized_samples",
)


def _sums() -> list[sa.Column[int]]:
    return [sa.Column(name, sa.Integer(), nullable=False) for name in _SUMS]


def upgrade() -> None:
    op.create_table(
        "history_project",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("resolution_s", sa.Integer(), nullable=False),
        sa.Column("bucket_s", sa.Float(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        *_sums(),
        sa.Column("requested_milli_sum", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("resolution_s", "bucket_s", "project_id"),
    )
    op.create_table(
        "history_cluster",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("resolution_s", sa.Integer(), nullable=False),
        sa.Column("bucket_s", sa.Float(), nullable=False),
        *_sums(),
        sa.Column("capacity_milli_sum", sa.Integer(), nullable=False),
        sa.Column("pending_workloads_sum", sa.Integer(), nullable=False),
        sa.Column("pending_milli_sum", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("resolution_s", "bucket_s"),
    )
    op.create_table(
        "history_device",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("resolution_s", sa.Integer(), nullable=False),
        sa.Column("bucket_s", sa.Float(), nullable=False),
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("device_index", sa.Integer(), nullable=False),
        *_sums(),
        sa.Column("memory_used_max_mib", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("resolution_s", "bucket_s", "node", "device_index"),
    )
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_sha256", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("session_sha256"),
    )
    op.create_index("ix_web_sessions_user_id", "web_sessions", ["user_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_web_sessions_user_id", table_name="web_sessions")
    op.drop_table("web_sessions")
    op.drop_table("history_device")
    op.drop_table("history_cluster")
    op.drop_table("history_project")
