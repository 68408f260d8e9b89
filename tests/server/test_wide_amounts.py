"""Amounts that sum a large cluster pass 32 bits: a department's quota and an hour's history
sums. PostgreSQL stores them as `bigint` (migration 0008); before, an hour of 3,000 GPUs broke
every history write there ("integer out of range") and with it every iteration of the loop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, select, text

from gpupool.api.schemas import AmountsIn, DepartmentIn, HistoryRange, ProjectIn, Role
from gpupool.executors.base import UsageSample
from gpupool.server import history, migrate, usage
from gpupool.server.auth import Principal
from gpupool.server.db import ClusterHistoryRow, ProjectHistoryRow, make_engine, make_sessionmakers
from gpupool.server.history import Bucket, CycleFacts, HistoryRecorder, Sums, make_step
from gpupool.server.services import history as reading
from gpupool.server.services import projects
from gpupool.units import MAX_AMOUNT, MAX_QUOTA

ADMIN = Principal(1, "admin", Role.ADMIN, frozenset())
T0 = 1_700_002_800.0  # on an hour boundary
GPUS = 80_000  # 10,000 nodes x 8
TIB_MIB = 1024**2


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    made = make_engine(database_url)
    migrate.upgrade(made)
    yield made
    made.dispose()


def test_an_hour_of_a_10000_node_cluster_is_written_and_read_back(engine: Engine) -> None:
    writer, reader = make_sessionmakers(engine)
    with writer.begin() as session:
        projects.create(session, ProjectIn(name="a"), T0, {}, "admin")
        project_id = session.execute(text("SELECT id FROM projects WHERE name = 'a'")).scalar()
    # 80,000 GPUs, project a asks for 100,000: 720 steps of that pass 2^31 milli in the hour
    facts = CycleFacts(GPUS * 1000, 100_000, 100_000 * 1000, (("a", 0, 100_000 * 1000),))
    recorder = HistoryRecorder()
    for step in range(720 + 1):
        at = T0 + 5 * step
        recorder.add(make_step(at, facts, {"a": project_id}, [], {}))
        minutes = recorder.complete(at)
        with recorder.writing(minutes), writer.begin() as session:
            history.write(session, minutes, at)  # PostgreSQL refused the 4th minute's before
    assert recorder.unwritten()[0].bucket_s == T0 + 3600
    with reader() as session:
        cluster = session.scalars(
            select(ClusterHistoryRow).where(ClusterHistoryRow.resolution_s == 3600)
        ).one()
        project = session.scalars(
            select(ProjectHistoryRow).where(ProjectHistoryRow.resolution_s == 3600)
        ).one()
        assert cluster.samples == 720 and cluster.capacity_milli_sum == 720 * GPUS * 1000
        assert cluster.pending_milli_sum == 720 * 10**8 > MAX_AMOUNT
        assert project.requested_milli_sum == 720 * 10**8
        window = reading.window(HistoryRange.DAY, None, None, T0 + 3600)
        out = reading.history(session, window, T0 + 3600, ADMIN, recorder.unwritten())
    assert GPUS in out.capacity_gpu
    assert out.projects[0].requested_gpu is not None and 100_000 in out.projects[0].requested_gpu


def test_per_device_rows_take_ids_past_32_bits(postgres_url: str) -> None:
    """`history_device` and `usage` take a row per device and minute: at 10,000 nodes their ids
    pass 2^31 - 1 within weeks (retention deletes rows, never gives ids back). PostgreSQL only:
    SQLite's row ids are 64-bit."""
    engine = make_engine(postgres_url)
    migrate.upgrade(engine)
    last = 2**31 - 1
    with engine.begin() as connection:
        for table in ("history_device", "usage"):
            connection.execute(
                text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), {last})")
            )
    writer, reader = make_sessionmakers(engine)
    minute = Bucket(T0)
    minute.cluster.samples = minute.devices.setdefault(("n1", 0), Sums()).samples = 1
    with writer.begin() as session:
        history.write(session, [minute], T0 + 60)
        usage.record(session, [UsageSample(T0, "n1", 0, 50, 100)], T0 + 60)
    with reader() as session:
        ids = [
            session.execute(text(f"SELECT min(id), max(id) FROM {table}")).one()
            for table in ("history_device", "usage")
        ]
    assert all(low > last for low, _high in ids), ids
    engine.dispose()


