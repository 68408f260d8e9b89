"""Evicting for one task that only needs room on one node: victims counted, not moved, until a
node could take it.

`victims.evict_to_place` takes victims out of the session one at a time, in victim order, and
asks the placer after each whether the pending workload fits now; once it does, it puts back
every victim the placement does not need. Victims come in victim order, not by node, so an
attempt takes out and puts back tens of them for the one or two that stay out: most of the cost
of reclaim and preempt.

Where the pending workload is one task with no limit on its project's path that it would
exceed (`is_local`), whether it fits after an eviction depends on each node alone: evicting
work on one node cannot help it onto another. Then the victims are walked *virtually*: each
one's tasks are only counted against the nodes they run on (and its project's holdings lowered,
which the justification of the next victim reads, as it would after a real eviction), and only
when one of its nodes could now take the task (devices, CPU, memory: `could_take`, a necessary
condition) are the victims counted on that node taken out for real and the placer asked. If
it fits, the attempt goes on as `evict_to_place` would with those victims (`victims._settle`:
the unneeded ones back, the stayers evicted again in order, the task placed); if not, they go
back and the walk goes on. Each attempt first asks whether the task fits already (room left
over by an earlier eviction this cycle): then it is placed without a victim.

The victims chosen are those `evict_to_place` would choose (the first prefix of the victim order
after which the task fits, less the victims its placement does not need), but the session's
buckets see fewer changes, so later ties between equal nodes may break otherwise. Counting
changes nothing in the session, so the walk has no bound of its own on the victims it counts
(where taking each out stops at `max_victims_per_attempt`): in a large cluster the first prefix
that frees a device is often hundreds of victims long. The attempts of one action draw on one
count budget per cycle (`victims.CountBudget`), and reclaim's walks pass over the victims on
nodes that could not take the task with every candidate out (`Freeable`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final, Protocol, TypeVar

from gpupool.core.context import CycleContext
from gpupool.core.model import MILLI_PER_GPU, GpuRequestKind, Workload
from gpupool.core.records import TaskAlloc, WorkRecord, WorkState
from gpupool.core.statement import Statement

_WHOLE: Final = GpuRequestKind.WHOLE
_FRACTION: Final = GpuRequestKind.FRACTION
_MEMORY: Final = GpuRequestKind.MEMORY
_RUNNING: Final = WorkState.RUNNING
_EVICTED: Final = WorkState.EVICTED


def is_local(ctx: CycleContext, work: WorkRecord, gang: list[int]) -> bool:
    """One task to place, and no limit that evicting work elsewhere could bring it under:
    whether it fits depends on each node alone. A limit the task stays within already does not
    count (evictions only lower holdings), unless the task asks for GPU memory: its charge is
    known only once a device is chosen (the ask is a lower bound). (Victims are preemptible, so
    evicting them leaves the non-preemptible holdings that G3 checks a non-preemptible workload
    against as they are.)"""
    if len(gang) != 1:
        return False
    if not ctx.limit_levels(work.project):
        return True
    return work.spec.gpu.kind is not _MEMORY and not ctx.over_limit(work, ctx.ask(work, 1))


class _Unit(Protocol):
    """What `Freeable.on_possible_nodes` reads of a candidate (a `victims.VictimUnit`)."""

    @property
    def work(self) -> WorkRecord: ...


_U = TypeVar("_U", bound=_Unit)


class Freeable:
    """What the candidates of an action hold on each device, from the start of the action: a
    node where the devices would not hold one task of a request even with every candidate out
    cannot take it, and a walk for that request passes over the victims there.

    An over-estimate of what any attempt may free (its candidates are some of these, and
    victims already out or work placed since only lower it): a node it rules out is ruled out.
    Passing a victim over rather than counting it changes no eviction G10 keeps (one on such a
    node is never needed), and it leaves that victim's project holding more for the next
    victim's justification, which `victims._replay` checks again on the victims that stay."""

    def __init__(self, ctx: CycleContext, works: Iterable[WorkRecord]) -> None:
        self._session = ctx.session
        held: dict[int, dict[int, int]] = {}
        for work in works:
            for alloc in work.allocs.values():
                on_node = held.get(alloc.node)
                if on_node is None:
                    on_node = held[alloc.node] = {}
                milli = alloc.milli_per_device
                for device in alloc.devices:
                    on_node[device] = on_node.get(device, 0) + milli
        self._held = held
        """Node -> device -> milli-GPU the candidates hold there."""
        self._answers: dict[tuple[bool, int], dict[int, tuple[int, bool]]] = {}
        """Per request (whole GPUs?, amount): node -> (its version, whether it could hold one)."""

    def on_possible_nodes(self, units: Iterable[_U], spec: Workload) -> Iterator[_U]:
        """`units`, less those with no task on a node that could hold one task of `spec` with
        every candidate out (devices only: CPU and memory are left to the walk). A GPU-memory
        request passes everything (what it takes depends on the device). A node's answer is
        kept per request while the node is unchanged (`Session.node_version`): the attempts of
        a phase ask about the same nodes for the same few requests."""
        request = spec.gpu
        if request.kind is _MEMORY:
            yield from units
            return
        whole = request.kind is _WHOLE
        amount = request.amount
        answers = self._answers.get((whole, amount))
        if answers is None:
            answers = self._answers[(whole, amount)] = {}
        versions = self._session.node_version
        for unit in units:
            for alloc in unit.work.allocs.values():
                node = alloc.node
                known = answers.get(node)
                if known is None or known[0] != versions[node]:
                    known = answers[node] = (versions[node], self._could_hold(whole, amount, node))
                if known[1]:
                    yield unit
                    break

    def _could_hold(self, whole: bool, amount: int, node: int) -> bool:
        """Whether `node`'s devices would hold one task of `amount` (whole GPUs, else
        milli-GPU) with every candidate out."""
        held = self._held.get(node, _NOTHING)
        return _holds_one(self._session.device_used[node], held, whole, amount)


