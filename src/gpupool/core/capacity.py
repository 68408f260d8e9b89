"""The scheduling cycle's session as a placement policy reads it (`policies.base.Capacity`).

Free CPU and memory are the session's own lists; free milli-GPU per device is read from the
session's used counts when a policy asks, with the devices new work may not use this cycle
(pinned burst devices, see `Placer`) reading -1 so that no request fits them.
"""

from __future__ import annotations

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.policies.base import Capacity, PackNode
from gpupool.core.session import UNTRACKED, Session, WorkRecord

Pins = dict[int, list[tuple[WorkRecord, int, int]]]
"""Per node, the burst devices kept from new placements: (work, task, device) of each dynamic
fraction whose idle burst device is pinned there (`Placer._pin_burst_devices`)."""


def pinned_devices(pins: Pins, node: int) -> set[int]:
    """Devices of `node` that pinned burst tasks still run on (an eviction frees them)."""
    held = pins.get(node)
    if not held:
        return set()
    return {device for work, task, device in held if task in work.allocs}


class SessionCapacity(Capacity):
    """A `Capacity` over a live session; cheap to build (one `PackNode` per node). Its lists
    are the session's own (the session changes them in place, it never replaces them).

    A node's free parts are read from the session's used counts and kept as a tuple from one
    read to the next while the node's version (`Session.node_version`, bumped by every change
    of its devices) stays the same: a node is read for every shape scored on it, and most reads
    find it unchanged (a list built per read cost ~1% of a cycle). Nodes that may have pinned
    devices (in `pins`) are read afresh.

    It holds the placer's `pins`, not the placer: a bound method of the placer here would make
    a reference cycle that keeps the whole session alive after the cycle until the collector
    runs."""

    def __init__(self, session: Session, pins: Pins) -> None:
        super().__init__(
            [
                PackNode(  # positional: keywords cost the compiled core twice as much here
                    n.name,
                    UNTRACKED if n.cpu_milli is None else n.cpu_milli,
                    UNTRACKED if n.memory_mib is None else n.memory_mib,
                    n.gpu_count,
                    n.gpu_model,
                )
                for n in session.nodes
            ],
            session.cpu_free,
            session.memory_free,
            session.node_tags,
        )
        self._used = session.device_used
        self._versions = session.node_version
        self._pins = pins
        self._free: list[tuple[int, ...]] = [()] * len(session.nodes)
        self._read_at = [-1] * len(session.nodes)

    def free_parts(self, node: int) -> tuple[int, ...]:
        pins = self._pins
        if pins and node in pins:
            free = [MILLI_PER_GPU - used for used in self._used[node]]
            for device in pinned_devices(pins, node):
                free[device] = -1
            return tuple(free)
        version = self._versions[node]
        if self._read_at[node] == version:
            return self._free[node]
        self._read_at[node] = version
        read = self._free[node] = tuple([MILLI_PER_GPU - used for used in self._used[node]])
        return read
