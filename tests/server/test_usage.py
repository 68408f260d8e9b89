"""Allocation vs utilization history: samples folded per minute, reported per device, project
and workload as time averages."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterator
from random import Random

import pytest
from alembic import command
from rich.console import Console
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from gpupool.api.schemas import ProjectIn, Role, UsageOut, UsagePoint, WorkloadIn
from gpupool.cli.nodes import top_view
from gpupool.cli.usage import usage_view
from gpupool.executors.base import UsageSample
from gpupool.server import migrate, usage
from gpupool.server.auth import Principal
from gpupool.server.db import (
    DeviceRow,
    NodeRow,
    TaskRow,
    UsageHourRow,
    UsageRow,
    make_engine,
    make_sessionmakers,
)
from gpupool.server.errors import ApiError
from gpupool.server.services import cluster, projects, workloads

ADMIN = Principal(1, "admin", Role.ADMIN, frozenset())
T0 = 1_700_000_040.0  # on a minute boundary


_OPENED: list[tuple[Session, Engine]] = []
"""What `_setup` opened, closed after each test (before its database goes): a session left to
the collector rolls back from a finalizer at any moment, on PostgreSQL into a dropped database."""


@pytest.fixture
def database_url(database_url: str) -> Iterator[str]:
    """The shared fixture's database, with what the test opened on it closed first."""
    yield database_url
    while _OPENED:
        session, engine = _OPENED.pop()
        session.close()
        engine.dispose()


def _node(name: str, gpu_memory_mib: int) -> NodeRow:
    return NodeRow(
        name=name, executor="local", state="ready", gpu_count=2, gpu_memory_mib=gpu_memory_mib,
        gpu_model=None, cpu_milli=None, memory_mib=None, labels={}, registered_at=T0,
        heartbeat_at=T0,
    )  # fmt: skip


def _setup(database_url: str) -> Session:
    engine = make_engine(database_url)
    migrate.upgrade(engine)
    writer, _ = make_sessionmakers(engine)
    session = writer()
    _OPENED.append((session, engine))
    session.add(_node("n1", 80000))
    for name in ("a", "b"):
        body = ProjectIn.model_validate({"name": name, "quota": {"gpu": 1}})
        projects.create(session, body, T0, {}, "admin")
    for project, name, gpu, device in (("a", "half", 0.5, 0), ("b", "other-half", 0.5, 0)):
        body = WorkloadIn.model_validate({"name": name, "project": project, "gpu": gpu})
        out = workloads.submit(session, body, ADMIN, T0)
        session.add(
            TaskRow(
                launch_id=name, workload_id=out.id, task_index=0, node="n1", devices=[device],
                burst_device=None, state="running", created_at=T0,
            )
        )  # fmt: skip
    session.flush()
    return session


def test_device_use_is_attributed_to_the_workloads_by_their_share(database_url: str) -> None:
    session = _setup(database_url)
    samples = [
        UsageSample(T0 + 5 * i, "n1", device, percent, 1000)
        for i in range(12)
        for device, percent in ((0, 60), (1, 0))
    ]
    usage.record(session, samples[:12], T0 + 60)
    usage.record(session, samples[12:], T0 + 60)
    by_device = {p.key: p for p in usage.report(session, "device", T0, 60, None).summary}
    assert by_device["n1/0"].allocated_gpu_milli == 1000
    assert by_device["n1/0"].utilized_gpu_milli == 600
    assert by_device["n1/1"].allocated_gpu_milli == 0
    by_project = {p.key: p for p in usage.report(session, "project", T0, 60, None).summary}
    assert by_project["a"].allocated_gpu_milli == 500
    assert by_project["a"].utilized_gpu_milli == 300
    a_id = projects.get_row(session, "a").id
    only_a = usage.report(session, "workload", T0, 60, [a_id])
    assert [p.key for p in only_a.summary] == ["a/half"]


