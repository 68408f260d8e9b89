"""The local executor's GPU-memory watchdog as a pure decision: which tasks to evict and why
(the executor applying it to real processes is tested in test_local_executor.py)."""

from __future__ import annotations

from gpupool.executors.base import Launch
from gpupool.executors.gpus.devices import ProcessGpuMemory
from gpupool.executors.local_journal import Run
from gpupool.executors.local_watchdog import evictions

CAPACITY_MIB = {0: 80_000}


def _run(name: str, pid: int, request_mib: int, burst_mib: int | None = None) -> Run:
    launch = Launch(
        launch_id=name,
        project="p",
        workload=name,
        task_index=0,
        node="n",
        devices=(0,),
        gpu_milli=500,
        gpu_memory_mib=request_mib,
        grace_period_s=7,
        burst_memory_mib=burst_mib,
    )
    return Run(launch, 0.0, pid=pid)


def test_over_its_limit_fails_at_once() -> None:
    run = _run("a", 100, request_mib=10_000)
    usage = [ProcessGpuMemory(pid=101, device_index=0, used_mib=12_000)]
    [eviction] = evictions([run], usage, {100: [100, 101]}, CAPACITY_MIB)
    assert (eviction.run, eviction.requeues, eviction.grace_s) == (run, False, 0)
    assert "used 12000 MiB of GPU memory on device 0, above its limit of 10000 MiB" in (
        eviction.reason
    )


def test_a_burst_is_preempted_only_while_the_memory_is_claimed() -> None:
    bursting = _run("a", 100, request_mib=30_000, burst_mib=60_000)
    usage = [ProcessGpuMemory(pid=100, device_index=0, used_mib=50_000)]
    assert evictions([bursting], usage, {100: [100]}, CAPACITY_MIB) == []

    other = _run("b", 200, request_mib=40_000)  # 50_000 + 40_000 claimed > 80_000
    [eviction] = evictions([bursting, other], usage, {100: [100]}, CAPACITY_MIB)
    assert (eviction.run, eviction.requeues, eviction.grace_s) == (bursting, True, 7)
    assert "bursting to 50000 MiB on device 0 above its request of 30000 MiB" in eviction.reason


def test_a_task_already_stopping_is_left_alone() -> None:
    stopping = _run("a", 100, request_mib=1_000)
    stopping.kill_at_s = 5.0
    usage = [ProcessGpuMemory(pid=100, device_index=0, used_mib=9_000)]
    assert evictions([stopping], usage, {100: [100]}, CAPACITY_MIB) == []