_NOTHING: Final[dict[int, int]] = {}


def _holds_one(used: list[int], freed: dict[int, int], whole: bool, amount: int) -> bool:
    """Whether devices with `used` milli-GPU in use, less `freed` on some of them, hold one task
    of `amount`: that many devices left empty (whole GPUs), or one device with room for that
    much milli-GPU."""
    if whole:
        empty = 0
        for device, milli in enumerate(used):
            if milli <= freed.get(device, 0):
                empty += 1
        return empty >= amount
    room = MILLI_PER_GPU - amount
    return any(milli - freed.get(device, 0) <= room for device, milli in enumerate(used))


class Counted:
    """A unit counted out: the candidate as the caller gave it (a `victims.VictimUnit`), the
    workload, its tasks counted out, and what they hold (GPU milli, CPU milli, memory MiB).
    A plain class, not a named tuple: mypyc (`benchmarks/compile_core.py`) cannot build a
    named tuple with an `object` field."""

    __slots__ = ("allocs", "held", "unit", "work")

    def __init__(
        self, unit: object, work: WorkRecord, allocs: list[TaskAlloc], held: tuple[int, int, int]
    ) -> None:
        self.unit = unit
        self.work = work
        self.allocs = allocs
        self.held = held


class _Freed:
    """What the victims counted so far would free on one node."""

    __slots__ = ("cpu_milli", "devices", "memory_mib", "positions")

    def __init__(self) -> None:
        self.cpu_milli = 0
        self.memory_mib = 0
        self.devices: dict[int, int] = {}
        """Device -> milli-GPU freed on it."""
        self.positions: list[int] = []
        """Positions in the walk of the victims with a task here."""


