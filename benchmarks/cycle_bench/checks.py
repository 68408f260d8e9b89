"""Whether a cycle benchmark snapshot, and a cycle's decisions on it, are consistent.

`snapshot_stats` summarises a snapshot (the table's columns); `validate_snapshot` checks that a
snapshot is physically consistent and `validate_decisions` that each decision applies to the
state its workload is in. The smoke test and the benchmark use them on the generated snapshot
and on the snapshot after a cycle's decisions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from gpupool.core.decisions import Bind, Decision, Evict, Move
from gpupool.core.model import MILLI_PER_GPU, Snapshot


@dataclass(frozen=True, slots=True)
class SnapshotStats:
    nodes: int
    gpus: int
    running: int
    pending: int
    held_gpu_milli: int
    pending_fraction_share: float
    """Share of pending workloads that ask for a fraction of one device."""
    pending_one_gpu_share: float
    pending_gang_share: float


def snapshot_stats(snapshot: Snapshot) -> SnapshotStats:
    gpus = sum(n.gpu_count for n in snapshot.nodes)
    memory = {n.name: n.gpu_memory_mib for n in snapshot.nodes}
    running = [w for w in snapshot.workloads if w.is_running]
    pending = [w for w in snapshot.workloads if not w.is_running]
    held = sum(w.gpu.milli_on(memory[p.node]) for w in running for p in w.placements)
    n = max(1, len(pending))
    fraction = sum(1 for w in pending if w.gpu.is_shared)
    one = sum(1 for w in pending if not w.gpu.is_shared and w.gpu.amount == 1 and w.tasks == 1)
    return SnapshotStats(
        nodes=len(snapshot.nodes),
        gpus=gpus,
        running=len(running),
        pending=len(pending),
        held_gpu_milli=held,
        pending_fraction_share=fraction / n,
        pending_one_gpu_share=one / n,
        pending_gang_share=(len(pending) - fraction - one) / n,
    )


def validate_snapshot(snapshot: Snapshot, max_problems: int = 20) -> list[str]:
    """Physical and policy consistency of a snapshot's running work; empty when all is well.

    Checks G1 (device milli, device memory, whole-GPU exclusivity, node CPU/memory), placement
    shape (node and devices exist, one device per shared task, `amount` devices per whole task,
    task indices distinct and in range), G9 (running tasks >= min_available), project GPU limits
    at every level of the tree, and that only leaves hold workloads.
    """
    problems: list[str] = []

    def problem(text: str) -> None:
        if len(problems) < max_problems:
            problems.append(text)

    nodes = {n.name: n for n in snapshot.nodes}
    if len(nodes) != len(snapshot.nodes):
        problem("duplicate node names")
    names = [w.name for w in snapshot.workloads]
    if len(set(names)) != len(names):
        problem("duplicate workload names")
    projects = {p.name: p for p in snapshot.projects}
    parents = {p.parent for p in snapshot.projects if p.parent is not None}
    for project in snapshot.projects:
        if project.parent is not None and project.parent not in projects:
            problem(f"project {project.name}: unknown parent {project.parent}")

    device_milli: dict[tuple[str, int], int] = defaultdict(int)
    device_memory: dict[tuple[str, int], int] = defaultdict(int)
    device_users: dict[tuple[str, int], int] = defaultdict(int)
    whole_devices: set[tuple[str, int]] = set()
    node_cpu: dict[str, int] = defaultdict(int)
    node_mem: dict[str, int] = defaultdict(int)
    holding: dict[str, int] = defaultdict(int)

    for w in snapshot.workloads:
        if w.project not in projects:
            problem(f"{w.name}: unknown project {w.project}")
        elif w.project in parents:
            problem(f"{w.name}: project {w.project} is a department")
        if not w.placements:
            continue
        indices = [p.task_index for p in w.placements]
        if len(set(indices)) != len(indices) or any(i < 0 or i >= w.tasks for i in indices):
            problem(f"{w.name}: bad task indices {indices} for {w.tasks} tasks")
        if len(w.placements) < w.gang_size:
            problem(f"{w.name}: {len(w.placements)} tasks running, gang needs {w.gang_size}")
        for p in w.placements:
            node = nodes.get(p.node)
            if node is None:
                problem(f"{w.name}: unknown node {p.node}")
                continue
            if any(d < 0 or d >= node.gpu_count for d in p.devices):
                problem(f"{w.name}: devices {p.devices} out of range on {p.node}")
                continue
            if len(set(p.devices)) != len(p.devices):
                problem(f"{w.name}: repeated device in {p.devices}")
            if w.gpu.is_shared:
                if len(p.devices) != 1:
                    problem(f"{w.name}: shared task on {len(p.devices)} devices")
            elif len(p.devices) != w.gpu.amount:
                problem(f"{w.name}: whole task of {w.gpu.amount} GPUs on {p.devices}")
            milli = w.gpu.milli_on(node.gpu_memory_mib)
            mem = w.gpu.memory_mib_on(node.gpu_memory_mib)
            per_device = MILLI_PER_GPU if not w.gpu.is_shared else milli
            for d in p.devices:
                key = (p.node, d)
                device_milli[key] += per_device
                device_memory[key] += mem if w.gpu.is_shared else node.gpu_memory_mib
                device_users[key] += 1
                if not w.gpu.is_shared:
                    whole_devices.add(key)
            node_cpu[p.node] += w.cpu_milli
            node_mem[p.node] += w.memory_mib
            holding[w.project] += milli

    for key, milli in device_milli.items():
        if milli > MILLI_PER_GPU:
            problem(f"device {key[0]}/{key[1]}: {milli} milli-GPU charged")
        if device_memory[key] > nodes[key[0]].gpu_memory_mib:
            problem(f"device {key[0]}/{key[1]}: {device_memory[key]} MiB of device memory")
    for key in whole_devices:
        if device_users[key] > 1:
            problem(f"device {key[0]}/{key[1]}: whole-GPU task shares it with others")
    for name, cpu in node_cpu.items():
        cap = nodes[name].cpu_milli
        if cap is not None and cpu > cap:
            problem(f"node {name}: {cpu} CPU milli requested of {cap}")
    for name, mem in node_mem.items():
        cap = nodes[name].memory_mib
        if cap is not None and mem > cap:
            problem(f"node {name}: {mem} MiB memory requested of {cap}")

    # Project GPU limits at every level of the tree.
    tree_holding: dict[str, int] = defaultdict(int)
    for leaf, milli in holding.items():
        current: str | None = leaf
        while current is not None and current in projects:
            tree_holding[current] += milli
            current = projects[current].parent
    for name, milli in tree_holding.items():
        limit = projects[name].limit.gpu_milli
        if limit is not None and milli > limit:
            problem(f"project {name}: holds {milli} milli-GPU over its limit {limit}")
    return problems


def validate_decisions(snapshot: Snapshot, decisions: tuple[Decision, ...]) -> list[str]:
    """Whether each decision applies to the state its workload is in; empty when all is well.

    Every decision names a known workload; a bind starts tasks that are not running yet, on
    known nodes; an eviction or a move concerns tasks that are running. Resource consistency of
    the result is `validate_snapshot(apply_decisions(snapshot, decisions))`.
    """
    problems: list[str] = []
    workloads = {w.name: w for w in snapshot.workloads}
    nodes = {n.name for n in snapshot.nodes}
    running: dict[str, set[int]] = {
        w.name: {p.task_index for p in w.placements} for w in snapshot.workloads
    }
    for decision in decisions:
        w = workloads.get(decision.workload)
        if w is None:
            problems.append(f"{type(decision).__name__} of unknown workload {decision.workload}")
            continue
        tasks = running[w.name]
        if isinstance(decision, Bind):
            if not decision.placements:
                problems.append(f"bind of {w.name} with no placements")
            for p in decision.placements:
                if p.task_index in tasks:
                    problems.append(f"bind of {w.name} task {p.task_index}: already running")
                if p.node not in nodes:
                    problems.append(f"bind of {w.name} onto unknown node {p.node}")
                tasks.add(p.task_index)
        elif isinstance(decision, Evict):
            gone = set(decision.task_indices) if decision.task_indices else set(tasks)
            if not tasks or not gone <= tasks:
                problems.append(f"evict of {w.name} tasks {sorted(gone)}: not running")
            tasks -= gone
        elif isinstance(decision, Move):
            if decision.source.task_index not in tasks:
                problems.append(f"move of {w.name} task {decision.source.task_index}: not running")
            if decision.target.task_index != decision.source.task_index:
                problems.append(f"move of {w.name}: source and target tasks differ")
            if decision.target.node not in nodes:
                problems.append(f"move of {w.name} onto unknown node {decision.target.node}")
    return problems