def test_a_workload_running_half_the_time_averages_half(database_url: str) -> None:
    session = _setup(database_url)
    first = [UsageSample(T0 + 5 * i, "n1", 0, 100, 0) for i in range(6)]
    usage.record(session, first, T0 + 30)
    session.query(TaskRow).filter(TaskRow.launch_id == "other-half").delete()
    second = [UsageSample(T0 + 30 + 5 * i, "n1", 0, 50, 0) for i in range(6)]
    usage.record(session, second, T0 + 60)
    by_workload = {p.key: p for p in usage.report(session, "workload", T0, 60, None).summary}
    assert by_workload["b/other-half"].allocated_gpu_milli == 250
    assert by_workload["a/half"].allocated_gpu_milli == 500
    recent_projects, recent_devices = usage.recent(session, T0 + 60)
    assert recent_devices[("n1", 0)].utilization_percent == 75
    assert recent_projects["a"] == 500  # half of a busy device, then alone at 50%


def test_without_any_sample_utilization_is_unknown_never_zero(database_url: str) -> None:
    """Kubernetes without Prometheus gives no samples: null in `/top` and an empty `/usage`,
    "-" in `gpupool top`, while allocation is still shown."""
    session = _setup(database_url)
    node = session.query(NodeRow).one()
    session.add_all(DeviceRow(node_id=node.id, device_index=i, memory_mib=80000) for i in (0, 1))
    session.flush()
    utilized, devices = usage.recent(session, T0 + 60)
    assert (utilized, devices) == ({}, {})
    top = cluster.top(session, T0 + 60, {}, None, None, utilized, devices)
    assert [(p.allocated_gpu_milli, p.utilized_gpu_milli) for p in top.projects] == [
        (500, None),
        (500, None),
    ]
    assert [d.utilization_percent for d in top.nodes[0].devices] == [None, None]
    assert [d.memory_used_mib for d in top.nodes[0].devices] == [None, None]
    for by in ("device", "project", "workload"):
        report = usage.report(session, by, T0 - 3600, 60, None)
        assert (report.points, report.summary) == ([], [])
    console = Console(width=200, record=True)
    console.print(top_view(top))
    console.print(usage_view(usage.report(session, "project", T0 - 3600, 60, None), 60))
    lines = console.export_text().splitlines()
    assert [line.split()[4] for line in lines if line.split()[:1] in (["a"], ["b"])] == ["-", "-"]
    node_line = next(line for line in lines if line.split()[:1] == ["n1"])
    assert node_line.split()[3:] == ["0:1", "1:0"]  # index:allocated, no ",N%"


def test_memory_is_the_peak_over_the_minute(database_url: str) -> None:
    """Rows of a minute are added to (in bulk) as samples come: counts grow, memory peaks."""
    session = _setup(database_url)
    for offset, memory in ((0, 500), (5, 2000), (10, 1000)):
        usage.record(session, [UsageSample(T0 + offset, "n1", 0, 30, memory)], T0 + 15)
    [device] = usage.report(session, "device", T0, 60, None).summary
    assert (device.memory_used_max_mib, device.utilized_gpu_milli) == (2000, 300)


def test_nodes_and_top_show_each_devices_memory_peak_of_the_last_minutes(database_url: str) -> None:
    """What the samples say a device held reaches `/nodes` and `/top` (the dashboard's memory
    meter): the peak over the recent window, per device; a device without samples stays null."""
    session = _setup(database_url)
    session.add_all(
        DeviceRow(node_id=session.query(NodeRow).one().id, device_index=i, memory_mib=80000)
        for i in (0, 1)
    )
    older = [UsageSample(T0 + 5 * i, "n1", 0, 40, 3000 + i) for i in range(12)]
    usage.record(session, older, T0 + 60)
    newer = [UsageSample(T0 + 60 + 5 * i, "n1", 0, 80, 1200) for i in range(12)]
    usage.record(session, newer, T0 + 120)
    _, devices = usage.recent(session, T0 + 120)
    assert devices == {("n1", 0): cluster.RecentDevice(60, 3011)}
    [node] = cluster.nodes(session, recent_devices=devices)
    assert [(d.utilization_percent, d.memory_used_mib) for d in node.devices] == [
        (60, 3011),
        (None, None),
    ]
    top = cluster.top(session, T0 + 120, {}, None, None, {}, devices)
    assert [d.memory_used_mib for d in top.nodes[0].devices] == [3011, None]


