"""a change marker on workload rows, so that the scheduling loop reads only the rows that changed

SQLite: `workloads.change_seq`, counted up by triggers on every update of the row and on every
insert, update or delete of one of its tasks, whoever writes. PostgreSQL keeps the column at 0:
a row's `xmin` (the transaction that wrote this version of it) is its marker there, and tasks
are compared by their own `xmin`, so no trigger takes a lock on another row.

A later migration that rebuilds `workloads` or `tasks` on SQLite (`batch_alter_table` with
`recreate`) drops these triggers and must create them again (`TRIGGERS`);
`tests/server/test_snapshot_cache.py` checks that they exist after every migration.

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

TRIGGERS = {
    # `WHEN`: the triggers' own updates (which change the marker) do not count again.
    "workloads_changed": """
CREATE TRIGGER workloads_changed AFTER UPDATE ON workloads
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
