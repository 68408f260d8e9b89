"""64-bit quotas, limits, history sums and per-device row ids on PostgreSQL

A department's quota sums its nodes (10,000 nodes of 1 TiB are 10^10 MiB) and an hour's
history row sums 720 steps of the cluster's capacity and allocation in milli-GPU: past 3,000
GPUs that passes 2^31 - 1, PostgreSQL's `integer` refused the write ("integer out of range")
and the loop's every iteration failed from then on. The per-device tables (`history_device`,
`usage`) take a row per device and minute: at 10,000 nodes their ids, which retention never
gives back, would run out of `integer` in 10 to 18 days (1,000 nodes: 3 to 6 months). These
columns and the ids' sequences become `bigint` there; each table is rewritten once.
SQLite's INTEGER already holds 64 bits (a row id too): nothing to change.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07 19:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

WIDE = {
    "projects": (
        "quota_gpu_milli",
        "quota_cpu_milli",
        "quota_memory_mib",
        "limit_gpu_milli",
        "limit_cpu_milli",
        "limit_memory_mib",
    ),
    "history_cluster": (
        "allocated_milli_sum",
        "utilized_milli_sum",
        "capacity_milli_sum",
        "pending_workloads_sum",
        "pending_milli_sum",
    ),
    "history_project": ("allocated_milli_sum", "utilized_milli_sum", "requested_milli_sum"),
    "history_device": ("id",),
    "usage": ("id",),
}
SEQUENCES = ("history_device", "usage")
"""The tables whose id's sequence is widened with the id."""


def _retype(to: sa.types.TypeEngine[int], start: sa.types.TypeEngine[int]) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table, columns in WIDE.items():
        for column in columns:
            op.alter_column(table, column, type_=to, existing_type=start)
    name = "bigint" if isinstance(to, sa.BigInteger) else "integer"
    for table in SEQUENCES:
        sequence = bind.execute(
            sa.text("SELECT pg_get_serial_sequence(:table, 'id')"), {"table": table}
        ).scalar_one()
        # its maximum follows the type where it was the old type's (PostgreSQL 10 and later)
        op.execute(f"ALTER SEQUENCE {sequence} AS {name}")


def upgrade() -> None:
    _retype(sa.BigInteger(), sa.Integer())


def downgrade() -> None:
    """Fails where a value no longer fits 32 bits (PostgreSQL says which)."""
    _retype(sa.Integer(), sa.BigInteger())
