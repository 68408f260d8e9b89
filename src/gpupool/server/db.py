"""Database tables (SQLAlchemy 2, typed) and the engine: SQLite in WAL mode or PostgreSQL.

Times are stored as float seconds since the epoch: the same on both databases and what the
core's snapshot wants. GPU amounts are integer milli-GPU, memory integer MiB. The schema is
created and changed only by the Alembic migrations in `gpupool.server.migrations`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
)
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    mapped_column,
    relationship,
    sessionmaker,
)

WideInteger = BigInteger().with_variant(Integer(), "sqlite")
"""A 64-bit integer for amounts that sum a cluster: a department's quota (10,000 nodes of 1 TiB
are 10^10 MiB) and an hour's history sums (720 steps of 3,000 GPUs in milli-GPU pass 2^31); and
for the ids of the tables with a row per device and minute. PostgreSQL's `integer` is 32-bit, so
these are `bigint` there (migration 0008); SQLite's INTEGER already holds 64 bits and keeps its
name (an `INTEGER PRIMARY KEY` is the row id)."""


class Base(DeclarativeBase):
    pass


class UserRow(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)


class TokenRow(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float)
    """None: never expires."""


class MembershipRow(Base):
    __tablename__ = "memberships"

    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )


class ProjectRow(Base):
    """A project, or a department (`is_department`) that projects name as their parent."""

    __tablename__ = "projects"
    __table_args__ = ({"sqlite_autoincrement": True},)
    """Ids are never reused (SQLite would give a deleted last row's id to the next row):
    events and history are keyed by project id, and a project created again under an old name
    must not inherit them."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    is_department: Mapped[bool] = mapped_column(Boolean)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id"), index=True)
    quota_gpu_milli: Mapped[int] = mapped_column(WideInteger)
    quota_cpu_milli: Mapped[int] = mapped_column(WideInteger)
    quota_memory_mib: Mapped[int] = mapped_column(WideInteger)
    over_quota_weight: Mapped[int] = mapped_column(Integer)
    has_limit: Mapped[bool] = mapped_column(Boolean)
    limit_gpu_milli: Mapped[int | None] = mapped_column(WideInteger)
    limit_cpu_milli: Mapped[int | None] = mapped_column(WideInteger)
    limit_memory_mib: Mapped[int | None] = mapped_column(WideInteger)
    priority: Mapped[int] = mapped_column(Integer)
    min_runtime_s: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)

    parent: Mapped[ProjectRow | None] = relationship(remote_side=[id], lazy="joined")


class NodeRow(Base):
    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    executor: Mapped[str] = mapped_column(String(63))
    state: Mapped[str] = mapped_column(String(16))
    gpu_count: Mapped[int] = mapped_column(Integer)
    gpu_memory_mib: Mapped[int] = mapped_column(Integer)
    gpu_model: Mapped[str | None] = mapped_column(String(128))
    cpu_milli: Mapped[int | None] = mapped_column(Integer)
    memory_mib: Mapped[int | None] = mapped_column(Integer)
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    taints: Mapped[list[list[str]]] = mapped_column(JSON, server_default="[]")
    """[key, value, effect] of its Kubernetes taints (cordoned and not-ready included)."""
    registered_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float)


