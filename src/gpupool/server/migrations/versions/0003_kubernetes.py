"""kubernetes: images, workloads of pods created by others, tolerations, node taints

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 22:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("image", sa.String(length=512), nullable=True))
        batch.add_column(
            sa.Column("origin", sa.String(length=16), nullable=False, server_default="api")
        )
        batch.add_column(sa.Column("external_key", sa.String(length=320), nullable=True))
        batch.add_column(sa.Column("pods", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("tolerations", sa.JSON(), nullable=False, server_default="[]"))
        batch.create_index("ix_workloads_external_key", ["external_key"], unique=False)
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("taints", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("taints")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_index("ix_workloads_external_key")
        batch.drop_column("tolerations")
        batch.drop_column("pods")
        batch.drop_column("external_key")
        batch.drop_column("origin")
        batch.drop_column("image")
