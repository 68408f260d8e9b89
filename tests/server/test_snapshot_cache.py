"""The loop's state between cycles. `SnapshotCache`: a snapshot built with it is the one built
without it, whatever changed in between and whoever wrote it (it reads in full only the rows
whose change marker moved), and rows that read the same give the objects made the cycle
before. `ReasonLedger`: a pending reason is written when what it says changes, and when only its
numbers change, once a minute."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete, select, text, update
from test_scheduler_loop import Harness

from gpupool.core.decisions import CycleResult
from gpupool.core.model import SchedulerSettings, Workload
from gpupool.server import persist, snapshot_cache
from gpupool.server.db import NodeRow, TaskRow, WorkloadRow
from gpupool.server.persist import ReasonLedger
from gpupool.server.snapshot import BuiltSnapshot, SnapshotCache, build_snapshot
from gpupool.server.snapshot_cache import FULL_READ_EVERY, SQLITE_TRIGGERS


def _both(harness: Harness, cache: SnapshotCache) -> tuple[BuiltSnapshot, BuiltSnapshot]:
    """(with the cache, without): each in its own read transaction, as the loop reads."""
    now = harness.clock.now_s()
    with harness.reader() as session, session.begin():
        cached = build_snapshot(session, now, SchedulerSettings(), cache)
    with harness.reader() as session, session.begin():
        fresh = build_snapshot(session, now, SchedulerSettings())
    return cached, fresh


def _same(cached: BuiltSnapshot, fresh: BuiltSnapshot) -> None:
    assert cached.snapshot == fresh.snapshot
    assert cached.keys == fresh.keys
    assert cached.bad == fresh.bad
    assert cached.reasons == fresh.reasons


def _busy(harness: Harness, jobs: int) -> Harness:
    """Project a (8 GPUs) with `jobs` two-task jobs of 1 GPU and one of 2 x 4 GPUs that waits,
    after one cycle."""
    harness.project("a", 8)
    for i in range(jobs):
        harness.submit("a", f"job-{i}", gpu=1, tasks=2)
    harness.submit("a", "waits", gpu=4, tasks=2)
    harness.loop.run_once()
    return harness


def test_unchanged_rows_give_the_same_objects_and_a_changed_row_a_new_one(
    tmp_path: Path,
) -> None:
    harness = _busy(Harness(tmp_path, nodes="2x4"), jobs=3)
    cache = SnapshotCache()
    first, _ = _both(harness, cache)
    second, fresh = _both(harness, cache)
    _same(second, fresh)
    assert len(cache) == len(first.snapshot.workloads) == 4
    assert all(
        after is before
        for before, after in zip(first.snapshot.nodes, second.snapshot.nodes, strict=True)
    )
    for before, after in zip(first.snapshot.workloads, second.snapshot.workloads, strict=True):
        assert after is before
        for p_before, p_after in zip(before.placements, after.placements, strict=True):
            assert p_after is p_before
    # A change no write path announces (no version bump) is still read: the cache compares
    # the values read, not the row's version.
    with harness.writer.begin() as session:
        session.execute(update(WorkloadRow).where(WorkloadRow.name == "waits").values(priority=77))
    third, fresh = _both(harness, cache)
    _same(third, fresh)
    [waits] = [w for w in third.snapshot.workloads if w.name.endswith("/waits")]
    assert waits.priority == 77
    assert all(
        after is before
        for before, after in zip(second.snapshot.workloads, third.snapshot.workloads, strict=True)
        if not after.name.endswith("/waits")
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def on_both(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """A 2x4 cluster on SQLite, then on PostgreSQL (which hands the JSON columns read as text
    back in its own spelling, and whose marker is `xmin`)."""
    url = None if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    harness = Harness(tmp_path, nodes="2x4", url=url)
    yield harness
    harness.engine.dispose()


def test_a_snapshot_with_the_cache_is_the_one_without_it_cycle_after_cycle(
    on_both: Harness,
) -> None:
    """Binds, preemptions, completions, a task moved by hand, a node gone and a bad row: after
    each, the cached snapshot equals a fresh one."""
    harness = on_both
    harness.project("a", 0)
    harness.project("b", 8)
    for i in range(4):
        harness.submit("a", f"borrow-{i}", gpu=2, duration_s=300)
    harness.submit("a", "frac", gpu=0.5, gpu_limit=1.0, type="interactive")
    cache = harness.loop._snapshot_cache  # the loop's: it notes the reasons the loop writes
    steps = 0
    for step in range(8):
        harness.loop.run_once()
        _same(*_both(harness, cache))
        # (the loop's first cycle read every row) only the nodes' change at step 5 makes the
        # cache read every row again
        assert cache.last_read == "changed", step
        if step == 1:
            harness.submit("b", "owner", gpu=4)
        if step == 2:
            with harness.writer.begin() as session:  # a node relabelled and tainted
                session.execute(
                    update(NodeRow)
                    .where(NodeRow.name == "sim-1")
                    .values(labels={"zone": "b"}, taints=[["gpu", "x", "NoSchedule"]])
                )
            cached, fresh = _both(harness, cache)
            _same(cached, fresh)
            assert [n.labels for n in cached.snapshot.nodes if n.name == "sim-1"] == [
                (("zone", "b"),)
            ]
        if step == 3:
            with harness.writer.begin() as session:  # a task's devices rewritten
                session.execute(
                    update(TaskRow)
                    .where(TaskRow.state == "running", TaskRow.task_index == 0)
                    .values(devices=[3])
                )
            _same(*_both(harness, cache))
        if step == 4:
            with harness.writer.begin() as session:  # a row the checks refuse
                session.execute(
                    update(WorkloadRow).where(WorkloadRow.name == "owner").values(cpu_milli=-5)
                )
            cached, fresh = _both(harness, cache)
            _same(cached, fresh)
            assert cached.bad, "the bad row is reported with the cache too"
        if step == 5:
            with harness.writer.begin() as session:  # a node leaves: its work is left out
                session.execute(update(NodeRow).values(state="gone"))
            _same(*_both(harness, cache))
            assert cache.last_read == "all"
        harness.clock.advance(120)
        steps += 1
    assert steps == 8


def _reason(harness: Harness, name: str) -> str | None:
    with harness.reader() as session:
        return session.execute(
            select(WorkloadRow.pending_reason).where(WorkloadRow.name == name)
        ).scalar_one()


def _write_reason(harness: Harness, ledger: ReasonLedger | None, name: str, reason: str) -> None:
    """One cycle's write of `reason` for `name` on a snapshot read now."""
    with harness.reader() as session, session.begin():
        built = build_snapshot(session, harness.clock.now_s(), SchedulerSettings())
    [core_name] = [n for n in built.keys if n.endswith(f"/{name}")]
    result = CycleResult(decisions=(), pending_reasons={core_name: reason}, projects=())
    persist.write(harness.writer, built, result, harness.clock.now_s(), ledger)


