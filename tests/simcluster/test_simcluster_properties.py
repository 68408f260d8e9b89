"""Random decisions through the simulated cluster: whatever a (valid) core decides, under any
settings, the records, the snapshot and the clock stay consistent."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.core.decisions import (
    Bind,
    CycleResult,
    Decision,
    Evict,
    EvictionCause,
    Move,
    MoveCause,
)
from gpupool.core.model import (
    Snapshot,
    TaskPlacement,
)
from gpupool.simcluster import ClusterSettings, QuietHooks, SimulatedCluster, State

from .cluster_setup import NODES, PROJECTS, job

DEVICES = [(n.name, d) for n in NODES for d in range(n.gpu_count)]


def random_core(data: st.DataObject) -> object:
    """A cycle that decides something valid for the snapshot, or nothing, as drawn."""

    def cycle(snapshot: Snapshot) -> CycleResult:
        if data.draw(st.booleans(), label="quiet"):
            return CycleResult((), {}, ())
        used = {(p.node, d) for w in snapshot.workloads for p in w.placements for d in p.devices}
        free = [d for d in DEVICES if d not in used]
        running = [w for w in snapshot.workloads if w.placements]
        pending = [w for w in snapshot.workloads if not w.placements]
        choices: list[Decision] = []
        if pending and free:
            node, device = data.draw(st.sampled_from(free), label="device")
            w = data.draw(st.sampled_from(pending), label="bind")
            choices.append(Bind(w.name, (TaskPlacement(0, node, (device,)),), "fits"))
        if running:
            w = data.draw(st.sampled_from(running), label="victim")
            choices.append(Evict(w.name, EvictionCause.RECLAIM, "quota"))
            if free:
                node, device = data.draw(st.sampled_from(free), label="target")
                cause = data.draw(st.sampled_from(MoveCause), label="cause")
                target = TaskPlacement(0, node, (device,))
                choices.append(Move(w.name, cause, w.placements[0], target, "move"))
        if not choices:
            return CycleResult((), {}, ())
        return CycleResult((data.draw(st.sampled_from(choices), label="decision"),), {}, ())

    return cycle


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    grace_s=st.sampled_from([0, 7]),
    interval_s=st.sampled_from([0, 1, 10]),
    restart=st.booleans(),
    durations=st.lists(st.one_of(st.none(), st.integers(1, 60)), min_size=1, max_size=5),
    wakeups=st.lists(st.integers(0, 100), max_size=6),
)
def test_records_snapshot_and_clock_stay_consistent(
    data: st.DataObject,
    grace_s: int,
    interval_s: int,
    restart: bool,
    durations: list[int | None],
    wakeups: list[int],
) -> None:
    cluster_settings = ClusterSettings(
        grace_period_s=grace_s,
        checkpoint_interval_s=interval_s,
        restart_on_consolidation=restart,
        max_cycles_per_instant=8,
        cycle_every_instant=True,
    )
    cluster = SimulatedCluster(NODES, PROJECTS, cluster_settings, random_core(data))  # type: ignore[arg-type]
    for seq, duration in enumerate(durations):
        preemptible = data.draw(st.booleans(), label="preemptible")
        workload = job(f"w{seq}", preemptible=preemptible, seq=seq)
        cluster.add(workload, duration, State.PENDING)
    for t in [0, *wakeups]:
        cluster.push_wakeup(t)
    end = cluster.run(QuietHooks(), until_s=400)

    active = [
        r.workload for r in cluster.records.values() if r.state in (State.PENDING, State.RUNNING)
    ]
    assert list(cluster.snapshot(end.end_s).workloads) == active
    for record in cluster.records.values():
        assert (record.state is State.RUNNING) == bool(record.workload.placements)
        assert (record.stops_at_s is not None) == (record.state is State.STOPPING)
        assert (record.finish_s is not None) == (record.state in (State.SUCCEEDED, State.FAILED))
        assert record.lost_gpu_milli_s >= 0
        if record.state is State.SUCCEEDED:
            assert record.progress_s == record.duration_s
        if record.duration_s is not None and record.state is State.RUNNING:
            assert record.run_time_s(end.end_s) <= record.duration_s
        if interval_s == 1:
            assert record.lost_gpu_milli_s == 0
