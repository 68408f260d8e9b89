"""The local executor's GPU-memory watchdog: which tasks use more memory than they were given."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupool.executors.gpus.devices import ProcessGpuMemory
from gpupool.executors.local_journal import Run

__all__ = ["Eviction", "evictions"]


@dataclass(frozen=True, slots=True)
class Eviction:
    """Stop `run` after `grace_s` for `reason`; `requeues`: it runs again later."""

    run: Run
    reason: str
    requeues: bool
    grace_s: int


def evictions(
    runs: Iterable[Run],
    usage: Sequence[ProcessGpuMemory],
    members: Mapping[int, list[int]],
    capacity_mib: Mapping[int, int],
) -> list[Eviction]:
    """The tasks to evict, in the order of `runs`, given GPU memory per process (`usage`), the
    processes of each task's group (`members`, by group leader pid) and each device's memory:
    over its limit, a task fails with the reason; a dynamic fraction bursting above its request
    while the device's memory is claimed (by the others' requests or use) is preempted and runs
    again later."""
    group_of = {pid: group for group, pids in members.items() for pid in pids}
    used: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    device_used: dict[int, int] = defaultdict(int)
    for item in usage:
        device_used[item.device_index] += item.used_mib
        group = group_of.get(item.pid)
        if group is not None:
            used[group][item.device_index] += item.used_mib
    live = [
        run for run in runs if run.ended is None and run.pid is not None and run.kill_at_s is None
    ]
    claims: dict[int, int] = defaultdict(int)
    for device, total in device_used.items():
        ours = sum(used[run.pid or 0].get(device, 0) for run in live)
        claims[device] = total - ours
    for run in live:
        for device in run.launch.devices:
            claims[device] += max(run.launch.gpu_memory_mib, used[run.pid or 0].get(device, 0))
    found: list[Eviction] = []
    for run in live:
        for device, used_mib in used.get(run.pid or 0, {}).items():
            request_mib = run.launch.gpu_memory_mib
            limit_mib = run.launch.burst_memory_mib or request_mib
            if used_mib > limit_mib:
                reason = (
                    f"evicted: used {used_mib} MiB of GPU memory on device {device}, "
                    f"above its limit of {limit_mib} MiB; ask for more (--gpu or "
                    "--gpu-memory) or use less"
                )
                found.append(Eviction(run, reason, requeues=False, grace_s=0))
                break
            if used_mib > request_mib and claims[device] > capacity_mib.get(device, claims[device]):
                reason = (
                    f"evicted: bursting to {used_mib} MiB on device {device} above its "
                    f"request of {request_mib} MiB while that memory is claimed by "
                    "another task; it will run again"
                )
                grace_s = run.launch.grace_period_s
                found.append(Eviction(run, reason, requeues=True, grace_s=grace_s))
                break
    return found