def test_a_reason_is_written_when_it_changes_and_its_numbers_at_most_a_minute_late(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path, nodes="1x4")
    harness.project("a", 4)
    harness.submit("a", "big", gpu=4)
    ledger = ReasonLedger(refresh_s=60)
    with harness.reader() as session:
        big = session.execute(select(WorkloadRow.id).where(WorkloadRow.name == "big")).scalar()
    assert isinstance(big, int)
    keep_s = ledger.refresh_after_s(big)  # this workload's share of the minute
    assert 30 <= keep_s <= 60
    _write_reason(harness, ledger, "big", "needs 8 GPUs; 4.00 GPU idle")
    assert _reason(harness, "big") == "needs 8 GPUs; 4.00 GPU idle"
    harness.clock.advance(10)
    _write_reason(harness, ledger, "big", "needs 8 GPUs; 3.50 GPU idle")  # numbers only
    assert _reason(harness, "big") == "needs 8 GPUs; 4.00 GPU idle"
    harness.clock.advance(10)
    _write_reason(harness, ledger, "big", "waits for its project's quota")  # what it says
    assert _reason(harness, "big") == "waits for its project's quota"
    harness.clock.advance(10)
    _write_reason(harness, ledger, "big", "needs 8 GPUs; 2.00 GPU idle")
    assert _reason(harness, "big") == "needs 8 GPUs; 2.00 GPU idle"
    harness.clock.advance(keep_s - 1)
    _write_reason(harness, ledger, "big", "needs 8 GPUs; 1.00 GPU idle")
    assert _reason(harness, "big") == "needs 8 GPUs; 2.00 GPU idle"
    harness.clock.advance(1)  # its share of the minute after it was written: refreshed
    _write_reason(harness, ledger, "big", "needs 8 GPUs; 1.00 GPU idle")
    assert _reason(harness, "big") == "needs 8 GPUs; 1.00 GPU idle"
    # Without a ledger (`persist.write`'s default) every change is written.
    _write_reason(harness, None, "big", "needs 8 GPUs; 0.50 GPU idle")
    assert _reason(harness, "big") == "needs 8 GPUs; 0.50 GPU idle"


