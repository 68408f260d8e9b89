"""Small builders for core tests, a cycle driver that runs to a fixed point, and invariant checks.

Amounts in the builders are in GPUs as a user writes them (`gpu=2`, `gpu=0.5`, `quota=1.5`) and
are converted to milli-GPU once, here. Time never comes from a clock: `now_s` is data.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import pytest

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, CycleResult, Decision, Evict, Move, ProjectShare
from gpupool.core.model import (
    MILLI_PER_GPU,
    NO_LIMITS,
    GpuRequest,
    Limits,
    Node,
    PlacementStrategy,
    Project,
    Resources,
    SchedulerSettings,
    Snapshot,
    Taint,
    TaintEffect,
    TaskPlacement,
    Toleration,
    Workload,
    WorkloadType,
)
from gpupool.corebuild import core_build
from gpupool.simcluster.apply import apply_decisions

pure_core_only = pytest.mark.skipif(
    core_build() == "compiled",
    reason="replaces a function of the core, which the compiled core calls directly; the "
    "pure-Python run tests it",
)
"""For a test that patches the core (a spy, or one path swapped for another): patched or not,
compiled code calls its own functions, so such a test would pass without testing anything."""

# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------


def milli(gpus: float) -> int:
    """GPUs as a user writes them -> milli-GPU."""
    return round(gpus * MILLI_PER_GPU)


def node(
    name: str,
    gpus: int = 4,
    *,
    gpu_memory_mib: int = 81920,
    gpu_model: str | None = None,
    cpu_milli: int | None = None,
    memory_mib: int | None = None,
    labels: Sequence[tuple[str, str]] = (),
    taints: Sequence[Taint] = (),
) -> Node:
    return Node(
        name=name,
        gpu_count=gpus,
        gpu_memory_mib=gpu_memory_mib,
        gpu_model=gpu_model,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        labels=tuple(labels),
        taints=tuple(taints),
    )


CORDONED = Taint("node.kubernetes.io/unschedulable", None, TaintEffect.NO_SCHEDULE)
"""How a driver hands the core a cordoned node."""
NOT_READY = Taint("node.kubernetes.io/not-ready", None, TaintEffect.NO_SCHEDULE)
"""How a driver hands the core a NotReady node."""


def project(
    name: str,
    quota: float = 0,
    *,
    parent: str | None = None,
    weight: int = 1,
    limit: float | None = None,
    priority: int = 0,
    min_runtime_s: int = 0,
) -> Project:
    """A project (or department) with a GPU quota and optional GPU limit, in GPUs."""
    return Project(
        name=name,
        parent=parent,
        quota=Resources(gpu_milli=milli(quota)),
        over_quota_weight=weight,
        limit=NO_LIMITS if limit is None else Limits(gpu_milli=milli(limit)),
        priority=priority,
        min_runtime_s=min_runtime_s,
    )


def gpu_request(
    gpu: float | None = 1, gpu_limit: float | None = None, gpu_memory_mib: int | None = None
) -> GpuRequest:
    if gpu_memory_mib is not None:
        return GpuRequest.memory(gpu_memory_mib)
    if gpu is None:
        raise ValueError("a workload needs gpu or gpu_memory_mib")
    if gpu >= 1:
        if gpu != int(gpu):
            raise ValueError(f"whole-GPU requests are integers, got {gpu}")
        return GpuRequest.whole(int(gpu))
    if gpu <= 0:
        raise ValueError(f"gpu must be positive, got {gpu}")
    return GpuRequest.fraction(milli(gpu), None if gpu_limit is None else milli(gpu_limit))


def workload(
    name: str,
    project: str,
    kind: WorkloadType,
    gpu: float | None = 1,
    *,
    tasks: int = 1,
    min_available: int | None = None,
    priority: int | None = None,
    preemptible: bool | None = None,
    gpu_limit: float | None = None,
    gpu_memory_mib: int | None = None,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    min_runtime_s: int | None = None,
    submit: int = 0,
    node_selector: Sequence[tuple[str, Sequence[str]]] = (),
    tolerations: Sequence[Toleration] = (),
    movable: bool = True,
) -> Workload:
    return Workload(
        name=name,
        project=project,
        type=kind,
        gpu=gpu_request(gpu, gpu_limit, gpu_memory_mib),
        tasks=tasks,
        min_available=min_available,
        priority=priority,
        preemptible=preemptible,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        node_selector=tuple((k, tuple(v)) for k, v in node_selector),
        min_runtime_s=min_runtime_s,
        submit_seq=submit,
        tolerations=tuple(tolerations),
        movable=movable,
    )


def train(name: str, project: str, gpu: float | None = 1, **kw: Any) -> Workload:
    return workload(name, project, WorkloadType.TRAIN, gpu, **kw)


def interactive(name: str, project: str, gpu: float | None = 1, **kw: Any) -> Workload:
    return workload(name, project, WorkloadType.INTERACTIVE, gpu, **kw)


def inference(name: str, project: str, gpu: float | None = 1, **kw: Any) -> Workload:
    return workload(name, project, WorkloadType.INFERENCE, gpu, **kw)


def running(
    w: Workload,
    node: str | Sequence[tuple[str, Sequence[int]]],
    devices: Sequence[int] = (0,),
    started_at_s: int = 0,
    *,
    burst_device: int | None = None,
) -> Workload:
    """`w` already running.

    One task: `running(w, "n1", (0, 1), started_at_s=-60)`. Several tasks: pass one
    `(node, devices)` pair per task: `running(w, [("n1", (0,)), ("n2", (0,))])`.
    """
    if isinstance(node, str):
        per_task: list[tuple[str, Sequence[int]]] = [(node, devices)]
    else:
        per_task = list(node)
    placements = tuple(
        TaskPlacement(
            task_index=i,
            node=n,
            devices=tuple(d),
            burst_device=burst_device if len(per_task) == 1 else None,
        )
        for i, (n, d) in enumerate(per_task)
    )
    return replace(w, placements=placements, started_at_s=started_at_s)


def snapshot(
    nodes: Iterable[Node],
    projects: Iterable[Project],
    workloads: Iterable[Workload],
    *,
    now_s: int = 0,
    placement: str = PlacementStrategy.BINPACK,
    seq_from_order: bool = True,
) -> Snapshot:
    """A snapshot. With `seq_from_order`, the list order of `workloads` is submission order."""
    ws = tuple(workloads)
    if seq_from_order:
        ws = tuple(replace(w, submit_seq=i) for i, w in enumerate(ws))
    return Snapshot(
        nodes=tuple(nodes),
        projects=tuple(projects),
        workloads=ws,
        now_s=now_s,
        settings=SchedulerSettings(placement=placement),
    )


# --------------------------------------------------------------------------------------------
# Invariants (checked after every cycle by the drivers below)
# --------------------------------------------------------------------------------------------


def charged_milli(w: Workload, n: Node) -> int:
    """GPU charged for one task of `w` placed on node `n`, all its devices together."""
    return w.gpu.milli_on(n.gpu_memory_mib)


def check_placements(s: Snapshot) -> None:
    """G1 capacity and G9 gangs, plus structural sanity of every placement in `s`."""
    nodes = {n.name: n for n in s.nodes}
    charged: dict[tuple[str, int], int] = defaultdict(int)
    physical: dict[tuple[str, int], int] = defaultdict(int)
    dev_mem: dict[tuple[str, int], int] = defaultdict(int)
    charged_users: dict[tuple[str, int], list[str]] = defaultdict(list)
    physical_users: dict[tuple[str, int], list[str]] = defaultdict(list)
    whole_owned: dict[tuple[str, int], str] = {}
    cpu: dict[str, int] = defaultdict(int)
    mem: dict[str, int] = defaultdict(int)
    for w in s.workloads:
        indices = [p.task_index for p in w.placements]
        assert len(set(indices)) == len(indices), f"{w.name}: a task placed twice {indices}"
        assert all(0 <= i < w.tasks for i in indices), f"{w.name}: task index out of range"
        if w.placements:
            assert len(w.placements) >= w.gang_size, (
                f"G9: {w.name} runs {len(w.placements)} tasks, min_available is {w.gang_size}"
            )
        for p in w.placements:
            assert p.node in nodes, f"{w.name}: placed on unknown node {p.node}"
            n = nodes[p.node]
            assert len(set(p.devices)) == len(p.devices), f"{w.name}: device listed twice"
            for d in (*p.devices, *p.physical_devices):
                assert 0 <= d < n.gpu_count, f"{w.name}: device {d} not on {n.name}"
            if w.gpu.is_shared:
                assert len(p.devices) == 1, f"{w.name}: a shared task sits on one device"
                key = (p.node, p.devices[0])
                charged[key] += charged_milli(w, n)
                dev_mem[key] += w.gpu.memory_mib_on(n.gpu_memory_mib)
                charged_users[key].append(w.name)
                pkey = (p.node, p.physical_devices[0])
                physical[pkey] += charged_milli(w, n)
                physical_users[pkey].append(w.name)
            else:
                assert len(p.devices) == w.gpu.amount, (
                    f"{w.name}: needs {w.gpu.amount} devices per task, got {p.devices}"
                )
                assert p.burst_device is None, f"{w.name}: a whole-GPU task cannot burst"
                for d in p.devices:
                    key = (p.node, d)
                    charged[key] += MILLI_PER_GPU
                    physical[key] += MILLI_PER_GPU
                    dev_mem[key] += n.gpu_memory_mib
                    charged_users[key].append(w.name)
                    physical_users[key].append(w.name)
                    whole_owned[key] = w.name
            cpu[p.node] += w.cpu_milli
            mem[p.node] += w.memory_mib
    for key, amount in charged.items():
        assert amount <= MILLI_PER_GPU, f"G1: device {key} charged {amount} milli"
        assert dev_mem[key] <= nodes[key[0]].gpu_memory_mib, f"G1: device {key} memory over"
    for key, amount in physical.items():
        assert amount <= MILLI_PER_GPU, (
            f"G1: device {key} physically holds {amount} milli: {physical_users[key]}"
        )
    for key, owner in whole_owned.items():
        assert charged_users[key] == [owner], f"G1: whole device {key} shared: {charged_users[key]}"
        assert physical_users[key] == [owner], (
            f"G1: whole device {key} physically shared: {physical_users[key]}"
        )
    for name, used in cpu.items():
        cap = nodes[name].cpu_milli
        assert cap is None or used <= cap, f"G1: node {name} cpu {used} > {cap}"
    for name, used in mem.items():
        cap = nodes[name].memory_mib
        assert cap is None or used <= cap, f"G1: node {name} memory {used} > {cap}"


def check_decisions(before: Snapshot, result: CycleResult) -> None:
    """Decisions name existing workloads and make sense against the snapshot they came from."""
    by_name = {w.name: w for w in before.workloads}
    evicted_whole: set[str] = set()
    bound: set[str] = set()
    moved: set[tuple[str, int]] = set()
    for d in result.decisions:
        assert d.workload in by_name, f"decision for unknown workload: {d}"
        w = by_name[d.workload]
        if isinstance(d, Bind):
            assert d.placements, f"empty Bind: {d}"
            already = {p.task_index for p in w.placements}
            assert not already & {p.task_index for p in d.placements}, f"rebinds a task: {d}"
            bound.add(d.workload)
        elif isinstance(d, Evict):
            assert w.is_running, f"evicts a workload that is not running: {d}"
            running_tasks = {p.task_index for p in w.placements}
            assert set(d.task_indices) <= running_tasks, (
                f"evicts tasks {sorted(set(d.task_indices) - running_tasks)} of {w.name} that "
                f"are not running (running: {sorted(running_tasks)}): {d}"
            )
            if not d.task_indices:
                evicted_whole.add(d.workload)
        else:
            assert isinstance(d, Move)
            assert d.source in w.placements, f"Move from a placement it does not have: {d}"
            assert d.source.task_index == d.target.task_index, f"Move changes task: {d}"
            assert d.source != d.target, f"Move to where it already is: {d}"
            task = (d.workload, d.source.task_index)
            assert task not in moved, f"task moved twice in one cycle: {d}"
            moved.add(task)
    again = evicted_whole & bound
    assert not again, f"G8: evicted and placed back in the same cycle: {sorted(again)}"
    _check_gangs_after(before, result)


def _check_gangs_after(before: Snapshot, result: CycleResult) -> None:
    """G9: once the decisions are carried out, every workload runs none of its tasks or at
    least its gang."""
    running = {w.name: {p.task_index for p in w.placements} for w in before.workloads}
    for d in result.decisions:
        tasks = running[d.workload]
        if isinstance(d, Evict):
            tasks.difference_update(d.task_indices or set(tasks))
        elif isinstance(d, Bind):
            tasks.update(p.task_index for p in d.placements)
    for w in before.workloads:
        left = len(running[w.name])
        assert left == 0 or left >= w.gang_size, (
            f"G9: {w.name} runs {left} tasks after the decisions, its gang needs {w.gang_size}"
        )


def check_pending_reasons(after: Snapshot, result: CycleResult) -> None:
    for w in after.workloads:
        if not w.is_running:
            reason = result.pending_reasons.get(w.name)
            assert reason and reason.strip(), f"pending {w.name} has no reason: {reason!r}"


# --------------------------------------------------------------------------------------------
# Drivers
# --------------------------------------------------------------------------------------------


def step(s: Snapshot) -> tuple[Snapshot, CycleResult]:
    """One checked cycle: run_cycle, validate, apply with zero grace."""
    result = run_cycle(s)
    check_decisions(s, result)
    after = apply_decisions(s, result.decisions)
    check_placements(after)
    check_pending_reasons(after, result)
    return after, result


class FixedPoint(NamedTuple):
    snapshot: Snapshot
    decisions: list[Decision]
    result: CycleResult


QUIET_CYCLES = 5
"""Cycles after the fixed point that must decide nothing either (G8)."""


def run_to_fixed_point(s: Snapshot, max_cycles: int = 50) -> FixedPoint:
    """Cycle until one decides nothing, then 5 more that must decide nothing (G8).

    Every cycle is checked for capacity (G1), gangs (G9), sane decisions and pending reasons.
    """
    check_placements(s)
    decisions: list[Decision] = []
    current = s
    for _ in range(max_cycles):
        current, result = step(current)
        if not result.decisions:
            break
        decisions.extend(result.decisions)
    else:
        raise AssertionError(f"G8: no fixed point within {max_cycles} cycles")
    for extra in range(QUIET_CYCLES):
        current, result = step(current)
        assert not result.decisions, (
            f"G8: cycle {extra + 1} after the fixed point decided {result.decisions}"
        )
    return FixedPoint(current, decisions, result)


# --------------------------------------------------------------------------------------------
# Reading results
# --------------------------------------------------------------------------------------------


def running_names(s: Snapshot) -> frozenset[str]:
    return frozenset(w.name for w in s.workloads if w.is_running)


def pending_names(s: Snapshot) -> frozenset[str]:
    return frozenset(w.name for w in s.workloads if not w.is_running)


def evicted_names(decisions: Iterable[Decision]) -> frozenset[str]:
    return frozenset(d.workload for d in decisions if isinstance(d, Evict))


def moves(decisions: Iterable[Decision]) -> list[Move]:
    return [d for d in decisions if isinstance(d, Move)]


def bound_names(decisions: Iterable[Decision]) -> frozenset[str]:
    return frozenset(d.workload for d in decisions if isinstance(d, Bind))


def find(s: Snapshot, name: str) -> Workload:
    for w in s.workloads:
        if w.name == name:
            return w
    raise AssertionError(f"no workload {name} in the snapshot")


def share(result: CycleResult, name: str) -> ProjectShare:
    for p in result.projects:
        if p.name == name:
            return p
    raise AssertionError(f"no ProjectShare for {name}: {[p.name for p in result.projects]}")


def nodes_of(s: Snapshot, name: str) -> tuple[str, ...]:
    """The node of each running task of `name`, by task index."""
    w = find(s, name)
    return tuple(p.node for p in sorted(w.placements, key=lambda p: p.task_index))


def devices_of(s: Snapshot, name: str) -> tuple[tuple[str, int], ...]:
    """(node, device) charged to each task of `name` (cluster-level view)."""
    w = find(s, name)
    return tuple((p.node, d) for p in w.placements for d in p.devices)


def physical_devices_of(s: Snapshot, name: str) -> tuple[tuple[str, int], ...]:
    """(node, device) each task of `name` physically runs on (node-level view)."""
    w = find(s, name)
    return tuple((p.node, d) for p in w.placements for d in p.physical_devices)


@dataclass(frozen=True)
class Reason:
    """Expect the pending reason of `workload` to contain one of `any_of` (case-insensitive)."""

    workload: str
    any_of: tuple[str, ...]


def check_reasons(result: CycleResult, expected: Iterable[Reason]) -> None:
    for r in expected:
        text = result.pending_reasons.get(r.workload, "")
        assert any(word.lower() in text.lower() for word in r.any_of), (
            f"pending reason of {r.workload} should mention one of {r.any_of}: {text!r}"
        )