class DeviceRow(Base):
    __tablename__ = "devices"
    __table_args__ = (UniqueConstraint("node_id", "device_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    device_index: Mapped[int] = mapped_column(Integer)
    uuid: Mapped[str | None] = mapped_column(String(128))
    model: Mapped[str | None] = mapped_column(String(128))
    memory_mib: Mapped[int] = mapped_column(Integer)


class WorkloadRow(Base):
    """A submitted workload. `version` increases with every change, so that the scheduling loop
    applies a decision only to the workload it decided on (optimistic concurrency)."""

    __tablename__ = "workloads"
    __table_args__ = (
        UniqueConstraint("project_id", "name"),
        Index("ix_workloads_status", "status"),
        Index("ix_workloads_external_key", "external_key"),
        {"sqlite_autoincrement": True},  # ids never reused: events are keyed by them
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63))
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    type: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer)
    gpu_kind: Mapped[str] = mapped_column(String(16))
    gpu_amount: Mapped[int] = mapped_column(Integer)
    gpu_limit_milli: Mapped[int | None] = mapped_column(Integer)
    tasks: Mapped[int] = mapped_column(Integer)
    min_available: Mapped[int | None] = mapped_column(Integer)
    priority: Mapped[int | None] = mapped_column(Integer)
    preemptible: Mapped[bool | None] = mapped_column(Boolean)
    cpu_milli: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    node_selector: Mapped[dict[str, list[str]]] = mapped_column(JSON)
    command: Mapped[list[str]] = mapped_column(JSON)
    env: Mapped[dict[str, str]] = mapped_column(JSON)
    duration_s: Mapped[float | None] = mapped_column(Float)
    grace_period_s: Mapped[int] = mapped_column(Integer)
    submitted_by: Mapped[str | None] = mapped_column(String(63))
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    pending_reason: Mapped[str | None] = mapped_column(Text)
    preemptions: Mapped[int] = mapped_column(Integer)
    working_dir: Mapped[str | None] = mapped_column(String(1024))
    image: Mapped[str | None] = mapped_column(String(512))
    origin: Mapped[str] = mapped_column(String(16), server_default="api")
    """`api` (submitted to gpupool) or `kubernetes` (pods someone else created)."""
    external_key: Mapped[str | None] = mapped_column(String(320))
    """Kubernetes: `namespace/pod` or `namespace/group:name` of the pods it stands for."""
    pods: Mapped[list[str] | None] = mapped_column(JSON)
    """Kubernetes: `namespace/name` of its pods, one per task, in task order."""
    tolerations: Mapped[list[dict[str, str | None]]] = mapped_column(JSON, server_default="[]")
    min_runtime_s: Mapped[int | None] = mapped_column(Integer)
    """Not preempted before it has run this long; None: its project's min runtime."""
    change_seq: Mapped[int] = mapped_column(Integer, server_default="0")
    """SQLite: counted up by triggers whenever the row or one of its tasks is written, by
    anyone (migration 0007); the snapshot reads again only rows whose count moved. Never written
    by the application. PostgreSQL leaves it at 0 and compares the rows' `xmin`."""

    project: Mapped[ProjectRow] = relationship(lazy="joined")


class TaskRow(Base):
    """One start of one task of a workload. `launch_id` names this start: executors start a
    launch at most once, which is what makes dispatch after a crash safe to repeat."""

    __tablename__ = "tasks"
    __table_args__ = (Index("ix_tasks_state", "state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    launch_id: Mapped[str] = mapped_column(String(40), unique=True)
    workload_id: Mapped[int] = mapped_column(
        ForeignKey("workloads.id", ondelete="CASCADE"), index=True
    )
    task_index: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(63))
    devices: Mapped[list[int]] = mapped_column(JSON)
    """The devices the task is charged to (the core's cluster-level view, which the next
    snapshot reads back)."""
    burst_device: Mapped[int | None] = mapped_column(Integer)
    """Where a dynamic fraction that the node level spread to burst runs instead; see
    `physical_devices`."""
    state: Mapped[str] = mapped_column(String(16))
    stop_requested_at: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)


class EventRow(Base):
    """The decision, event and audit log. Ids without foreign keys: it outlives deleted
    projects and workloads. Who may read an event goes by `project_id` (project ids are never
    reused); the names say what it was called then."""

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_workload", "project", "workload"),
        Index("ix_events_project_id", "project_id", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(32))
    project: Mapped[str | None] = mapped_column(String(63))
    project_id: Mapped[int | None] = mapped_column(Integer)
    """The project (or department) it is about; None: about none, or from before ids were
    recorded for a project since deleted (then only admins see it)."""
    workload: Mapped[str | None] = mapped_column(String(63))
    workload_id: Mapped[int | None] = mapped_column(Integer)
    actor: Mapped[str | None] = mapped_column(String(63))
    """The user who did it (None: the scheduler or an executor)."""
    node: Mapped[str | None] = mapped_column(String(63))
    message: Mapped[str] = mapped_column(Text)