def test_a_reason_is_not_written_to_a_workload_no_longer_pending(tmp_path: Path) -> None:
    harness = Harness(tmp_path, nodes="1x4")
    harness.project("a", 4)
    harness.submit("a", "big", gpu=4)
    with harness.reader() as session, session.begin():
        built = build_snapshot(session, harness.clock.now_s(), SchedulerSettings())
    before = _reason(harness, "big")
    with harness.writer.begin() as session:  # suspended after the snapshot was read
        session.execute(
            update(WorkloadRow).where(WorkloadRow.name == "big").values(status="suspended")
        )
    [core_name] = built.keys
    result = CycleResult(decisions=(), pending_reasons={core_name: "needs 8 GPUs"}, projects=())
    persist.write(harness.writer, built, result, harness.clock.now_s(), ReasonLedger())
    assert _reason(harness, "big") == before != "needs 8 GPUs"


def _job(built: BuiltSnapshot, name: str) -> Workload:
    [found] = [w for w in built.snapshot.workloads if w.name.endswith(f"/{name}")]
    return found


def test_writes_behind_the_loops_back_are_read(on_both: Harness) -> None:
    """Writes that no write path of ours makes, each read by the next cached snapshot, which
    reads in full only the rows they touch."""
    harness = _busy(on_both, jobs=6)
    cache = SnapshotCache()
    _same(*_both(harness, cache))
    assert cache.last_read == "all" and cache.rows_read == 7
    cached, fresh = _both(harness, cache)  # nothing changed: nothing read in full
    _same(cached, fresh)
    assert (cache.last_read, cache.rows_read) == ("changed", 0)

    def write(statement: str) -> BuiltSnapshot:
        with harness.engine.begin() as connection:
            connection.execute(text(statement))
        built, fresh = _both(harness, cache)
        _same(built, fresh)
        assert cache.last_read == "changed"
        return built

    built = write("UPDATE workloads SET priority = 77 WHERE name = 'waits'")
    assert cache.rows_read == 1 and _job(built, "waits").priority == 77
    # a task's devices rewritten, nothing written to its workload
    built = write(
        "UPDATE tasks SET devices = '[3]' WHERE task_index = 0 AND workload_id = "
        "(SELECT id FROM workloads WHERE name = 'job-0')"
    )
    assert cache.rows_read == 1
    assert _job(built, "job-0").placements[0].devices == (3,)
    # a task stopping: its workload leaves the snapshot until the task is done
    built = write(
        "UPDATE tasks SET state = 'stopping' WHERE workload_id = "
        "(SELECT id FROM workloads WHERE name = 'job-1')"
    )
    assert not [w for w in built.snapshot.workloads if w.name.endswith("/job-1")]
    built = write(
        "UPDATE tasks SET state = 'done' WHERE workload_id = "
        "(SELECT id FROM workloads WHERE name = 'job-1')"
    )
    assert _job(built, "job-1").placements == ()
    # a task row deleted outright, and a workload row deleted outright
    built = write(
        "DELETE FROM tasks WHERE task_index = 1 AND workload_id = "
        "(SELECT id FROM workloads WHERE name = 'job-2')"
    )
    assert len(_job(built, "job-2").placements) == 1
    built = write(
        "DELETE FROM tasks WHERE workload_id = (SELECT id FROM workloads WHERE name = 'job-3')"
    )
    built = write("DELETE FROM workloads WHERE name = 'job-3'")
    assert not [w for w in built.snapshot.workloads if w.name.endswith("/job-3")]
    # A pending reason written alone, by hand: PostgreSQL reads the row again at once; SQLite's
    # marker does not move for the reason alone (the loop notes its own), so it is read at the
    # next full read.
    with harness.engine.begin() as connection:
        connection.execute(
            text("UPDATE workloads SET pending_reason = 'by hand' WHERE name = 'waits'")
        )
    for _ in range(FULL_READ_EVERY + 1):
        built, fresh = _both(harness, cache)
        if built.reasons == fresh.reasons:
            break
        assert harness.engine.dialect.name == "sqlite"
    _same(built, fresh)
    assert [r for name, r in built.reasons.items() if name.endswith("/waits")] == ["by hand"]
    assert cache.last_read == ("changed" if harness.engine.dialect.name != "sqlite" else "all")
    # leaving the scheduled states and coming back
    write("UPDATE workloads SET status = 'suspended' WHERE name = 'job-4'")
    built = write("UPDATE workloads SET status = 'pending' WHERE name = 'job-4'")
    assert _job(built, "job-4") is not None
    # a row the checks refuse, then mended
    built = write("UPDATE workloads SET cpu_milli = -5 WHERE name = 'job-5'")
    assert len(built.bad) == 1
    built = write("UPDATE workloads SET cpu_milli = 1000 WHERE name = 'job-5'")
    assert not built.bad


