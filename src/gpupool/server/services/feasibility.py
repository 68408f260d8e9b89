"""Refuse at submission what no node could ever run, saying why: more GPU memory per task than
any device has, more whole GPUs, CPU or memory per task than any node has, a node selector no
node matches, a gang larger than the cluster. Without this such work waits forever (or, asking
for more memory than a device has, is placed on a whole device it will not fit).

The nodes are read once per batch of submissions (`ClusterNodes.load`); checks work on the
distinct node shapes, so a batch of hundreds against thousands of nodes stays cheap. With no
nodes yet (a cluster still joining) nothing is refused: there is nothing to compare with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.api.schemas import WorkloadIn
from gpupool.core.model import GpuRequestKind
from gpupool.server.db import NodeRow
from gpupool.server.errors import invalid
from gpupool.server.snapshot import NODE_STATES

MILLI_PER_GPU = 1000
_SHOWN_VALUES = 8


@dataclass(frozen=True, slots=True)
class NodeShape:
    name: str
    gpu_count: int
    gpu_memory_mib: int
    gpu_model: str | None
    labels: Mapping[str, str]
    cpu_milli: int | None = None
    """None: not tracked (never the bottleneck), as the scheduler reads it."""
    memory_mib: int | None = None

    def label(self, key: str) -> str | None:
        """As the scheduler reads it: `gpu_model` is the node's GPU model."""
        return self.gpu_model if key == "gpu_model" else self.labels.get(key)