class _UsageColumns:
    """A usage row: one per (bucket, node, device) with `project` and `workload` empty, the
    device's own utilization and memory; and one per workload on that device, its allocation
    there and the share of the device's utilization attributed to it (in proportion to
    allocation)."""

    id: Mapped[int] = mapped_column(WideInteger, primary_key=True)
    """64-bit: a row per device and minute uses up 32 bits of ids within weeks at scale."""
    bucket_s: Mapped[float] = mapped_column(Float)
    node: Mapped[str] = mapped_column(String(63))
    device_index: Mapped[int] = mapped_column(Integer)
    project: Mapped[str] = mapped_column(String(63))
    workload: Mapped[str] = mapped_column(String(63))
    project_id: Mapped[int | None] = mapped_column(Integer)
    """The project (None on a device's own row): what a researcher's report is filtered by."""
    samples: Mapped[int] = mapped_column(Integer)
    allocated_milli_sum: Mapped[int] = mapped_column(Integer)
    """Sum over samples of the milli-GPU allocated (divide by `samples` for the average)."""
    utilized_milli_sum: Mapped[int] = mapped_column(Integer)
    """Sum over samples of the milli-GPU in use: utilization % x 10, or its attributed part."""
    memory_used_max_mib: Mapped[int] = mapped_column(Integer)


class UsageRow(_UsageColumns, Base):
    """GPU use per minute, downsampled from the executor's samples (every few seconds); kept
    two days (`usage.MINUTE_RETENTION_S`)."""

    __tablename__ = "usage"
    __table_args__ = (
        UniqueConstraint("bucket_s", "node", "device_index", "project", "workload"),
        Index("ix_usage_bucket", "bucket_s"),
    )


class UsageHourRow(_UsageColumns, Base):
    """The same per hour (the minutes' sums added up), kept 14 days (`usage.RETENTION_S`): a
    report over more than the minutes' two days reads these, 60 times fewer rows."""

    __tablename__ = "usage_hours"
    __table_args__ = (
        UniqueConstraint("bucket_s", "node", "device_index", "project", "workload"),
        Index("ix_usage_hours_bucket", "bucket_s"),
    )


class _HistorySums:
    """Sums over the samples folded into one history bucket; divide by `samples` for the
    average. Utilization is summed only over samples where it was known (`utilized_samples`),
    so a cluster without utilization data shows it as unknown, never as 0. A device's sums fit
    32 bits (at most 1,000 milli a step); the cluster's and a project's are `WideInteger`."""

    samples: Mapped[int] = mapped_column(Integer)
    allocated_milli_sum: Mapped[int] = mapped_column(Integer)
    utilized_milli_sum: Mapped[int] = mapped_column(Integer)
    utilized_samples: Mapped[int] = mapped_column(Integer)


