"""The history store: steps folded per minute and hour by the recorder, written by the loop on
fake time, read back as series (what an admin and a researcher see), windows and indexes."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from gpupool.api.schemas import HistoryOut, HistoryRange, ProjectIn, Role, WorkloadIn
from gpupool.clock import FakeClock
from gpupool.core.model import SchedulerSettings
from gpupool.executors.base import UsageSample
from gpupool.executors.simulated import SimulatedExecutor, parse_simulated_nodes
from gpupool.server import history, migrate, usage
from gpupool.server.auth import Principal
from gpupool.server.db import (
    ClusterHistoryRow,
    DeviceHistoryRow,
    ProjectHistoryRow,
    ProjectRow,
    UsageRow,
    make_engine,
    make_sessionmakers,
)
from gpupool.server.errors import ApiError
from gpupool.server.history import CycleFacts, HistoryRecorder, make_step
from gpupool.server.metrics import ServerMetrics
from gpupool.server.scheduler import SchedulingLoop
from gpupool.server.services import history as reading
from gpupool.server.services import projects, workloads
from gpupool.server.services.cluster import Charge

ADMIN = Principal(1, "admin", Role.ADMIN, frozenset())
RITA = Principal(2, "rita", Role.RESEARCHER, frozenset({"a"}))
T0 = 1_700_000_040.0  # on a minute boundary
FACTS = CycleFacts(4000, 1, 2000, (("a", 1000, 1000), ("b", 500, 2500), ("dept", 1500, 3500)))
IDS = {"a": 1, "b": 2}


def _sample(device: int, percent: int, at_s: float = T0, memory_mib: int = 100) -> UsageSample:
    return UsageSample(at_s, "n1", device, percent, memory_mib)


# -- one step ------------------------------------------------------------------------------------


def test_a_device_is_attributed_to_its_projects_by_their_charges() -> None:
    held = [Charge("n1", 0, "a", "x", 500), Charge("n1", 0, "b", "y", 500)]
    held.append(Charge("n1", 1, "a", "z", 500))
    samples = {("n1", 0): _sample(0, 60), ("n1", 1): _sample(1, 40), ("n1", 2): _sample(2, 0)}
    step = make_step(T0, FACTS, IDS, held, samples)
    by_name = {p.name: p for p in step.projects}
    assert [p.name for p in step.projects] == ["a", "b"]  # departments are not recorded
    assert (by_name["a"].allocated_milli, by_name["a"].requested_milli) == (1000, 1000)
    assert by_name["a"].utilized_milli == 300 + 400
    assert by_name["b"].utilized_milli == 300
    assert step.allocated_milli == 1500
    assert step.utilized_milli == 600 + 400  # devices that hold work
    assert [(d.device_index, d.allocated_milli, d.utilized_milli) for d in step.devices] == [
        (0, 1000, 600),
        (1, 500, 400),
        (2, 0, 0),
    ]


def test_utilization_is_unknown_where_a_held_device_was_not_measured() -> None:
    held = [Charge("n1", 0, "a", "x", 1000), Charge("n1", 1, "b", "y", 1000)]
    step = make_step(T0, FACTS, IDS, held, {("n1", 0): _sample(0, 50)})
    by_name = {p.name: p.utilized_milli for p in step.projects}
    assert by_name == {"a": 500, "b": None}
    assert step.utilized_milli is None
    assert [d.utilized_milli for d in step.devices] == [500, None]


def test_without_any_sample_nothing_is_known_even_an_idle_project() -> None:
    step = make_step(T0, FACTS, IDS, [Charge("n1", 0, "a", "x", 1000)], {})
    assert [p.utilized_milli for p in step.projects] == [None, None]
    assert step.utilized_milli is None


# -- recorder and writer -------------------------------------------------------------------------


def _database(tmp_path: Path) -> tuple[Engine, Session]:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    migrate.upgrade(engine)
    writer, _ = make_sessionmakers(engine)
    return engine, writer()


def _steps(recorder: HistoryRecorder, start_s: float, count: int, percent: int | None) -> None:
    for i in range(count):
        at = start_s + 5 * i
        samples = {} if percent is None else {("n1", 0): _sample(0, percent, at)}
        recorder.add(make_step(at, FACTS, IDS, [Charge("n1", 0, "a", "x", 1000)], samples))


def _rows(session: Session, resolution_s: int) -> list[tuple[float, int, int, int, int]]:
    return [
        (r.bucket_s, r.samples, r.allocated_milli_sum, r.utilized_milli_sum, r.utilized_samples)
        for r in session.scalars(
            select(ProjectHistoryRow)
            .where(
                ProjectHistoryRow.resolution_s == resolution_s, ProjectHistoryRow.project_id == 1
            )
            .order_by(ProjectHistoryRow.bucket_s)
        )
    ]


def test_minutes_are_written_when_over_and_summed_into_their_hour(tmp_path: Path) -> None:
    _, session = _database(tmp_path)
    recorder = HistoryRecorder()
    _steps(recorder, T0, 12, 50)  # minute 1: 12 samples at 50%
    _steps(recorder, T0 + 60, 6, None)  # minute 2: 6 samples, not measured
    assert [b.bucket_s for b in recorder.complete(T0 + 90)] == [T0]
    written = recorder.complete(T0 + 120)
    with recorder.writing(written):
        history.write(session, written, T0 + 120)
    assert recorder.unwritten() == [] and recorder.version == 1
    assert _rows(session, 60) == [(T0, 12, 12_000, 6000, 12), (T0 + 60, 6, 6000, 0, 0)]
    hour = history.bucket_of(T0, 3600)
    assert _rows(session, 3600) == [(hour, 18, 18_000, 6000, 12)]
    cluster = session.scalars(select(ClusterHistoryRow).order_by(ClusterHistoryRow.id)).first()
    assert cluster is not None
    assert (cluster.capacity_milli_sum, cluster.pending_workloads_sum) == (48_000, 12)
    device = session.scalars(select(DeviceHistoryRow).order_by(DeviceHistoryRow.id)).first()
    assert device is not None and device.memory_used_max_mib == 100

    # The same minute written again (a restart wrote the first part at shutdown) adds up.
    _steps(recorder, T0 + 30, 6, 100)
    history.write(session, recorder.unwritten(), T0 + 120)
    assert _rows(session, 60)[0] == (T0, 18, 18_000, 12_000, 18)
    assert _rows(session, 3600) == [(hour, 24, 24_000, 12_000, 18)]


def test_unwritten_minutes_drop_their_oldest_device_sums_past_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the database refuses the minutes, what they hold per device is bounded (10,000
    nodes hold 80,000 devices a minute): the oldest minutes keep their cluster's and projects'
    sums, never the minute steps still add to."""
    monkeypatch.setattr(history, "MAX_UNWRITTEN_DEVICE_SUMS", 10)
    recorder = HistoryRecorder()
    charges = [Charge("n1", d, "a", "x", 1000) for d in range(4)]
    for minute in range(4):
        for i in range(12):
            at = T0 + 60 * minute + 5 * i
            recorder.add(make_step(at, FACTS, IDS, charges, {}))
    minutes = recorder.unwritten()
    assert [len(b.devices) for b in minutes] == [0, 0, 4, 4]
    assert [b.cluster.samples for b in minutes] == [12] * 4
    assert all(b.projects[1].allocated == 12 * 1000 for b in minutes)
    monkeypatch.setattr(history, "MAX_UNWRITTEN_DEVICE_SUMS", 3)
    recorder.add(make_step(T0 + 240, FACTS, IDS, charges, {}))
    assert [len(b.devices) for b in recorder.unwritten()] == [0, 0, 0, 0, 4]