def test_a_minute_folded_in_memory_writes_what_each_batch_would_have(database_url: str) -> None:
    """The loop folds samples in memory and writes a minute once it is over (`UsageFold`);
    that minute reads the same as one written batch by batch (`record`)."""
    session = _setup(database_url)
    held = cluster.charges(session)
    batches = [
        [UsageSample(T0 + 5 * i, "n1", d, 10 * i + d, 100 * i) for d in (0, 1)] for i in range(12)
    ]
    fold = usage.UsageFold()
    for batch in batches:
        usage.record(session, batch, T0 + 60)
        fold.add([dataclasses.replace(s, at_s=s.at_s + 60) for s in batch], held)
    assert len(fold) == 4  # two devices' rows and two workloads' on device 0
    usage.write(session, fold.rows(T0 + 120), T0 + 120)
    fold.written(T0 + 120)
    assert len(fold) == 0
    for by in ("device", "project", "workload"):
        first = usage.report(session, by, T0, 60, None).points
        second = usage.report(session, by, T0 + 60, 60, None).points
        assert [
            p.model_copy(update={"bucket_start": 0}) for p in first if p.bucket_start == T0
        ] == [p.model_copy(update={"bucket_start": 0}) for p in second]


def test_a_fold_keeps_its_newest_minutes_when_trimmed() -> None:
    fold = usage.UsageFold()
    for minute in range(3):
        fold.add([UsageSample(T0 + 60 * minute + d, "n1", d, 50, 0) for d in range(4)], [])
    assert fold.minutes() == [T0, T0 + 60, T0 + 120]
    fold.trim(5)
    assert fold.minutes() == [T0 + 120] and len(fold) == 4
    fold.trim(0)
    assert fold.minutes() == [T0 + 120]  # the minute steps still add to stays


