"""Allocation vs utilization history: samples folded per minute, reported per device, project
and workload as time averages."""

from __future__ import annotations

import dataclasses

from rich.console import Console
from sqlalchemy.orm import Session

from gpupool.api.schemas import ProjectIn, Role, WorkloadIn
from gpupool.cli.nodes import top_view
from gpupool.cli.usage import usage_view
from gpupool.executors.base import UsageSample
from gpupool.server import migrate, usage
from gpupool.server.auth import Principal
from gpupool.server.db import DeviceRow, NodeRow, TaskRow, make_engine, make_sessionmakers
from gpupool.server.services import cluster, projects, workloads

ADMIN = Principal(1, "admin", Role.ADMIN, frozenset())
T0 = 1_700_000_040.0  # on a minute boundary


def _setup(database_url: str) -> Session:
    engine = make_engine(database_url)
    migrate.upgrade(engine)
    writer, _ = make_sessionmakers(engine)
    session = writer()
    session.add(
        NodeRow(
            name="n1", executor="local", state="ready", gpu_count=2, gpu_memory_mib=80000,
            gpu_model=None, cpu_milli=None, memory_mib=None, labels={}, registered_at=T0,
            heartbeat_at=T0,
        )
    )  # fmt: skip
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