def test_a_project_created_within_a_minute_held_nothing_before() -> None:
    recorder = HistoryRecorder()
    _steps(recorder, T0, 6, 50)
    late = CycleFacts(4000, 0, 0, (("a", 1000, 1000), ("c", 1000, 1000)))
    held = [Charge("n1", 0, "a", "x", 1000), Charge("n1", 1, "c", "y", 1000)]
    for i in range(6):
        samples = {("n1", d): _sample(d, 100, T0 + 30 + 5 * i) for d in (0, 1)}
        recorder.add(make_step(T0 + 30 + 5 * i, late, IDS | {"c": 3}, held, samples))
    [minute] = recorder.unwritten()
    c, device = minute.projects[3], minute.devices[("n1", 1)]
    assert (c.samples, c.allocated // c.samples) == (12, 500)
    assert (c.utilized_samples, c.utilized // c.utilized_samples) == (12, 500)  # known 0 before
    assert (device.samples, device.allocated // device.samples) == (12, 500)
    assert minute.cluster.samples == 12


def test_a_reader_reads_again_when_a_minute_was_written_meanwhile() -> None:
    """A minute is counted once: from memory before its transaction commits, from the
    database after, never both in one answer."""
    recorder = HistoryRecorder()
    _steps(recorder, T0, 12, 50)
    reads: list[int] = []

    def read(unwritten: list[history.Bucket]) -> int:
        reads.append(len(unwritten))
        if len(reads) == 1:  # the loop writes the minute while this reader reads
            with recorder.writing(recorder.complete(T0 + 60)):
                pass
        return len(unwritten)

    assert history.read_with_unwritten(recorder, read) == 0
    assert reads == [1, 0]


def test_retention_keeps_minutes_a_week_and_hours_a_year(tmp_path: Path) -> None:
    _, session = _database(tmp_path)
    recorder = HistoryRecorder()
    _steps(recorder, T0, 1, 50)
    history.write(session, recorder.unwritten(), T0 + 60)
    week, year = history.MINUTE_RETENTION_S, history.HOUR_RETENTION_S
    history.apply_retention(session, T0 + week - 60)
    assert len(_rows(session, 60)) == 1
    history.apply_retention(session, T0 + week + 60)
    assert _rows(session, 60) == [] and len(_rows(session, 3600)) == 1
    history.apply_retention(session, T0 + year + 3600)
    assert _rows(session, 3600) == []


def test_the_recent_minute_feeds_the_metrics() -> None:
    recorder = HistoryRecorder()
    _steps(recorder, T0, 12, 40)
    _steps(recorder, T0 + 60, 11, None)  # the last 60 s still hold the step at T0 + 55
    recent = recorder.recent()
    assert recent.projects == {"a": 400, "b": 0}
    recorder = HistoryRecorder()
    _steps(recorder, T0, 12, None)
    assert recorder.recent().projects == {}


# -- the loop on fake time, then read back --------------------------------------------------------


class Cluster:
    """A loop over simulated nodes on fake time; `run(seconds)` iterates every 5 s."""

    def __init__(self, tmp: Path, sample: bool = True) -> None:
        self.clock = FakeClock(T0)
        self.engine = make_engine(f"sqlite:///{tmp / 'db.sqlite'}")
        migrate.upgrade(self.engine)
        self.writer, self.reader = make_sessionmakers(self.engine)
        self.executor = SimulatedExecutor(parse_simulated_nodes("1x4"), self.clock)
        if not sample:
            self.executor.usage_samples = lambda: ()  # type: ignore[method-assign]
        self.metrics = ServerMetrics()
        self.loop = SchedulingLoop(
            self.writer, self.executor, self.clock, SchedulerSettings(), self.metrics
        )
        self.loop.register_nodes(self.executor.inventory())

    def project(self, name: str, quota_gpu: float) -> None:
        with self.writer.begin() as session:
            body = ProjectIn.model_validate({"name": name, "quota": {"gpu": quota_gpu}})
            projects.create(session, body, self.clock.now_s(), {}, "admin")

    def submit(self, project: str, name: str, **fields: object) -> None:
        with self.writer.begin() as session:
            body = WorkloadIn.model_validate({"name": name, "project": project, **fields})
            workloads.submit(session, body, ADMIN, self.clock.now_s())

    def run(self, seconds: int) -> None:
        for _ in range(seconds // 5):
            self.loop.run_once()
            self.clock.advance(5)

    def read(self, viewer: Principal, range_: HistoryRange = HistoryRange.HOUR) -> HistoryOut:
        now = self.clock.now_s()
        window = reading.window(range_, None, None, now)
        with self.reader() as session:
            return reading.history(session, window, now, viewer, self.loop.history.unwritten())


def test_the_loop_records_allocation_and_modelled_utilization(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.project("a", 2)
    cluster.project("b", 2)
    cluster.submit("a", "train", gpu=2)  # 100% by default
    cluster.submit("b", "notebook", type="interactive", gpu=0.5)  # 20% by default
    cluster.submit("b", "tuned", gpu=1, env={"GPUPOOL_SIM_UTILIZATION": "30"})
    cluster.loop.run_once()  # binds; the tasks run from the next step on
    cluster.clock.advance(55)
    cluster.run(120)  # two whole minutes
    with cluster.reader() as session:
        ids = dict(session.execute(select(ProjectRow.name, ProjectRow.id)).all())
        rows = {
            (r.project_id, r.bucket_s): r
            for r in session.scalars(
                select(ProjectHistoryRow).where(ProjectHistoryRow.resolution_s == 60)
            )
        }
    a, b = rows[(ids["a"], T0 + 60)], rows[(ids["b"], T0 + 60)]
    assert (a.samples, a.allocated_milli_sum // a.samples) == (12, 2000)
    assert a.utilized_milli_sum // a.utilized_samples == 2000
    assert b.allocated_milli_sum // b.samples == 1500
    assert b.utilized_milli_sum // b.utilized_samples == 100 + 300
    assert b.requested_milli_sum // b.samples == 1500

    out = cluster.read(ADMIN)
    assert (out.resolution_s, out.step_s) == (60, 60)
    assert len(out.times) in (60, 61)
    series = {s.key: s for s in out.projects}
    assert sorted(series) == ["a", "b"]
    last = [i for i, value in enumerate(out.allocated_gpu) if value is not None]
    assert out.capacity_gpu[last[-1]] == 4.0
    assert out.allocated_gpu[last[-1]] == 3.5
    assert out.utilized_gpu[last[-1]] == 2.4
    assert series["b"].utilized_gpu[last[-1]] == 0.4
    assert out.allocated_gpu_hours > 0 and out.utilized_gpu_hours is not None
    assert out.idle_allocated_share is not None and 0.3 < out.idle_allocated_share < 0.33

    # Rita (project a) sees a by name and b only as anonymous usage.
    mine = cluster.read(RITA)
    assert [s.key for s in mine.projects] == ["a", reading.OTHER]
    assert mine.projects[1].allocated_gpu[last[-1]] == 1.5
    assert "b" not in mine.model_dump_json()

    metrics = cluster.metrics.render().decode()
    assert 'gpupool_project_utilized_gpu{project="a"} 2.0' in metrics
    assert 'gpupool_device_utilization_percent{device="0",node="sim-1"}' in metrics


def test_the_loop_records_the_pending_work_of_its_last_cycle(tmp_path: Path) -> None:
    """The cluster's pending work in each step is what the cycle before it left waiting (its
    facts are made only when a step is due)."""
    cluster = Cluster(tmp_path)
    cluster.project("a", 4)
    cluster.submit("a", "train", gpu=4)
    cluster.submit("a", "pair", gpu=2)  # waits: the 4 GPUs are taken
    cluster.submit("a", "half", gpu=0.5)  # waits too
    cluster.loop.run_once()
    cluster.clock.advance(55)
    cluster.run(65)  # the minute T0 + 60
    cluster.submit("a", "more", gpu=1)  # from the minute T0 + 120 on, three wait
    cluster.run(120)
    with cluster.reader() as session:
        minutes = {
            row.bucket_s: (row.samples, row.pending_workloads_sum, row.pending_milli_sum)
            for row in session.scalars(
                select(ClusterHistoryRow).where(ClusterHistoryRow.resolution_s == 60)
            )
        }
    assert minutes[T0 + 60] == (12, 12 * 2, 12 * 2500)
    assert minutes[T0 + 120] == (12, 12 * 3, 12 * 3500)


def test_with_no_samples_utilization_is_null_never_zero(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, sample=False)
    cluster.project("a", 2)
    cluster.submit("a", "train", gpu=1)
    cluster.run(90)
    out = cluster.read(ADMIN)
    assert any(value == 1.0 for value in out.allocated_gpu)
    assert set(out.utilized_gpu) == {None}
    assert set(out.projects[0].utilized_gpu) == {None}
    assert out.allocated_gpu_hours > 0
    assert (out.utilized_gpu_hours, out.idle_allocated_gpu_hours) == (None, None)
    assert out.idle_allocated_share is None
    assert "gpupool_project_utilized_gpu{" not in cluster.metrics.render().decode()


def test_reclaims_are_counted_by_cause(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.project("a", 0)
    cluster.project("b", 4)
    cluster.submit("a", "borrower", gpu=4)
    cluster.run(5)
    cluster.submit("b", "owner", gpu=4)
    cluster.run(10)
    metrics = cluster.metrics.render().decode()
    assert 'gpupool_evictions_total{cause="reclaim"} 1.0' in metrics
    assert 'gpupool_evictions_total{cause="preempt"} 0.0' in metrics


def test_the_last_minute_is_written_at_shutdown(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.project("a", 1)
    cluster.run(20)
    cluster.loop._thread = _StoppedThread()  # type: ignore[assignment]
    cluster.loop.stop()
    with cluster.reader() as session:
        rows = session.scalars(select(ClusterHistoryRow)).all()
    assert sorted((r.resolution_s, r.samples) for r in rows) == [(60, 4), (3600, 4)]
    assert cluster.loop.history.unwritten() == []


def test_the_loop_writes_usage_every_15_s_and_the_rest_at_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Usage rows are folded in memory and written every 15 s and when their minute is over,
    not at every 5-s sample (at 10,000 nodes 141,000 rows a write); the rows add up to every
    sample all the same, and a clean stop writes what is left."""
    writes: list[float] = []
    write = usage.write

    def counted(session: Session, rows: list[tuple[object, ...]], now_s: float) -> None:
        writes.append(now_s - T0)
        write(session, rows, now_s)

    monkeypatch.setattr(usage, "write", counted)
    cluster = Cluster(tmp_path)
    cluster.project("a", 2)
    cluster.submit("a", "train", gpu=2)

    def minutes() -> list[tuple[float, int]]:
        with cluster.reader() as session:
            rows = session.execute(
                select(UsageRow.bucket_s, func.sum(UsageRow.samples))
                .where(UsageRow.project == "")
                .group_by(UsageRow.bucket_s)
                .order_by(UsageRow.bucket_s)
            ).all()
        return [(bucket - T0, int(samples)) for bucket, samples in rows]

    cluster.run(10)  # samples at 0 and 5: the first written at once
    assert writes == [0] and minutes() == [(0.0, 4)]
    cluster.run(60)  # up to 65
    assert writes == [0, 15, 30, 45, 60]  # 5 writes for 13 samples of 4 devices
    assert minutes() == [(0.0, 4 * 12), (60.0, 4)]
    with cluster.reader() as session:
        train = session.scalars(
            select(UsageRow).where(UsageRow.workload == "train", UsageRow.bucket_s == T0)
        ).all()
    # its two devices, each charged a whole GPU in every sample (it started in the first step)
    assert [(r.samples, r.allocated_milli_sum) for r in train] == [(12, 12_000)] * 2
    cluster.loop._thread = _StoppedThread()  # type: ignore[assignment]
    cluster.loop.stop()
    assert minutes() == [(0.0, 48), (60.0, 8)]  # the sample at 65, written at shutdown


class _StoppedThread:
    def join(self, timeout: float) -> None:
        pass

    def is_alive(self) -> bool:
        return False


# -- windows and indexes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("range_", "resolution_s", "step_s"),
    [("1h", 60, 60), ("24h", 60, 240), ("7d", 3600, 3600), ("30d", 3600, 7200)],
)
def test_ranges_pick_rows_and_steps_for_at_most_about_360_points(
    range_: str, resolution_s: int, step_s: int
) -> None:
    window = reading.window(HistoryRange(range_), None, None, T0)
    assert (window.resolution_s, window.step_s) == (resolution_s, step_s)
    assert window.points <= reading.MAX_POINTS + 1


def test_zooming_reads_minutes_while_they_are_kept_and_hours_after() -> None:
    recent = reading.window(HistoryRange.DAY, T0 - 2 * 86_400, T0, T0)
    assert recent.resolution_s == 60 and recent.points <= reading.MAX_POINTS + 1
    expired = reading.window(HistoryRange.DAY, T0 - 9 * 86_400, T0 - 8 * 86_400, T0)
    assert (expired.resolution_s, expired.step_s) == (3600, 3600)
    year = reading.window(HistoryRange.DAY, T0 - 366 * 86_400, T0, T0)
    assert year.resolution_s == 3600 and year.points <= reading.MAX_POINTS + 1


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (T0, T0, "must be after start"),
        (T0, T0 - 60, "must be after start"),
        (T0 - 367 * 86_400, T0, "at most 366 days"),
        (None, T0, "give start with end"),
    ],
)
def test_bad_windows_are_422_with_the_fix(start: float | None, end: float, message: str) -> None:
    with pytest.raises(ApiError) as raised:
        reading.window(HistoryRange.DAY, start, end, T0)
    assert raised.value.status == 422 and message in raised.value.detail


def test_a_month_of_fifty_projects_is_read_through_the_indexes(tmp_path: Path) -> None:
    """30 days of hourly rows for 50 projects (36,000 rows): every query is an index range."""
    engine, session = _database(tmp_path)
    now = T0
    first = history.bucket_of(now - 30 * 86_400, 3600)
    hours = [first + 3600 * i for i in range(30 * 24)]
    for project in range(50):
        session.add(
            ProjectRow(
                name=f"p{project}", is_department=False, quota_gpu_milli=0, quota_cpu_milli=0,
                quota_memory_mib=0, over_quota_weight=1, has_limit=False, priority=0,
                min_runtime_s=0, created_at=now,
            )
        )  # fmt: skip
    session.flush()
    ids = session.scalars(select(ProjectRow.id)).all()
    sums = {"samples": 720, "allocated_milli_sum": 720_000, "utilized_milli_sum": 360_000}
    sums["utilized_samples"] = 720
    session.execute(
        ProjectHistoryRow.__table__.insert(),
        [
            {"resolution_s": 3600, "bucket_s": h, "project_id": i, "requested_milli_sum": 0} | sums
            for h in hours
            for i in ids
        ],
    )
    session.execute(
        ClusterHistoryRow.__table__.insert(),
        [
            {"resolution_s": 3600, "bucket_s": h, "capacity_milli_sum": 7_200_000}
            | {"pending_workloads_sum": 0, "pending_milli_sum": 0}
            | sums
            for h in hours
        ],
    )
    window = reading.window(HistoryRange.MONTH, None, None, now)
    out = reading.history(session, window, now, ADMIN)
    assert len(out.projects) == 50 and len(out.times) <= reading.MAX_POINTS + 1
    assert out.projects[0].allocated_gpu[-2] == 1.0
    assert out.projects[0].utilized_gpu[-2] == 0.5
    assert out.idle_allocated_share == 0.5
    for table in ("history_project", "history_cluster", "history_device"):
        plan = session.execute(
            text(
                f"EXPLAIN QUERY PLAN SELECT * FROM {table} "
                "WHERE resolution_s = 3600 AND bucket_s >= 0 AND bucket_s < 1"
            )
        ).all()
        detail = " ".join(str(row[-1]) for row in plan)
        assert "USING INDEX" in detail and "resolution_s=? AND bucket_s>? AND bucket_s<?" in (
            detail
        ), detail
    engine.dispose()
