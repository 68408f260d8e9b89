"""Devices that a scenario's initially running workloads hold, to place them and refuse overcommit.

A scenario may list workloads already running (`running_on`, optionally `devices`); the loader
places them here, device by device, before the simulation starts, and refuses a file that asks
for more than a node has. Errors are `ValueError`s that the loader turns into a `UserFileError`
on the workload's line.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.core.model import MILLI_PER_GPU, GpuRequest
from gpupool.core.model import Node as ClusterNode

__all__ = ["DeviceBook"]


class DeviceBook:
    """What the initially running workloads use, to place them and refuse overcommitment."""

    def __init__(self, nodes: Mapping[str, ClusterNode]) -> None:
        self._nodes = nodes
        self._whole: dict[str, set[int]] = {name: set() for name in nodes}
        self._milli: dict[tuple[str, int], int] = {}
        self._memory: dict[tuple[str, int], int] = {}
        self._cpu: dict[str, int] = {}
        self._ram: dict[str, int] = {}

    def take(
        self,
        node: ClusterNode,
        request: GpuRequest,
        wanted: tuple[int, ...] | None,
        cpu_milli: int,
        memory_mib: int,
    ) -> tuple[int, ...]:
        """Devices for one task on `node` (`wanted`, or the first free); ValueError if none."""
        for index in wanted or ():
            if index >= node.gpu_count:
                raise ValueError(
                    f"device {index} does not exist on {node.name}, which has devices "
                    f"0 to {node.gpu_count - 1}"
                    if node.gpu_count
                    else f"device {index} does not exist: {node.name} has no GPUs"
                )
        self._take_cpu_memory(node, cpu_milli, memory_mib)
        if request.is_shared:
            return self._take_shared(node, request, wanted)
        return self._take_whole(node, request.amount, wanted)

    def _take_cpu_memory(self, node: ClusterNode, cpu_milli: int, memory_mib: int) -> None:
        cpu = self._cpu.get(node.name, 0) + cpu_milli
        ram = self._ram.get(node.name, 0) + memory_mib
        if node.cpu_milli is not None and cpu > node.cpu_milli:
            raise ValueError(
                f"{node.name} has {node.cpu_milli} cpu_milli; running work needs {cpu}"
            )
        if node.memory_mib is not None and ram > node.memory_mib:
            raise ValueError(
                f"{node.name} has {node.memory_mib} memory_mib; running work needs {ram}"
            )
        self._cpu[node.name] = cpu
        self._ram[node.name] = ram

    def _is_free(self, node: str, device: int) -> bool:
        return device not in self._whole[node] and (node, device) not in self._milli

    def _take_whole(
        self, node: ClusterNode, count: int, wanted: tuple[int, ...] | None
    ) -> tuple[int, ...]:
        if wanted is None:
            free = [d for d in range(node.gpu_count) if self._is_free(node.name, d)]
            if len(free) < count:
                raise ValueError(
                    f"needs {count} free whole device(s) on {node.name}; {len(free)} left"
                )
            wanted = tuple(free[:count])
        for device in wanted:
            if not self._is_free(node.name, device):
                raise ValueError(f"device {device} of {node.name} is already in use")
        self._whole[node.name].update(wanted)
        return wanted

    def _take_shared(
        self, node: ClusterNode, request: GpuRequest, wanted: tuple[int, ...] | None
    ) -> tuple[int, ...]:
        milli = request.milli_on(node.gpu_memory_mib)
        memory = request.memory_mib_on(node.gpu_memory_mib)

        def room(device: int) -> bool:
            key = (node.name, device)
            return (
                device not in self._whole[node.name]
                and self._milli.get(key, 0) + milli <= MILLI_PER_GPU
                and self._memory.get(key, 0) + memory <= node.gpu_memory_mib
            )

        if wanted is None:
            fits = [d for d in range(node.gpu_count) if room(d)]
            if not fits:
                raise ValueError(f"no device of {node.name} has room for this fraction")
            device = fits[0]
        else:
            (device,) = wanted
            if not room(device):
                raise ValueError(f"device {device} of {node.name} has no room for this fraction")
        key = (node.name, device)
        self._milli[key] = self._milli.get(key, 0) + milli
        self._memory[key] = self._memory.get(key, 0) + memory
        return (device,)
