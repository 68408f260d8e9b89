"""tenancy: events (and usage rows) keyed by project and workload id, with the acting user;
token expiry; project and workload ids never reused on SQLite

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# An event belongs to the project of its name only if that project existed when the event was
# written: events of an earlier project of the same name (deleted since) keep no project id and
# are seen by admins only. The same for workloads, by submission time.
_PROJECT_IDS = """
UPDATE events SET project_id = (
    SELECT projects.id FROM projects
    WHERE projects.name = events.project AND projects.created_at <= events.at
)
WHERE events.project IS NOT NULL
"""
_WORKLOAD_IDS = """
UPDATE events SET workload_id = (
    SELECT workloads.id FROM workloads
    WHERE workloads.project_id = events.project_id AND workloads.name = events.workload
        AND workloads.submitted_at <= events.at
)
WHERE events.project_id IS NOT NULL AND events.workload IS NOT NULL
"""
# The same for the per-minute usage rows (a project created within the row's minute counts).
_USAGE_PROJECT_IDS = """
UPDATE usage SET project_id = (
    SELECT projects.id FROM projects
    WHERE projects.name = usage.project AND projects.created_at < usage.bucket_s + 60
)
WHERE usage.project != ''
"""
# SQLite gives the next row the largest id + 1, so deleting the newest project handed its id
# to the next one (and with it the old one's history and events). AUTOINCREMENT never reuses
# an id; it starts above every id the history and events already name.
_HIGHEST_ID = {
    "projects": """
SELECT MAX(high) FROM (
    SELECT MAX(id) AS high FROM projects
    UNION ALL SELECT MAX(project_id) FROM history_project
    UNION ALL SELECT MAX(project_id) FROM events
) AS ids
""",
    "workloads": """
SELECT MAX(high) FROM (
    SELECT MAX(id) AS high FROM workloads
    UNION ALL SELECT MAX(workload_id) FROM events
) AS ids
""",
}


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("project_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("workload_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("actor", sa.String(length=63), nullable=True))
    op.create_index("ix_events_project_id", "events", ["project_id", "id"], unique=False)
    op.execute(_PROJECT_IDS)
    op.execute(_WORKLOAD_IDS)
    with op.batch_alter_table("usage") as batch:
        batch.add_column(sa.Column("project_id", sa.Integer(), nullable=True))
    op.execute(_USAGE_PROJECT_IDS)
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("expires_at", sa.Float(), nullable=True))
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return  # PostgreSQL's sequences never hand out an id twice
    for table, highest in _HIGHEST_ID.items():
        # Rebuilt with foreign keys off (gpupool.server.migrate): dropping the old table must
        # not cascade (memberships, tasks).
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass
        high = bind.execute(sa.text(highest)).scalar()
        if high is not None:
            bind.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = :t"), {"t": table})
            bind.execute(
                sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES (:t, :high)"),
                {"t": table, "high": int(high)},
            )


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("expires_at")
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("project_id")
    op.drop_index("ix_events_project_id", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("actor")
        batch.drop_column("workload_id")
        batch.drop_column("project_id")