class VirtualVictims:
    """The victims of one walk: counted per node, and against their projects' holdings."""

    def __init__(self, ctx: CycleContext) -> None:
        self._session = ctx.session
        self.units: list[Counted] = []
        """In the walk's order."""
        self.reasons: list[object] = []
        """Per unit, what the caller's justification said when it was counted."""
        self._taken: dict[int, set[int]] = {}
        """Victim index -> its tasks counted out."""
        self._positions_of: dict[int, list[int]] = {}
        """Victim index -> the positions of its units counted."""
        self._by_node: dict[int, _Freed] = {}
        self._charged: list[bool] = []
        """Per unit: whether its holdings are lowered now (undone when it is taken out for real
        or the walk ends)."""

    def __len__(self) -> int:
        return len(self.units)

    def tasks_left(self, victim: WorkRecord, tasks: tuple[int, ...]) -> tuple[int, ...] | None:
        """The tasks of a unit still running and not counted out (all placed ones for an empty
        `tasks`), or None when the unit is gone (`victims._tasks_left`, with the count)."""
        taken = self._taken.get(victim.index)
        if not tasks:
            left = tuple(t for t in sorted(victim.allocs) if taken is None or t not in taken)
            return left or None
        for t in tasks:
            if t not in victim.allocs or (taken is not None and t in taken):
                return None
        return tasks

    def count(
        self, unit: object, victim: WorkRecord, tasks: tuple[int, ...], reason: object
    ) -> list[int]:
        """Count `tasks` of `victim` out (for `unit`); returns the nodes they ran on."""
        allocs = [victim.allocs[t] for t in tasks]
        spec = victim.spec
        cpu = spec.cpu_milli
        memory = spec.memory_mib
        gpu = 0
        position = len(self.units)
        by_node = self._by_node
        nodes: list[int] = []
        for alloc in allocs:
            node = alloc.node
            milli = alloc.milli_per_device
            freed = by_node.get(node)
            if freed is None:
                freed = by_node[node] = _Freed()
            freed.cpu_milli += cpu
            freed.memory_mib += memory
            devices = freed.devices
            for device in alloc.devices:
                devices[device] = devices.get(device, 0) + milli
                gpu += milli
            if not freed.positions or freed.positions[-1] != position:
                freed.positions.append(position)
            if node not in nodes:
                nodes.append(node)
        counted = Counted(unit, victim, allocs, (gpu, cpu * len(allocs), memory * len(allocs)))
        self.units.append(counted)
        self.reasons.append(reason)
        self._taken.setdefault(victim.index, set()).update(tasks)
        self._positions_of.setdefault(victim.index, []).append(position)
        self._charge(counted, -1)
        self._charged.append(True)
        return nodes

    def could_take(self, spec: Workload, node: int) -> bool:
        """Whether `node`, with the victims counted on it out, has the devices, CPU and memory
        for one task of `spec`: what the placer needs of a node before it looks further
        (selectors, taints, pinned devices and device memory only take nodes away)."""
        s = self._session
        freed = self._by_node[node]
        if s.cpu_free[node] + freed.cpu_milli < spec.cpu_milli:
            return False
        if s.memory_free[node] + freed.memory_mib < spec.memory_mib:
            return False
        return self._has_devices(spec, node)

    def devices_anywhere(self, spec: Workload) -> bool:
        """Whether some node has, or would have with the victims counted on it out, the devices
        for one task of `spec`, CPU and memory aside: `could_take`'s devices, on every node
        (the capacity indexes for the nodes without counted victims). Always true for a
        GPU-memory request (what it takes depends on the device)."""
        s = self._session
        request = spec.gpu
        if request.kind is _WHOLE:
            if any(s.nodes_by_empty[request.amount :]):
                return True
        elif request.kind is _FRACTION:
            keys = s.shared_free_keys
            if any(s.nodes_by_empty[1:]) or (keys and keys[-1] >= request.amount):
                return True
        else:
            return True
        return any(self._has_devices(spec, node) for node in self._by_node)

    def _has_devices(self, spec: Workload, node: int) -> bool:
        """Whether `node`, with the victims counted on it out, has the devices for one task."""
        s = self._session
        request = spec.gpu
        whole = request.kind is _WHOLE
        amount = request.amount if whole else request.milli_on(s.nodes[node].gpu_memory_mib)
        return _holds_one(s.device_used[node], self._by_node[node].devices, whole, amount)

    def positions_on(self, nodes: list[int]) -> list[int]:
        """Positions of the units with a task on any of `nodes`, in walk order, and of every
        other unit counted of a workload that those would leave running fewer tasks than its
        gang (G9): the rest of an elastic gang goes with its surplus tasks counted before it,
        wherever they run (they come first in victim order, so the count saw them first)."""
        found: set[int] = set()
        for node in nodes:
            found.update(self._by_node[node].positions)
        out: dict[int, int] = {}
        """Victim index -> its tasks taken out by the positions found."""
        for position in found:
            counted = self.units[position]
            index = counted.work.index
            out[index] = out.get(index, 0) + len(counted.allocs)
        for index, tasks_out in out.items():
            positions = self._positions_of[index]
            if len(positions) == 1:
                continue
            work = self.units[positions[0]].work
            left = len(work.allocs) - tasks_out
            if 0 < left < work.spec.gang_size:
                found.update(positions)
        return sorted(found)

    def take_out(self, statement: Statement, positions: list[int]) -> None:
        """Evict these units for real in `statement` (their counted holdings given back first,
        since the session lowers them itself)."""
        for position in positions:
            counted = self.units[position]
            victim = counted.work
            if self._charged[position]:
                self._charge(counted, +1)
                self._charged[position] = False
            for alloc in counted.allocs:
                statement.remove(victim, alloc.task_index)
            if not victim.allocs:
                victim.state = _EVICTED

    def put_back(self, statement: Statement, positions: list[int]) -> None:
        """Undo `take_out` (the statement holds only these), and count them again."""
        statement.rollback()
        for position in positions:
            counted = self.units[position]
            counted.work.state = _RUNNING
            if not self._charged[position]:
                self._charge(counted, -1)
                self._charged[position] = True

    def release(self) -> None:
        """Give back every holding still lowered by the count: the walk is over."""
        charged = self._charged
        for position, counted in enumerate(self.units):
            if charged[position]:
                self._charge(counted, +1)
                charged[position] = False

    def _charge(self, counted: Counted, sign: int) -> None:
        """Raise (+1) or lower (-1) the holdings along the victim's project path by what the
        unit holds, as the session's own eviction would (victims are preemptible: only
        `holding`)."""
        gpu, cpu, memory = counted.held
        if sign < 0:
            gpu, cpu, memory = -gpu, -cpu, -memory
        for holding, _nonpreemptible in self._session._holders[counted.work.project]:
            holding[0] += gpu
            holding[1] += cpu
            holding[2] += memory