def test_a_department_may_hold_a_10000_node_clusters_quota(engine: Engine) -> None:
    """10,000 nodes of 1 TiB and 256 cores: 10^10 MiB and 2.56 x 10^9 millicores."""
    quota = {"gpu": GPUS, "cpu_milli": 10_000 * 256_000, "memory": "10000T"}
    writer, reader = make_sessionmakers(engine)
    with writer.begin() as session:
        projects.create(
            session,
            DepartmentIn.model_validate({"name": "d", "quota": quota, "limit": quota}),
            T0,
            {},
            "admin",
        )
    with reader() as session:
        row = projects.get_row(session, "d")
        stored = (row.quota_gpu_milli, row.quota_cpu_milli, row.quota_memory_mib)
        assert stored == (GPUS * 1000, 2_560_000_000, 10_000 * TIB_MIB)
        assert (row.limit_gpu_milli, row.limit_cpu_milli, row.limit_memory_mib) == stored
    with writer.begin() as session:  # the most the API takes is stored as it is
        row = projects.get_row(session, "d")
        row.quota_memory_mib = row.quota_cpu_milli = row.quota_gpu_milli = MAX_QUOTA
    with reader() as session:
        row = projects.get_row(session, "d")
        assert (row.quota_gpu_milli, row.quota_cpu_milli, row.quota_memory_mib) == (MAX_QUOTA,) * 3


@pytest.mark.parametrize(
    ("amounts", "field", "message"),
    [
        ({"memory": f"{MAX_QUOTA + 1}"}, "memory", f"at most {MAX_QUOTA} MiB"),
        ({"memory": "9000000000T"}, "memory", "about 8589934591T"),
        ({"gpu": 2**53}, "gpu", "gpu must be at most 9007199254740.991"),
        ({"cpu_milli": MAX_QUOTA + 1}, "cpu_milli", "less than or equal to 9007199254740991"),
    ],
)
def test_a_quota_past_what_is_stored_exactly_is_refused_with_the_bound(
    amounts: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        AmountsIn.model_validate(amounts)
    errors = refused.value.errors()  # type: ignore[attr-defined]
    assert [e["loc"][0] for e in errors] == [field]
    assert message in str(errors[0]["msg"])


def test_migration_0008_widens_the_columns_and_keeps_their_values(tmp_path: Path) -> None:
    """From 0007 with rows in place: the values survive, and a wide one fits after."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    _upgrade_with_rows(make_engine(url), url)


def test_migration_0008_on_postgresql(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    _upgrade_with_rows(engine, postgres_url)
    with engine.connect() as connection:
        types = dict(
            connection.execute(
                text(
                    "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_name = 'history_cluster'"
                )
            ).all()
        )
    assert types["capacity_milli_sum"] == "bigint" and types["samples"] == "integer"


def _upgrade_with_rows(engine: Engine, url: str) -> None:
    config = migrate.alembic_config(url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0007")
        connection.execute(
            text(
                "INSERT INTO projects (name, is_department, quota_gpu_milli, quota_cpu_milli, "
                "quota_memory_mib, over_quota_weight, has_limit, priority, min_runtime_s, "
                "created_at) "
                "VALUES ('d', true, 2147483647, 1, 2, 1, false, 0, 0, 0)"
            )
        )
    migrate.upgrade(engine)
    wide = 10_000 * TIB_MIB
    with engine.begin() as connection:
        connection.execute(text(f"UPDATE projects SET quota_memory_mib = {wide}"))
        row = connection.execute(
            text("SELECT quota_gpu_milli, quota_cpu_milli, quota_memory_mib FROM projects")
        ).one()
    assert tuple(row) == (2_147_483_647, 1, wide)
    engine.dispose()