def _report_in_python(
    session: Session, by: str, since_s: float, bucket_s: int, project_ids: list[int] | None
) -> UsageOut:
    """The report as the server computed it before the database summed it: every row of the
    window read and folded here (the oracle of `test_the_database_sums_what_the_rows_say`)."""
    rows = session.scalars(select(UsageRow).where(UsageRow.bucket_s >= since_s)).all()
    device_samples = {
        (r.bucket_s, r.node, r.device_index): r.samples for r in rows if not r.project
    }
    chosen = [
        r
        for r in rows
        if (not r.project) == (by == "device")
        and (by == "device" or project_ids is None or r.project_id in project_ids)
    ]
    sums: dict[tuple[str, float], list[int]] = defaultdict(lambda: [0, 0, 0])
    span: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in chosen:
        key = (
            f"{row.node}/{row.device_index}"
            if by == "device"
            else row.project
            if by == "project"
            else f"{row.project}/{row.workload}"
        )
        bucket = float(int(row.bucket_s // bucket_s) * bucket_s)
        count = max(1, device_samples.get((row.bucket_s, row.node, row.device_index), row.samples))
        for entry in (sums[(key, bucket)], span[key]):
            entry[0] += row.allocated_milli_sum // count
            entry[1] += row.utilized_milli_sum // count
            entry[2] = max(entry[2], row.memory_used_max_mib)
    minutes: dict[float, set[float]] = defaultdict(set)
    for minute, _, _ in device_samples:
        minutes[float(int(minute // bucket_s) * bucket_s)].add(minute)
    memory = by == "device"
    points = [
        UsagePoint(
            key=key,
            bucket_start=bucket,
            allocated_gpu_milli=a // max(1, len(minutes[bucket])),
            utilized_gpu_milli=u // max(1, len(minutes[bucket])),
            memory_used_max_mib=m if memory else None,
        )
        for (key, bucket), (a, u, m) in sorted(sums.items())
    ]
    span_minutes = max(1, len(device_samples and {m for m, _, _ in device_samples}))
    summary = [
        UsagePoint(
            key=key,
            bucket_start=since_s,
            allocated_gpu_milli=a // span_minutes,
            utilized_gpu_milli=u // span_minutes,
            memory_used_max_mib=m if memory else None,
        )
        for key, (a, u, m) in sorted(span.items())
    ]
    return UsageOut(by=by, bucket_s=bucket_s, points=points, summary=summary)


def test_the_database_sums_what_the_rows_say(database_url: str) -> None:
    """A report is summed by the database (a day of a large cluster is millions of rows, which
    the server once read and folded itself): the same answer as that fold, on three hours of
    two nodes whose tasks come and go, for every grouping, bucket width, window and project
    filter."""
    session = _setup(database_url)
    session.add(_node("n2", 40000))
    session.flush()
    held = cluster.charges(session)
    a_id = projects.get_row(session, "a").id
    extra = [cluster.Charge("n2", 1, "b", "big", 1000, projects.get_row(session, "b").id)]
    random = Random(7)
    fold = usage.UsageFold()
    for step in range(3 * 720):  # three hours, every 5 s
        at = T0 + 5 * step
        if step % 37 == 0 and random.random() < 0.3:
            continue  # a missed sample
        batch = [
            UsageSample(at, n, d, random.randrange(0, 101), random.randrange(0, 40000))
            for n in ("n1", "n2")
            for d in (0, 1)
        ]
        # the big job runs in the second hour only; the halves all along
        fold.add(batch, held + (extra if 720 <= step < 1440 else []))
    usage.write(session, fold.rows(), T0 + 3 * 3600)
    for by in ("device", "project", "workload"):
        for since, bucket_s, ids in (
            (T0, 60, None),
            (T0 + 1234, 300, None),
            (T0, 3600, [a_id]),
            (T0 - 86_400, 86_400, None),
            (T0 + 3 * 3600, 60, None),  # nothing in the window
        ):
            expected = _report_in_python(session, by, since, bucket_s, ids)
            assert usage.report(session, by, since, bucket_s, ids) == expected, (by, since)
    assert len(usage.report(session, "device", T0, 60, None).points) == 4 * 180


def test_a_report_past_its_points_is_refused_with_the_fix(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _setup(database_url)
    usage.record(
        session, [UsageSample(T0 + 60 * m, "n1", d, 50, 0) for m in range(3) for d in (0, 1)],
        T0 + 180,
    )  # fmt: skip
    monkeypatch.setattr(usage, "MAX_POINTS", 5)
    assert len(usage.report(session, "device", T0, 3600, None).points) == 2
    with pytest.raises(ApiError) as refused:
        usage.report(session, "device", T0, 60, None)  # 2 devices x 3 minutes
    assert refused.value.status == 422 and refused.value.field == "bucket_s"
    assert "more than 5 points: ask for wider buckets" in refused.value.detail


def _minute_rows(minutes: range, a_id: int) -> list[tuple[object, ...]]:
    """Usage rows as the fold gives them (`UsageFold.rows`): device 0 of n1 shared by a/half
    and b/other-half at 60%, every minute of `minutes` (counted from T0)."""
    rows: list[tuple[object, ...]] = []
    for m in minutes:
        at = T0 + 60 * m
        used = 600 * 12 if m % 2 else 300 * 12
        rows.append((at, "n1", 0, "", "", None, 12, 12_000, used, 100 + m % 7))
        rows.append((at, "n1", 0, "a", "half", a_id, 12, 6000, used // 2, 0))
        rows.append((at, "n1", 0, "b", "other-half", None, 12, 6000, used // 2, 0))
    return rows


def test_hours_add_up_their_minutes_and_outlive_them(database_url: str) -> None:
    """Each write adds to the hours' rows too (a late sample reaches its hour); minutes are
    dropped after two days, hours after 14."""
    session = _setup(database_url)
    a_id = projects.get_row(session, "a").id
    rows = _minute_rows(range(150), a_id)
    usage.write(session, rows[:200], T0 + 9000)
    usage.write(session, rows[200:], T0 + 9000)  # the same hour's minutes in a second write
    usage.write(session, rows[:3], T0 + 9000)  # and a minute again: it adds, to both
    hours = {
        (r.bucket_s, r.project): (r.samples, r.allocated_milli_sum, r.utilized_milli_sum)
        for r in session.scalars(select(UsageHourRow))
    }
    minutes = {
        (r.bucket_s, r.project): (r.samples, r.allocated_milli_sum, r.utilized_milli_sum)
        for r in session.scalars(select(UsageRow))
    }
    first = T0 // 3600 * 3600  # T0 is 840 s past an hour's start
    for hour in (first, first + 3600, first + 7200):
        for project in ("", "a", "b"):
            inside = [
                v for (m, p), v in minutes.items() if p == project and hour <= m < hour + 3600
            ]
            assert hours[(hour, project)] == tuple(map(sum, zip(*inside, strict=True)))
    peak = session.scalars(
        select(UsageHourRow.memory_used_max_mib).where(UsageHourRow.project == "")
    )
    assert max(peak) == 106

    usage.write(session, [], T0 + 3 * 86_400)  # nothing to add: retention alone does not run
    usage.write(session, _minute_rows(range(4320, 4321), a_id), T0 + 3 * 86_400)
    assert {r.bucket_s for r in session.scalars(select(UsageRow))} == {T0 + 60 * 4320}
    assert len({r.bucket_s for r in session.scalars(select(UsageHourRow))}) == 4
    usage.write(session, _minute_rows(range(30_000, 30_001), a_id), T0 + 60 * 30_000)
    last = (T0 + 60 * 30_000) // 3600 * 3600
    assert {r.bucket_s for r in session.scalars(select(UsageHourRow))} == {last}


def test_a_report_beyond_the_minutes_reads_the_hours(database_url: str) -> None:
    """Three days of rows: a report over the last day reads minutes, one over three days the
    hours (buckets of whole hours only, with the fix otherwise), the same averages where the
    sampling was even."""
    session = _setup(database_url)
    a_id = projects.get_row(session, "a").id
    usage.write(session, _minute_rows(range(0, 3 * 1440, 10), a_id), T0 + 3 * 86_400)
    now = T0 + 3 * 86_400
    recent_day = usage.report(session, "workload", now - 86_400, 3600, None, now)
    assert recent_day == _report_in_python(session, "workload", now - 86_400, 3600, None)
    assert len({p.bucket_start for p in recent_day.points}) == 25  # 24 hours, not aligned
    with pytest.raises(ApiError) as refused:
        usage.report(session, "workload", T0, 300, None, now)
    assert refused.value.status == 422 and "kept per hour" in refused.value.detail
    three_days = usage.report(session, "workload", T0, 86_400, None, now)
    assert three_days.summary[0].bucket_start == T0 // 3600 * 3600  # from its hour's start
    assert [(p.key, p.allocated_gpu_milli, p.utilized_gpu_milli) for p in three_days.summary] == [
        ("a/half", 500, 150),
        ("b/other-half", 500, 150),
    ]
    by_device = usage.report(session, "device", T0, 3600, None, now)
    assert by_device.summary[0].memory_used_max_mib == 106
    assert len(by_device.points) == 73  # a point for each hour the three days touch


def test_migration_0009_makes_the_hours_of_the_minutes_kept(database_url: str) -> None:
    """From 0008 with minute rows in place: their hours are made, so a 14-day report after
    the upgrade sees what it saw before (minutes older than two days then go)."""
    engine = make_engine(database_url)
    _OPENED.append((Session(engine), engine))
    config = migrate.alembic_config(database_url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0008")
        for minute, project, workload, used in (
            (T0, "", "", 600), (T0 + 60, "", "", 300), (T0 + 3600, "", "", 900),
            (T0, "a", "half", 300), (T0 + 60, "a", "half", 150),
        ):  # fmt: skip
            connection.execute(
                text(
                    "INSERT INTO usage (bucket_s, node, device_index, project, workload, "
                    "project_id, samples, allocated_milli_sum, utilized_milli_sum, "
                    "memory_used_max_mib) VALUES (:at, 'n1', 0, :project, :workload, NULL, 12, "
                    "12000, :used, :used)"
                ),
                {"at": minute, "project": project, "workload": workload, "used": used},
            )
    migrate.upgrade(engine)
    with engine.connect() as connection:
        hours = connection.execute(
            text(
                "SELECT bucket_s, project, samples, utilized_milli_sum, memory_used_max_mib "
                "FROM usage_hours ORDER BY bucket_s, project"
            )
        ).all()
    first = T0 // 3600 * 3600
    assert [tuple(row) for row in hours] == [
        (first, "", 24, 900, 600),
        (first, "a", 24, 450, 300),
        (first + 3600, "", 12, 900, 900),
    ]