def test_sqlite_has_the_marker_triggers_after_the_migrations(tmp_path: Path) -> None:
    harness = Harness(tmp_path, nodes="1x4")
    with harness.engine.connect() as connection:
        found = connection.execute(
            text("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        ).scalars()
        assert set(SQLITE_TRIGGERS) <= set(found)


def test_without_the_triggers_every_row_is_read_every_time(tmp_path: Path) -> None:
    harness = Harness(tmp_path, nodes="1x4")
    harness.project("a", 4)
    harness.submit("a", "one", gpu=1)
    with harness.engine.begin() as connection:
        connection.execute(text("DROP TRIGGER tasks_updated"))
    cache = SnapshotCache()
    for _ in range(3):
        harness.loop.run_once()
        _same(*_both(harness, cache))
        assert (cache.last_read, cache.rows_read) == ("all", 1)


def _queue(tmp_path: Path, jobs: int) -> tuple[Harness, SnapshotCache]:
    """`jobs` jobs of 4 GPUs on one node of 4, never scheduled, and a cache that read them."""
    harness = Harness(tmp_path, nodes="1x4")
    harness.project("a", 4)
    for i in range(jobs):
        harness.submit("a", f"job-{i}", gpu=4)
    cache = SnapshotCache()
    _same(*_both(harness, cache))
    return harness, cache


@pytest.mark.parametrize("changed", [0, 1])
def test_every_row_is_read_now_and_then_and_when_many_changed(
    tmp_path: Path, changed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot_cache, "FULL_READ_ABOVE", 1)
    harness, cache = _queue(tmp_path, 4)
    if changed:  # three of four rows changed: more than half
        with harness.writer.begin() as session:
            session.execute(
                update(WorkloadRow)
                .where(WorkloadRow.name.in_(["job-0", "job-1", "job-2"]))
                .values(priority=3)
            )
        _same(*_both(harness, cache))
        assert cache.last_read == "all"
        return
    reads = []
    for _ in range(FULL_READ_EVERY + 1):
        _same(*_both(harness, cache))
        reads.append(cache.last_read)
    assert reads == ["changed"] * FULL_READ_EVERY + ["all"]


def test_a_deleted_row_leaves_the_snapshot(tmp_path: Path) -> None:
    harness, cache = _queue(tmp_path, 5)
    with harness.writer.begin() as session:
        session.execute(delete(WorkloadRow).where(WorkloadRow.name == "job-2"))
    cached, fresh = _both(harness, cache)
    _same(cached, fresh)
    assert (cache.last_read, len(cached.snapshot.workloads)) == ("changed", 4)


def test_reasons_written_together_are_refreshed_spread_over_half_a_minute() -> None:
    """A burst's reasons, first written in one cycle, are not all rewritten in one cycle a
    minute later (tens of thousands of rows written, and read again by the next snapshot)."""
    ledger = ReasonLedger(refresh_s=60)
    after = [ledger.refresh_after_s(workload_id) for workload_id in range(1, 10_001)]
    assert min(after) >= 30 and max(after) <= 60
    per_second = [0] * 31
    for seconds in after:
        per_second[int(seconds) - 30] += 1
    assert max(per_second) < 10_000 / 30 * 1.2  # about even: no second takes a burst's share


def test_the_marker_trigger_watches_every_column_the_snapshot_reads_but_the_reason(
    tmp_path: Path,
) -> None:
    """A column the snapshot reads and the trigger does not watch would be read stale."""
    harness = Harness(tmp_path, nodes="1x4")
    with harness.engine.connect() as connection:
        sql = connection.execute(
            text("SELECT sql FROM sqlite_master WHERE name = 'workloads_changed'")
        ).scalar_one()
    watched = sql.split(" OF ", 1)[1].split(" ON ", 1)[0]
    read = {column.name for column in snapshot_cache._READ[:-1]}
    assert {c.strip() for c in watched.split(",")} == read


def test_the_reasons_the_loop_writes_are_noted_not_read_again(tmp_path: Path) -> None:
    harness = Harness(tmp_path, nodes="1x4")
    harness.project("a", 4)
    for i in range(4):
        harness.submit("a", f"job-{i}", gpu=4)
    harness.loop.run_once()  # one runs, three wait: their reasons written
    cache = harness.loop._snapshot_cache
    for _ in range(3):
        harness.clock.advance(61)  # every reason's numbers due again
        harness.loop.run_once()
        cached, fresh = _both(harness, cache)
        _same(cached, fresh)
        assert cache.last_read == "changed"
    assert len(cached.reasons) == 3
