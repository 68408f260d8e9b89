"""The scheduling cycle's session as a placement policy reads it (`policies.base.Capacity`).

Free CPU and memory are the session's own lists; free milli-GPU per device is read from the
session's used counts when a policy asks, with the devices new work may not use this cycle
(pinned burst devices, see `Placer`) reading -1 so that no request fits them.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from typing import overload

from gpupool.core.model import MILLI_PER_GPU
from gpupool.core.policies.base import PackNode
from gpupool.core.session import UNTRACKED, Session

PinnedDevices = Callable[[int], set[int]]
"""The devices of a node kept from new placements now (empty set for none)."""


class _DeviceFree(Sequence[Sequence[int]]):
    """Each node's free parts as a tuple, kept from one read to the next while the node's
    version (`Session.node_version`, bumped by every change of its devices) stays the same: a
    node is read for every shape scored on it, and most reads find it unchanged (a list built
    per read cost ~1% of a cycle). Nodes that may have pinned devices are read afresh."""

    __slots__ = ("_free", "_pinned", "_pinned_nodes", "_read_at", "_session", "_used", "_versions")

    def __init__(
        self, session: Session, pinned: PinnedDevices, pinned_nodes: Container[int] | None
    ) -> None:
        self._session = session
        self._used = session.device_used
        self._versions = session.node_version
        self._pinned = pinned
        self._pinned_nodes = pinned_nodes
        self._free: list[tuple[int, ...]] = [()] * len(session.nodes)
        self._read_at = [-1] * len(session.nodes)

    def __len__(self) -> int:
        return len(self._session.nodes)

    @overload
    def __getitem__(self, node: int) -> Sequence[int]: ...
    @overload
    def __getitem__(self, node: slice) -> Sequence[Sequence[int]]: ...

    def __getitem__(self, node: int | slice) -> Sequence[int] | Sequence[Sequence[int]]:
        if isinstance(node, slice):
            return [self[i] for i in range(len(self))[node]]
        pinned_nodes = self._pinned_nodes
        if pinned_nodes is None or node in pinned_nodes:
            free = [MILLI_PER_GPU - used for used in self._used[node]]
            for device in self._pinned(node):
                free[device] = -1
            return tuple(free)
        version = self._versions[node]
        if self._read_at[node] == version:
            return self._free[node]
        self._read_at[node] = version
        read = self._free[node] = tuple([MILLI_PER_GPU - used for used in self._used[node]])
        return read


class SessionCapacity:
    """A `Capacity` over a live session; cheap to build (one `PackNode` per node). Its members
    are plain attributes, not properties: a policy reads them for every candidate it scores,
    and the session changes its lists in place (it never replaces them)."""

    __slots__ = ("affinity", "cpu_free", "device_free", "memory_free", "nodes")

    def __init__(
        self,
        session: Session,
        pinned: PinnedDevices,
        pinned_nodes: Container[int] | None = None,
    ) -> None:
        """`pinned_nodes`, when given, holds every node `pinned` may name devices of (the
        others are not asked)."""
        self.nodes: Sequence[PackNode] = tuple(
            PackNode(  # positional: keywords cost the compiled core twice as much here
                n.name,
                UNTRACKED if n.cpu_milli is None else n.cpu_milli,
                UNTRACKED if n.memory_mib is None else n.memory_mib,
                n.gpu_count,
                n.gpu_model,
            )
            for n in session.nodes
        )
        self.cpu_free: Sequence[int] = session.cpu_free
        self.memory_free: Sequence[int] = session.memory_free
        self.device_free: Sequence[Sequence[int]] = _DeviceFree(session, pinned, pinned_nodes)
        self.affinity: Sequence[Mapping[int, int]] = session.node_tags
