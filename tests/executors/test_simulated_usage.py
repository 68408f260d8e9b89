"""The simulated executor's utilization model: deterministic, per workload type or as the
workload sets it, summed per device, sampled at most every `sample_interval_s`."""

from __future__ import annotations

from pathlib import Path

from gpupool.clock import FakeClock
from gpupool.core.model import WorkloadType
from gpupool.executors.base import Launch
from gpupool.executors.simulated import (
    DEFAULT_UTILIZATION_PERCENT,
    SIM_UTILIZATION_ENV,
    SimulatedExecutor,
    parse_simulated_nodes,
)
from gpupool.sim.workload import DEFAULT_UTIL_PERMILLE


def _launch(
    launch_id: str, devices: tuple[int, ...], milli: int, kind: str = "train", **env: str
) -> Launch:
    return Launch(
        launch_id=launch_id,
        project="p",
        workload=launch_id,
        task_index=0,
        node="sim-1",
        devices=devices,
        gpu_milli=milli,
        gpu_memory_mib=milli * 8,
        env=tuple(env.items()),
        workload_type=kind,
    )


def test_the_defaults_are_those_of_gpupool_simulate() -> None:
    assert {kind.value: DEFAULT_UTIL_PERMILLE[kind] // 10 for kind in WorkloadType} == (
        DEFAULT_UTILIZATION_PERCENT
    )


def test_devices_are_busy_by_their_tasks_model(tmp_path: Path) -> None:
    clock = FakeClock()
    executor = SimulatedExecutor(parse_simulated_nodes("1x4:8G"), clock, tmp_path / "j.jsonl")
    assert {s.utilization_percent for s in executor.usage_samples()} == {0}
    executor.start(
        [
            _launch("train", (0, 1), 1000),
            _launch("notebook", (2,), 500, "interactive"),
            _launch("serve", (2,), 500, "inference"),
            _launch("tuned", (3,), 500, **{SIM_UTILIZATION_ENV: "37.5"}),
        ]
    )
    assert executor.usage_samples() == ()  # sampled less than 5 s ago
    clock.advance(5)
    samples = executor.usage_samples()
    assert [(s.device_index, s.utilization_percent, s.memory_used_mib) for s in samples] == [
        (0, 100, 8000),
        (1, 100, 8000),
        (2, 35, 8000),  # 0.5 x 20% + 0.5 x 50%
        (3, 18, 4000),  # 0.5 x 37.5%
    ]
    assert {s.at_s for s in samples} == {clock.now_s()}

    # The same journal replayed gives the same model.
    executor.close()
    again = SimulatedExecutor(parse_simulated_nodes("1x4:8G"), clock, tmp_path / "j.jsonl")
    assert again.usage_samples() == samples


def test_a_bad_utilization_falls_back_to_the_default_and_says_so(tmp_path: Path) -> None:
    clock = FakeClock()
    executor = SimulatedExecutor(parse_simulated_nodes("1x1"), clock, sample_interval_s=0)
    executor.start([_launch("odd", (0,), 1000, "inference", **{SIM_UTILIZATION_ENV: "150"})])
    assert [s.utilization_percent for s in executor.usage_samples()] == [50]
    log, _ = executor.read_log("odd", 0, 10_000)
    assert b"GPUPOOL_SIM_UTILIZATION='150' is not a percent from 0 to 100" in log
    executor.stop_all(0)
    assert [s.utilization_percent for s in executor.usage_samples()] == [0]
