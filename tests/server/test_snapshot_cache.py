"""The loop's state between cycles. `SnapshotCache`: a snapshot built with it is the one built
without it, whatever changed in between, and rows that read the same give the objects made the
cycle before. `ReasonLedger`: a pending reason is written when what it says changes, and when
only its numbers change, once a minute."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select, update
from test_scheduler_loop import Harness

from gpupool.core.decisions import CycleResult
from gpupool.core.model import SchedulerSettings
from gpupool.server import persist
from gpupool.server.db import NodeRow, TaskRow, WorkloadRow
from gpupool.server.persist import ReasonLedger
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


def test_a_snapshot_with_the_cache_is_the_one_without_it_cycle_after_cycle(
    tmp_path: Path,
) -> None:
    """Binds, preemptions, completions, a task moved by hand, a node gone and a bad row: after
    each, the cached snapshot equals a fresh one."""
    _cycle_after_cycle(Harness(tmp_path, nodes="2x4"))


def test_the_same_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    """PostgreSQL hands the JSON columns read as text back in its own spelling."""
    harness = Harness(tmp_path, nodes="2x4", url=postgres_url)
    try:
        _cycle_after_cycle(harness)
    finally:
        harness.engine.dispose()


def _cycle_after_cycle(harness: Harness) -> None:
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


def test_a_reason_is_written_when_it_changes_and_its_numbers_once_a_minute(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path, nodes="1x4")
    harness.project("a", 4)
    harness.submit("a", "big", gpu=4)
    ledger = ReasonLedger(refresh_s=60)
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
    harness.clock.advance(59)
    _write_reason(harness, ledger, "big", "needs 8 GPUs; 1.00 GPU idle")
    assert _reason(harness, "big") == "needs 8 GPUs; 2.00 GPU idle"
    harness.clock.advance(1)  # a minute after it was written: the numbers are refreshed
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
