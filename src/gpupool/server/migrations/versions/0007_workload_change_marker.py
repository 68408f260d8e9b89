"""a change marker on workload rows, so that the scheduling loop reads only the rows that changed

SQLite: `workloads.change_seq`, counted up by triggers on every update of a column the
snapshot reads (all but the pending reason, which the loop writes alone and notes itself) and
on every insert, update or delete of one of the workload's tasks, whoever writes. PostgreSQL
keeps the column at 0: a row's `xmin` (the transaction that wrote this version of it) is its
marker there, and tasks are compared by their own `xmin`, so no trigger takes a lock on another
row.

A later migration that rebuilds `workloads` or `tasks` on SQLite (`batch_alter_table` with
`recreate`) drops these triggers and must create them again (`TRIGGERS`), and one that adds a
column the snapshot reads must add it to `workloads_changed`;
`tests/server/test_snapshot_cache.py` checks both after every migration.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

SNAPSHOT_COLUMNS = (
    "id", "version", "project_id", "name", "type", "status", "gpu_kind", "gpu_amount",
    "gpu_limit_milli", "tasks", "min_available", "priority", "preemptible", "cpu_milli",
    "memory_mib", "node_selector", "started_at", "origin", "tolerations", "min_runtime_s",
)  # fmt: skip
"""The workload columns the snapshot reads but the pending reason, which the loop writes alone
every cycle and tells its cache itself (`SnapshotCache.note_reasons`); on SQLite an update of
the reason alone does not move the marker. `tests/server/test_snapshot_cache.py` holds this
list to the snapshot's."""

TRIGGERS = {
    # `WHEN`: the triggers' own updates (which change the marker) do not count again.
    "workloads_changed": f"""
CREATE TRIGGER workloads_changed AFTER UPDATE OF {", ".join(SNAPSHOT_COLUMNS)} ON workloads
FOR EACH ROW WHEN NEW.change_seq = OLD.change_seq
BEGIN
    UPDATE workloads SET change_seq = OLD.change_seq + 1 WHERE id = OLD.id;
END
""",
    "tasks_inserted": """
CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks
BEGIN
    UPDATE workloads SET change_seq = change_seq + 1 WHERE id = NEW.workload_id;
END
""",
    "tasks_updated": """
CREATE TRIGGER tasks_updated AFTER UPDATE ON tasks
BEGIN
    UPDATE workloads SET change_seq = change_seq + 1
    WHERE id = NEW.workload_id OR id = OLD.workload_id;
END
""",
    "tasks_deleted": """
CREATE TRIGGER tasks_deleted AFTER DELETE ON tasks
BEGIN
    UPDATE workloads SET change_seq = change_seq + 1 WHERE id = OLD.workload_id;
END
""",
}


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("change_seq", sa.Integer(), server_default="0", nullable=False))
    if op.get_bind().dialect.name == "sqlite":
        for create in TRIGGERS.values():
            op.execute(create)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("change_seq")