class ProjectHistoryRow(_HistorySums, Base):
    """A project's allocation, utilization and demand over one bucket: `resolution_s` 60
    (kept 7 days) or 3600 (kept a year). Keyed by project id, not name: a project deleted and
    created again under its name does not inherit the old one's history."""

    __tablename__ = "history_project"
    __table_args__ = (UniqueConstraint("resolution_s", "bucket_s", "project_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    resolution_s: Mapped[int] = mapped_column(Integer)
    bucket_s: Mapped[float] = mapped_column(Float)
    project_id: Mapped[int] = mapped_column(Integer)
    allocated_milli_sum: Mapped[int] = mapped_column(WideInteger)
    utilized_milli_sum: Mapped[int] = mapped_column(WideInteger)
    requested_milli_sum: Mapped[int] = mapped_column(WideInteger)


class ClusterHistoryRow(_HistorySums, Base):
    """The whole cluster over one bucket: capacity, allocation, utilization, pending work."""

    __tablename__ = "history_cluster"
    __table_args__ = (UniqueConstraint("resolution_s", "bucket_s"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    resolution_s: Mapped[int] = mapped_column(Integer)
    bucket_s: Mapped[float] = mapped_column(Float)
    allocated_milli_sum: Mapped[int] = mapped_column(WideInteger)
    utilized_milli_sum: Mapped[int] = mapped_column(WideInteger)
    capacity_milli_sum: Mapped[int] = mapped_column(WideInteger)
    pending_workloads_sum: Mapped[int] = mapped_column(WideInteger)
    pending_milli_sum: Mapped[int] = mapped_column(WideInteger)


class DeviceHistoryRow(_HistorySums, Base):
    """One device over one bucket (utilized milli = utilization % x 10)."""

    __tablename__ = "history_device"
    __table_args__ = (UniqueConstraint("resolution_s", "bucket_s", "node", "device_index"),)

    id: Mapped[int] = mapped_column(WideInteger, primary_key=True)
    """64-bit, as `UsageRow.id`."""
    resolution_s: Mapped[int] = mapped_column(Integer)
    bucket_s: Mapped[float] = mapped_column(Float)
    node: Mapped[str] = mapped_column(String(63))
    device_index: Mapped[int] = mapped_column(Integer)
    memory_used_max_mib: Mapped[int] = mapped_column(Integer)


class WebSessionRow(Base):
    """A browser's login: the cookie's SHA-256 (the cookie itself is never stored) and the
    CSRF token the page sends back in a header on every change."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'gpupool.db'}"


CONNECT_TIMEOUT_S = 5
"""How long a new PostgreSQL connection may take before the attempt fails (an unreachable
host would otherwise hang a request or the loop for the TCP timeout, minutes)."""
STATEMENT_TIMEOUT_S = 30
"""How long one PostgreSQL statement may run; SQLite: how long a writer waits for the lock."""
POOL_TIMEOUT_S = 10
"""How long a request waits for a free connection of the pool."""


def make_engine(
    url: str,
    *,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    statement_timeout_s: float = STATEMENT_TIMEOUT_S,
) -> Engine:
    """An engine for `url`. SQLite gets WAL (a reader never blocks the writer), synchronous
    NORMAL (a committed write survives the process being killed; only an OS crash may lose the
    last commits), foreign keys on, `BEGIN IMMEDIATE` so concurrent writers wait for each
    other instead of failing on a lock upgrade, and a busy timeout of `statement_timeout_s`.
    PostgreSQL gets `connect_timeout` and `statement_timeout`, and connections checked before
    use, so that after the server comes back the pool replaces the dead ones by itself. A
    timeout raises `OperationalError`: the API answers 503, the loop backs off
    (`gpupool.server.dbfaults`)."""
    if url.startswith("sqlite"):
        busy_ms = round(statement_timeout_s * 1000)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": statement_timeout_s},
            pool_size=8,
            pool_timeout=POOL_TIMEOUT_S,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(connection: Any) -> None:
            read_only = connection.get_execution_options().get(READ_ONLY_OPTION, False)
            connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return create_engine(
        url,
        pool_size=10,
        max_overflow=20,
        pool_pre_ping=True,
        pool_timeout=POOL_TIMEOUT_S,
        connect_args={
            "connect_timeout": max(1, round(connect_timeout_s)),
            "options": f"-c statement_timeout={round(statement_timeout_s * 1000)}",
        },
    )


READ_ONLY_OPTION = "gpupool_read_only"
"""Execution option for sessions that only read: on SQLite they begin a plain (deferred)
transaction and never wait for the writer."""


def make_sessionmakers(engine: Engine) -> tuple[sessionmaker[Session], sessionmaker[Session]]:
    """(writer, reader) session factories over one engine and pool."""
    reader = engine.execution_options(**{READ_ONLY_OPTION: True})
    return (
        sessionmaker(engine, expire_on_commit=False),
        sessionmaker(reader, expire_on_commit=False),
    )


def physical_devices(devices: Sequence[int], burst_device: int | None) -> tuple[int, ...]:
    """Where a task runs: its row's charged `devices`, or its `burst_device` when the node
    level spread it there to burst. Executors, dispatch and utilization go by this."""
    return tuple(devices) if burst_device is None else (burst_device,)
