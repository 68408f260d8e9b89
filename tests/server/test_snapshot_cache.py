"""The loop's `SnapshotCache`: a snapshot built with it is the one built without it, whatever
changed in between, and rows that read the same give the objects made the cycle before."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import update
from test_scheduler_loop import Harness

from gpupool.core.model import SchedulerSettings
from gpupool.server.db import NodeRow, TaskRow, WorkloadRow
from gpupool.server.snapshot import BuiltSnapshot, SnapshotCache, build_snapshot


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


def test_unchanged_rows_give_the_same_objects_and_a_changed_row_a_new_one(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path, nodes="2x4")
    harness.project("a", 8)
    for i in range(3):
        harness.submit("a", f"job-{i}", gpu=1, tasks=2)
    harness.submit("a", "waits", gpu=4, tasks=2)
    harness.loop.run_once()
    cache = SnapshotCache()
    first, _ = _both(harness, cache)
    second, fresh = _both(harness, cache)
    _same(second, fresh)
    assert len(cache) == len(first.snapshot.workloads) == 4
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


def test_a_snapshot_with_the_cache_is_the_one_without_it_cycle_after_cycle(
    tmp_path: Path,
) -> None:
    """Binds, preemptions, completions, a task moved by hand, a node gone and a bad row: after
    each, the cached snapshot equals a fresh one."""
    harness = Harness(tmp_path, nodes="2x4")
    harness.project("a", 0)
    harness.project("b", 8)
    for i in range(4):
        harness.submit("a", f"borrow-{i}", gpu=2, duration_s=300)
    harness.submit("a", "frac", gpu=0.5, gpu_limit=1.0, type="interactive")
    cache = SnapshotCache()
    steps = 0
    for step in range(8):
        harness.loop.run_once()
        _same(*_both(harness, cache))
        if step == 1:
            harness.submit("b", "owner", gpu=4)
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
        harness.clock.advance(120)
        steps += 1
    assert steps == 8
