"""Free capacity per node and device while the snapshot's running work is laid out."""

from __future__ import annotations

import random

from cycle_bench.trace import FRACTION_VALUES, GPUS_PER_NODE, NODE_CPU_MILLI, NODE_MEMORY_MIB
from gpupool.core.model import MILLI_PER_GPU


class Cluster:
    """Free capacity per node and device while running work is laid out (generator only)."""

    def __init__(self, nodes: int, rng: random.Random) -> None:
        self.rng = rng
        self.free: list[list[int]] = [[MILLI_PER_GPU] * GPUS_PER_NODE for _ in range(nodes)]
        self.cpu_free = [NODE_CPU_MILLI] * nodes
        self.mem_free = [NODE_MEMORY_MIB] * nodes
        # Nodes bucketed by how many empty devices they have, with O(1) moves between buckets.
        self.by_empty: list[list[int]] = [[] for _ in range(GPUS_PER_NODE + 1)]
        self.by_empty[GPUS_PER_NODE] = list(range(nodes))
        self.pos = list(range(nodes))
        self.empty = [GPUS_PER_NODE] * nodes
        # Devices shared by fractions with room left; stale entries are dropped lazily.
        self.shared: list[tuple[int, int]] = []

    def _set_empty(self, node: int, count: int) -> None:
        old = self.empty[node]
        if old == count:
            return
        bucket = self.by_empty[old]
        i = self.pos[node]
        last = bucket[-1]
        bucket[i] = last
        self.pos[last] = i
        bucket.pop()
        self.pos[node] = len(self.by_empty[count])
        self.by_empty[count].append(node)
        self.empty[node] = count

    def _fits_host(self, node: int, cpu: int, mem: int) -> bool:
        return self.cpu_free[node] >= cpu and self.mem_free[node] >= mem

    def _pick_node(self, need_empty: int, cpu: int, mem: int) -> int | None:
        """A node with at least `need_empty` empty devices and room for the task's CPU/memory.

        30% of the time best fit (fewest empty devices that suffice), otherwise uniform among
        the eligible nodes: the mix leaves the idle capacity realistically fragmented.
        """
        buckets = [b for b in self.by_empty[need_empty:] if b]
        if not buckets:
            return None
        for _ in range(8):
            if self.rng.random() < 0.3:
                bucket = buckets[0]
            else:
                total = sum(len(b) for b in buckets)
                i = self.rng.randrange(total)
                for bucket in buckets:
                    if i < len(bucket):
                        break
                    i -= len(bucket)
            node = bucket[self.rng.randrange(len(bucket))]
            if self._fits_host(node, cpu, mem):
                return node
        return None

    def take_whole(self, node: int, count: int, cpu: int, mem: int) -> tuple[int, ...]:
        devices = tuple(d for d, f in enumerate(self.free[node]) if f == MILLI_PER_GPU)[:count]
        for d in devices:
            self.free[node][d] = 0
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= mem
        self._set_empty(node, self.empty[node] - count)
        return devices

    def take_fraction(self, node: int, device: int, milli: int, cpu: int, mem: int) -> None:
        was_empty = self.free[node][device] == MILLI_PER_GPU
        self.free[node][device] -= milli
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= mem
        if was_empty:
            self._set_empty(node, self.empty[node] - 1)
            self.shared.append((node, device))

    def release(self, node: int, devices: tuple[int, ...], milli: int, cpu: int, mem: int) -> None:
        """Undo a take (per-device `milli`), used to roll back a gang that did not fit whole."""
        for d in devices:
            self.free[node][d] += milli
        self.cpu_free[node] += cpu
        self.mem_free[node] += mem
        empty = sum(1 for f in self.free[node] if f == MILLI_PER_GPU)
        self._set_empty(node, empty)

    def place_fraction(self, milli: int, cpu: int, mem: int) -> tuple[int, int] | None:
        """Onto a device already shared (usually), else onto an empty device."""
        if self.shared and self.rng.random() < 0.8:
            for _ in range(8):
                if not self.shared:
                    break
                i = self.rng.randrange(len(self.shared))
                node, device = self.shared[i]
                room = self.free[node][device]
                if room < min(FRACTION_VALUES):
                    self.shared[i] = self.shared[-1]
                    self.shared.pop()
                    continue
                if room >= milli and self._fits_host(node, cpu, mem):
                    self.take_fraction(node, device, milli, cpu, mem)
                    return node, device
        picked = self._pick_node(1, cpu, mem)
        if picked is None:
            return None
        device = self.free[picked].index(MILLI_PER_GPU)
        self.take_fraction(picked, device, milli, cpu, mem)
        return picked, device

    def place_gang(
        self, tasks: int, per_task: int, cpu: int, mem: int
    ) -> list[tuple[int, tuple[int, ...]]] | None:
        """Whole-device tasks: all on one node when they fit there, else one node per task."""
        if tasks * per_task <= GPUS_PER_NODE:
            node = self._pick_node(tasks * per_task, cpu * tasks, mem * tasks)
            if node is not None:
                return [(node, self.take_whole(node, per_task, cpu, mem)) for _ in range(tasks)]
        placed: list[tuple[int, tuple[int, ...]]] = []
        for _ in range(tasks):
            node = self._pick_node(per_task, cpu, mem)
            if node is None:
                for n, devices in placed:
                    self.release(n, devices, MILLI_PER_GPU, cpu, mem)
                return None
            placed.append((node, self.take_whole(node, per_task, cpu, mem)))
        return placed