class ClusterNodes:
    """The nodes a submission could run on (those the scheduler sees: ready, cordoned or not
    ready), with what matches each node selector remembered."""

    def __init__(self, nodes: Iterable[NodeShape]) -> None:
        self.nodes = tuple(nodes)
        self._has_gpus = any(node.gpu_count > 0 for node in self.nodes)
        self._shapes: dict[tuple[tuple[str, tuple[str, ...]], ...], Counter[_Shape]] = {}

    @classmethod
    def load(cls, session: Session) -> ClusterNodes:
        rows = session.execute(
            select(
                NodeRow.name,
                NodeRow.gpu_count,
                NodeRow.gpu_memory_mib,
                NodeRow.gpu_model,
                NodeRow.labels,
                NodeRow.cpu_milli,
                NodeRow.memory_mib,
            ).where(NodeRow.state.in_(NODE_STATES))
        )
        return cls(
            NodeShape(
                row.name,
                row.gpu_count,
                row.gpu_memory_mib,
                row.gpu_model,
                row.labels or {},
                row.cpu_milli,
                row.memory_mib,
            )
            for row in rows
        )

    def check(self, body: WorkloadIn, kind: GpuRequestKind, amount: int) -> None:
        """`ApiError` (422, with the field and the fix) if no node could ever run `body`, which
        asks for `amount` per task (devices, milli-GPU or MiB as `kind` says)."""
        if not self.nodes:
            return
        selector = tuple(sorted((key, tuple(values)) for key, values in body.node_selector.items()))
        shapes = self._shapes.get(selector)
        if shapes is None:
            shapes = self._shapes[selector] = self._match(selector)
        if not self._has_gpus:
            return  # no GPUs anywhere yet: nothing to compare a GPU request with
        where = "the nodes its node_selector matches" if selector else "the cluster"
        if not shapes:
            raise invalid(
                f"node_selector matches only nodes without GPUs: drop or change it "
                f"({self._labels_in_use(selector)})",
                "node_selector",
            )
        if kind is GpuRequestKind.WHOLE:
            largest = max(shape.gpu_count for shape in shapes)
            if amount > largest:
                raise invalid(
                    f"gpu {amount} asks for {amount} GPUs per task on one node, but the largest "
                    f"node in {where} has {largest}: ask for at most {largest} per task (and more "
                    "tasks, if the program spreads over nodes)",
                    "gpu",
                )
        elif kind is GpuRequestKind.MEMORY:
            largest = max(shape.gpu_memory_mib for shape in shapes)
            if amount > largest:
                raise invalid(
                    f"gpu_memory {body.gpu_memory} ({amount} MiB) is more than any GPU in {where} "
                    f"has (the largest has {largest} MiB): ask for at most {_memory(largest)}, or "
                    "for a "
                    "whole device with gpu: 1",
                    "gpu_memory",
                )
        _check_cpu_and_memory(body, shapes, where)
        fits = sum(nodes * _tasks_on(shape, kind, amount, body) for shape, nodes in shapes.items())
        if fits == 0:
            raise invalid(
                f"no node in {where} has what one task asks for all at once (GPU, "
                f"cpu_milli {body.cpu_milli}, memory {body.memory_mib} MiB): the nodes with "
                "enough GPUs have too little CPU or memory; ask for less of one",
                "cpu_milli" if body.cpu_milli else "memory",
            )
        gang = body.tasks if body.min_available is None else body.min_available
        if gang > fits:
            field = "tasks" if body.min_available is None else "min_available"
            gpus = sum(shape.gpu_count * nodes for shape, nodes in shapes.items())
            raise invalid(
                f"its {gang} tasks must run together ({field}), but {where} can hold at most "
                f"{fits} such tasks at once ({gpus} GPUs on {sum(shapes.values())} nodes): lower "
                f"{field} to {fits} or less, or ask for less GPU per task",
                field,
            )

    def _match(self, selector: tuple[tuple[str, tuple[str, ...]], ...]) -> Counter[_Shape]:
        matching = [
            node
            for node in self.nodes
            if all(node.label(key) in values for key, values in selector)
        ]
        if not matching:
            raise invalid(
                f"node_selector matches no node: {self._labels_in_use(selector)}; pick values "
                "the nodes have (gpupool nodes lists them) or leave node_selector out",
                "node_selector",
            )
        return Counter(
            _Shape(n.gpu_count, n.gpu_memory_mib, n.cpu_milli, n.memory_mib)
            for n in matching
            if n.gpu_count > 0
        )

    def _labels_in_use(self, selector: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
        """For each key of `selector`: the values the nodes have, or that none has it."""
        parts = []
        for key, wanted in selector:
            have = sorted({v for node in self.nodes if (v := node.label(key)) is not None})
            asked = f"{key} in [{', '.join(wanted)}]"
            if not have:
                keys = sorted({k for node in self.nodes for k in node.labels} | {"gpu_model"})
                shown = ", ".join(keys[:_SHOWN_VALUES]) + (", ..." if len(keys) > 8 else "")
                parts.append(f"{asked}: no node has the label {key} (labels in use: {shown})")
            else:
                shown = ", ".join(have[:_SHOWN_VALUES]) + (", ..." if len(have) > 8 else "")
                parts.append(f"{asked}: the nodes have {key} = {shown}")
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a node with GPUs has, as far as one task's fit goes."""

    gpu_count: int
    gpu_memory_mib: int
    cpu_milli: int | None
    memory_mib: int | None


def _check_cpu_and_memory(body: WorkloadIn, shapes: Iterable[_Shape], where: str) -> None:
    """Refuse CPU or memory per task above every node's (nodes that do not track it count as
    having any amount, as they do for the scheduler)."""
    shapes = tuple(shapes)
    cpu = body.cpu_milli
    if cpu and all(shape.cpu_milli is not None for shape in shapes):
        largest = max(shape.cpu_milli or 0 for shape in shapes)
        if cpu > largest:
            raise invalid(
                f"cpu_milli {cpu} asks for {_cpus(cpu)} CPUs per task on one node, but the "
                f"largest node in {where} has {_cpus(largest)}: ask for at most cpu_milli "
                f"{largest} per task (and more tasks, if the program spreads over nodes)",
                "cpu_milli",
            )
    memory = body.memory_mib
    if memory and all(shape.memory_mib is not None for shape in shapes):
        largest = max(shape.memory_mib or 0 for shape in shapes)
        if memory > largest:
            raise invalid(
                f"memory {body.memory} ({memory} MiB) is more than any node in {where} has "
                f"(the largest has {largest} MiB): ask for at most {_memory(largest)} per task "
                "(and more tasks, if the program spreads over nodes)",
                "memory",
            )


def _tasks_on(shape: _Shape, kind: GpuRequestKind, amount: int, body: WorkloadIn) -> int:
    """How many tasks of one request a node of this shape can hold at once, at most."""
    count = shape.gpu_count
    if kind is GpuRequestKind.WHOLE:
        tasks = count // amount
    elif kind is GpuRequestKind.FRACTION:
        tasks = count * (MILLI_PER_GPU // max(amount, 1))
    elif amount > shape.gpu_memory_mib:
        tasks = 0
    else:
        milli = min(MILLI_PER_GPU, -(-amount * MILLI_PER_GPU // shape.gpu_memory_mib))
        tasks = count * (MILLI_PER_GPU // max(milli, 1))
    if body.cpu_milli and shape.cpu_milli is not None:
        tasks = min(tasks, shape.cpu_milli // body.cpu_milli)
    if body.memory_mib and shape.memory_mib is not None:
        tasks = min(tasks, shape.memory_mib // body.memory_mib)
    return tasks


def _cpus(milli: int) -> str:
    return f"{milli / 1000:g}"


def _memory(mib: int) -> str:
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"
