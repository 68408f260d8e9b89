"""Property tests: random clusters, project trees and workloads, cycled with zero-grace eviction.

After every cycle: G1 capacity, G3 non-preemptible holding within quota at every level, limits
never exceeded, G4 reclaim only of preemptible work of another project that was above its quota
or fair share (at the leaf and where the two projects' paths part), G6 preemption only inside a
project and of lower priority, G7 no victim under its min runtime, G9 gangs, a reason for every
pending workload, no new task (Bind or Move target) on a node whose NoSchedule / NoExecute
taints its workload does not tolerate or on a device a task that may not move bursts on, and no
Move of a workload that is not movable. At the end: G8 a fixed point within a bound, then 5
quiet cycles; and G11 no pending workload that fits on idle capacity is left waiting at the
fixed point. On clusters of
one-GPU preemptible work only: G2/G5 at the fixed point (no project waits below its quota or fair
share while another holds more than its own).

The generated starting state is itself valid: running work is placed greedily within capacity,
limits, and (non-preemptible work) quota.

Set CI=1 to derandomize (the same examples on every run).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, CycleResult, Evict, EvictionCause, Move
from gpupool.core.model import (
    MILLI_PER_GPU,
    NO_LIMITS,
    GpuRequest,
    GpuRequestKind,
    Limits,
    Node,
    Project,
    Resources,
    SchedulerSettings,
    Snapshot,
    Taint,
    TaintEffect,
    TaskPlacement,
    Toleration,
    TolerationOperator,
    Workload,
    WorkloadType,
)
from gpupool.core.policies import policy_names
from gpupool.simcluster.apply import apply_decisions

from .helpers import (
    check_decisions,
    check_pending_reasons,
    check_placements,
    share,
)

NOW_S = 1000
MAX_CYCLES = 40
QUIET_CYCLES = 5

PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("GPUPOOL_PROPERTY_EXAMPLES", "200")),
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --------------------------------------------------------------------------------------------
# The project tree
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    projects: dict[str, Project]

    def path(self, name: str) -> list[str]:
        """`name` and its ancestors, leaf first."""
        out = [name]
        parent = self.projects[name].parent
        while parent is not None:
            out.append(parent)
            parent = self.projects[parent].parent
        return out

    def children(self, name: str | None) -> list[str]:
        return [p.name for p in self.projects.values() if p.parent == name]

    def parting(self, victim: str, reclaimer: str) -> str:
        """The victim-side node of the tree where the two paths part (below their last common)."""
        pv, pr = self.path(victim)[::-1], self.path(reclaimer)[::-1]
        for a, b in zip(pv, pr, strict=False):
            if a != b:
                return a
        raise AssertionError(f"{victim} and {reclaimer} do not part")


def task_milli(w: Workload, nodes: dict[str, Node], node_name: str) -> int:
    return w.gpu.milli_on(nodes[node_name].gpu_memory_mib)


def holdings(s: Snapshot, tree: Tree, *, non_preemptible_only: bool = False) -> dict[str, int]:
    """GPU milli held by every project and department (charged, cluster view)."""
    nodes = {n.name: n for n in s.nodes}
    out: dict[str, int] = defaultdict(int)
    for w in s.workloads:
        if non_preemptible_only and w.is_preemptible:
            continue
        held = sum(task_milli(w, nodes, p.node) for p in w.placements)
        for name in tree.path(w.project):
            out[name] += held
    return out


def min_runtime_s(w: Workload, tree: Tree) -> int:
    if w.min_runtime_s is not None:
        return w.min_runtime_s
    return tree.projects[w.project].min_runtime_s


# --------------------------------------------------------------------------------------------
# Generators
# --------------------------------------------------------------------------------------------

GPU_QUOTAS = st.integers(0, 16).map(lambda half_gpus: half_gpus * 500)

_CORDONED = Taint("node.kubernetes.io/unschedulable", None, TaintEffect.NO_SCHEDULE)
_GPU = Taint("nvidia.com/gpu", None, TaintEffect.NO_SCHEDULE)
_DEDICATED = Taint("dedicated", "ml", TaintEffect.NO_EXECUTE)
_PREFER = Taint("spot", "true", TaintEffect.PREFER_NO_SCHEDULE)
TAINTS = st.sampled_from(
    [(), (), (), (), (_CORDONED,), (_GPU,), (_DEDICATED,), (_PREFER,), (_CORDONED, _GPU)]
)
_EXISTS = TolerationOperator.EXISTS
TOLERATIONS = st.sampled_from(
    [
        (),
        (),
        (Toleration("nvidia.com/gpu", _EXISTS),),
        (Toleration(operator=_EXISTS),),
        (Toleration("dedicated", TolerationOperator.EQUAL, "ml"),),
        (Toleration("nvidia.com/gpu", _EXISTS), Toleration("dedicated", _EXISTS)),
    ]
)
WEIGHTS = st.sampled_from([0, 1, 1, 1, 2, 3])


@st.composite
def limits(draw: st.DrawFn) -> Limits:
    if draw(st.integers(0, 5)) == 0:
        return Limits(gpu_milli=draw(st.integers(1, 12)) * MILLI_PER_GPU)
    return NO_LIMITS


@st.composite
def project_trees(draw: st.DrawFn) -> tuple[Project, ...]:
    departments = [
        Project(
            name=f"dept{i}",
            # a second department sits under the first one now and then (any depth is allowed)
            parent=draw(st.sampled_from([None, None, "dept0"])) if i else None,
            quota=Resources(gpu_milli=draw(GPU_QUOTAS)),
            over_quota_weight=draw(WEIGHTS),
            limit=draw(limits()),
            priority=draw(st.integers(0, 1)),
        )
        for i in range(draw(st.integers(0, 2)))
    ]
    parents = [None, *(d.name for d in departments)]
    projects = [
        Project(
            name=f"p{i}",
            parent=draw(st.sampled_from(parents)),
            quota=Resources(gpu_milli=draw(GPU_QUOTAS)),
            over_quota_weight=draw(WEIGHTS),
            limit=draw(limits()),
            priority=draw(st.integers(0, 1)),
            min_runtime_s=draw(st.sampled_from([0, 0, 0, 300])),
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    return (*departments, *projects)


@st.composite
def workloads(draw: st.DrawFn, index: int, leaves: list[str]) -> tuple[Workload, bool, int]:
    """A pending workload, whether it should start out running, and how many tasks then."""
    kind = draw(st.sampled_from(["whole", "whole", "fraction", "fraction", "dynamic", "memory"]))
    if kind == "whole":
        gpu = GpuRequest.whole(draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4])))
    elif kind == "memory":
        gpu = GpuRequest.memory(draw(st.sampled_from([8192, 20480, 40960])))
    else:
        amount = draw(st.integers(2, 18)) * 50
        limit = draw(st.integers(amount // 50 + 1, 20)) * 50 if kind == "dynamic" else None
        gpu = GpuRequest.fraction(amount, limit)
    tasks = draw(st.sampled_from([1, 1, 1, 2, 3]))
    min_available = draw(st.one_of(st.none(), st.integers(1, tasks)))
    w = Workload(
        name=f"w{index}",
        project=draw(st.sampled_from(leaves)),
        type=draw(
            st.sampled_from(
                [WorkloadType.TRAIN] * 4 + [WorkloadType.INTERACTIVE, WorkloadType.INFERENCE]
            )
        ),
        gpu=gpu,
        tasks=tasks,
        min_available=min_available,
        priority=draw(st.one_of(st.none(), st.none(), st.sampled_from([10, 50, 90, 150]))),
        preemptible=draw(st.sampled_from([None, None, None, True, False])),
        cpu_milli=draw(st.sampled_from([0, 0, 2000, 8000])),
        memory_mib=draw(st.sampled_from([0, 0, 16384, 65536])),
        min_runtime_s=draw(st.sampled_from([None, None, None, 0, 600])),
        node_selector=draw(st.sampled_from([(), (), (), (("gpu_model", ("H100",)),)])),
        submit_seq=index,
        tolerations=draw(TOLERATIONS),
        movable=draw(st.sampled_from([True, True, True, False])),
    )
    gang = w.gang_size
    return w, draw(st.booleans()), draw(st.integers(gang, tasks))


class Capacity:
    """Free capacity while the generator places running work greedily (first fit).

    The generator ignores taints (running work may sit on a node tainted since it started);
    the G11 check respects them, as the core does for new tasks.
    """

    def __init__(self, nodes: tuple[Node, ...], respect_taints: bool = False) -> None:
        self.nodes = nodes
        self.respect_taints = respect_taints
        self.charged: dict[tuple[str, int], int] = defaultdict(int)
        self.cpu: dict[str, int] = defaultdict(int)
        self.mem: dict[str, int] = defaultdict(int)

    def _room(self, n: Node, w: Workload) -> bool:
        if any(n.label(key) not in values for key, values in w.node_selector):
            return False
        if self.respect_taints and not n.admits(w.tolerations):
            return False
        cpu_ok = n.cpu_milli is None or self.cpu[n.name] + w.cpu_milli <= n.cpu_milli
        mem_ok = n.memory_mib is None or self.mem[n.name] + w.memory_mib <= n.memory_mib
        return cpu_ok and mem_ok

    def devices_for(self, n: Node, w: Workload) -> tuple[int, ...] | None:
        """Devices on `n` where one task of `w` fits now, or None."""
        if not self._room(n, w):
            return None
        if w.gpu.is_shared:
            need = w.gpu.milli_on(n.gpu_memory_mib)
            for d in range(n.gpu_count):
                if self.charged[(n.name, d)] + need <= MILLI_PER_GPU:
                    return (d,)
            return None
        free = [d for d in range(n.gpu_count) if self.charged[(n.name, d)] == 0]
        if len(free) < w.gpu.amount:
            return None
        return tuple(free[: w.gpu.amount])

    def take(self, n: Node, w: Workload, devices: tuple[int, ...]) -> None:
        for d in devices:
            self.charged[(n.name, d)] += w.gpu.milli_on(n.gpu_memory_mib)
        self.cpu[n.name] += w.cpu_milli
        self.mem[n.name] += w.memory_mib

    def place(self, w: Workload, count: int) -> tuple[TaskPlacement, ...] | None:
        """First-fit `count` tasks of `w`, all or none."""
        placed: list[tuple[Node, tuple[int, ...]]] = []
        for _ in range(count):
            spot = next(
                ((n, devs) for n in self.nodes if (devs := self.devices_for(n, w)) is not None),
                None,
            )
            if spot is None:
                for n, devs in placed:
                    self.release(n, w, devs)
                return None
            self.take(spot[0], w, spot[1])
            placed.append(spot)
        return tuple(
            TaskPlacement(task_index=i, node=n.name, devices=devs)
            for i, (n, devs) in enumerate(placed)
        )

    def release(self, n: Node, w: Workload, devices: tuple[int, ...]) -> None:
        for d in devices:
            self.charged[(n.name, d)] -= w.gpu.milli_on(n.gpu_memory_mib)
        self.cpu[n.name] -= w.cpu_milli
        self.mem[n.name] -= w.memory_mib


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    nodes = tuple(
        Node(
            name=f"n{i}",
            gpu_count=draw(st.integers(1, 8)),
            gpu_memory_mib=draw(st.sampled_from([81920, 81920, 40960])),
            gpu_model=draw(st.sampled_from(["A100", "H100"])),
            cpu_milli=draw(st.sampled_from([None, None, 32000, 64000])),
            memory_mib=draw(st.sampled_from([None, None, 131072, 262144])),
            taints=draw(TAINTS),
        )
        for i in range(draw(st.integers(1, 6)))
    )
    projects = draw(project_trees())
    tree = Tree({p.name: p for p in projects})
    leaves = [p.name for p in projects if p.name.startswith("p")]
    capacity = Capacity(nodes)
    held: dict[str, int] = defaultdict(int)
    held_np: dict[str, int] = defaultdict(int)
    out: list[Workload] = []
    # Contention makes reclaim happen: one project tends to hold the cluster at the start.
    hog = draw(st.sampled_from(leaves))
    for index in range(draw(st.integers(2, 16))):
        w, start_running, count = draw(workloads(index, leaves))
        if start_running or w.project == hog:
            w = _start(w, count, tree, capacity, held, held_np, draw)
        out.append(w)
    out = _burst_where_stuck(out, nodes, capacity, draw)
    return Snapshot(
        nodes=nodes,
        projects=projects,
        workloads=tuple(out),
        now_s=NOW_S,
        settings=SchedulerSettings(placement=draw(st.sampled_from(policy_names()))),
    )


def _start(
    w: Workload,
    count: int,
    tree: Tree,
    capacity: Capacity,
    held: dict[str, int],
    held_np: dict[str, int],
    draw: st.DrawFn,
) -> Workload:
    """`w` running `count` tasks, if that keeps capacity, limits and (G3) quota; else `w`."""
    placements = capacity.place(w, count)
    if placements is None:
        return w
    nodes = {n.name: n for n in capacity.nodes}
    amount = sum(task_milli(w, nodes, p.node) for p in placements)
    path = tree.path(w.project)
    within_limits = all(
        (cap := tree.projects[name].limit.gpu_milli) is None or held[name] + amount <= cap
        for name in path
    )
    within_quota = w.is_preemptible or all(
        held_np[name] + amount <= tree.projects[name].quota.gpu_milli for name in path
    )
    if not (within_limits and within_quota):
        for p in placements:
            capacity.release(nodes[p.node], w, p.devices)
        return w
    for name in path:
        held[name] += amount
        if not w.is_preemptible:
            held_np[name] += amount
    return replace(w, placements=placements, started_at_s=draw(st.integers(0, NOW_S)))


def stuck(w: Workload, n: Node) -> bool:
    """Whether a task of `w` on `n` may not be moved: `w` is not movable, or `n` has taints `w`
    does not tolerate (a move there is a new placement)."""
    return not w.movable or not n.admits(w.tolerations)


def _burst_where_stuck(
    out: list[Workload], nodes: tuple[Node, ...], capacity: Capacity, draw: st.DrawFn
) -> list[Workload]:
    """Some running dynamic fractions that may not be moved start on a burst device (they
    arrive so from a driver): an idle device of their node that no other task bursts on."""
    by_name = {n.name: n for n in nodes}
    bursting: set[tuple[str, int]] = set()
    result = []
    for w in out:
        if w.gpu.is_burstable and w.placements and draw(st.booleans()):
            placements = []
            for p in w.placements:
                n = by_name[p.node]
                idle = [
                    d
                    for d in range(n.gpu_count)
                    if capacity.charged[(n.name, d)] == 0 and (n.name, d) not in bursting
                ]
                if stuck(w, n) and idle:
                    bursting.add((n.name, idle[0]))
                    p = replace(p, burst_device=idle[0])
                placements.append(p)
            w = replace(w, placements=tuple(placements))
        result.append(w)
    return result


def pinned_devices(s: Snapshot) -> dict[tuple[str, int], str]:
    """(node, device) -> workload: burst devices of tasks that may not be moved."""
    nodes = {n.name: n for n in s.nodes}
    return {
        (p.node, p.burst_device): w.name
        for w in s.workloads
        for p in w.placements
        if p.burst_device is not None and stuck(w, nodes[p.node])
    }


# --------------------------------------------------------------------------------------------
# Per-cycle checks
# --------------------------------------------------------------------------------------------


def check_taints_and_moves(before: Snapshot, result: CycleResult) -> None:
    """New tasks (Bind placements, Move targets) only on nodes whose NoSchedule / NoExecute
    taints the workload tolerates, and never on a device that a task which may not be moved
    bursts on (unless that task is evicted in this cycle); no Move of a non-movable workload."""
    by_name = {w.name: w for w in before.workloads}
    nodes = {n.name: n for n in before.nodes}
    pinned = pinned_devices(before)
    evicted = {d.workload for d in result.decisions if isinstance(d, Evict)}
    for d in result.decisions:
        if isinstance(d, Evict):
            continue
        w = by_name[d.workload]
        if isinstance(d, Move):
            assert w.movable, f"Move of non-movable {w.name}: {d}"
            targets: tuple[TaskPlacement, ...] = (d.target,)
        else:
            targets = d.placements
        for p in targets:
            n = nodes[p.node]
            assert n.admits(w.tolerations), (
                f"{w.name} (tolerations {w.tolerations}) newly placed on {n.name} with taints "
                f"{n.taints}: {d}"
            )
            for device in {*p.devices, *p.physical_devices}:
                owner = pinned.get((p.node, device))
                assert owner is None or owner in evicted, (
                    f"{w.name} newly placed on device {device} of {p.node}, where {owner} "
                    f"bursts and may not be moved: {d}"
                )


def check_quota_and_limits(s: Snapshot, tree: Tree) -> None:
    """G3 at every level, and limits never exceeded (the generator starts within both)."""
    held = holdings(s, tree)
    held_np = holdings(s, tree, non_preemptible_only=True)
    for name, p in tree.projects.items():
        assert held_np[name] <= p.quota.gpu_milli, (
            f"G3: non-preemptible holding of {name} is {held_np[name]} > quota {p.quota.gpu_milli}"
        )
        cap = p.limit.gpu_milli
        assert cap is None or held[name] <= cap, f"limit: {name} holds {held[name]} > {cap}"


def check_evictions(before: Snapshot, result: CycleResult, tree: Tree) -> None:
    """G4, G6, G7 for every eviction of this cycle."""
    by_name = {w.name: w for w in before.workloads}
    # "Just before that eviction" a project may also hold what this cycle bound for it earlier:
    # count every bind of the cycle, the most it can hold at any point of the cycle.
    held = holdings(before, tree)
    nodes = {n.name: n for n in before.nodes}
    for d in result.decisions:
        if isinstance(d, Bind):
            w = by_name[d.workload]
            for name in tree.path(w.project):
                held[name] += sum(task_milli(w, nodes, p.node) for p in d.placements)
    for d in result.decisions:
        if not isinstance(d, Evict):
            continue
        victim = by_name[d.workload]
        assert victim.started_at_s is not None, f"{victim.name} runs with no start time"
        ran = before.now_s - victim.started_at_s
        assert ran >= min_runtime_s(victim, tree), (
            f"G7: {victim.name} evicted after {ran}s, min runtime {min_runtime_s(victim, tree)}s"
        )
        assert victim.is_preemptible, f"G4/G6: non-preemptible {victim.name} evicted: {d}"
        assert d.for_workload is not None, f"eviction names no beneficiary: {d}"
        winner = by_name[d.for_workload]
        if d.cause is EvictionCause.PREEMPT:
            assert winner.project == victim.project, f"G6: priority crossed projects: {d}"
            assert winner.effective_priority > victim.effective_priority, (
                f"G6: {winner.name} ({winner.effective_priority}) preempted "
                f"{victim.name} ({victim.effective_priority})"
            )
            continue
        assert winner.project != victim.project, f"G4: reclaim inside one project: {d}"
        for level in dict.fromkeys([victim.project, tree.parting(victim.project, winner.project)]):
            quota = tree.projects[level].quota.gpu_milli
            fair = share(result, level).fair_share.gpu_milli
            assert held[level] > quota or held[level] > fair, (
                f"G4: {victim.name} reclaimed for {winner.name}, but {level} held "
                f"{held[level]} <= quota {quota} and <= fair share {fair}"
            )


def cycles(start: Snapshot, tree: Tree) -> Iterator[tuple[Snapshot, CycleResult, Snapshot]]:
    """Checked cycles until the fixed point and 5 more (G8); yields (before, result, after)."""
    check_placements(start)
    check_quota_and_limits(start, tree)
    current = start
    quiet = 0
    for number in range(MAX_CYCLES + QUIET_CYCLES):
        result = run_cycle(current)
        check_decisions(current, result)
        check_evictions(current, result, tree)
        check_taints_and_moves(current, result)
        after = apply_decisions(current, result.decisions)
        check_placements(after)
        check_quota_and_limits(after, tree)
        check_pending_reasons(after, result)
        yield current, result, after
        current = after
        if result.decisions:
            assert quiet == 0, f"G8: cycle {number} decided again after a fixed point"
            assert number < MAX_CYCLES, f"G8: no fixed point within {MAX_CYCLES} cycles"
        else:
            quiet += 1
            if quiet > QUIET_CYCLES:
                return
    raise AssertionError(f"G8: no fixed point within {MAX_CYCLES} cycles")


def tree_of(s: Snapshot) -> Tree:
    return Tree({p.name: p for p in s.projects})


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(snapshots())
def test_every_cycle_keeps_the_guarantees_and_a_fixed_point_is_reached(s: Snapshot) -> None:
    tree = tree_of(s)
    for _ in cycles(s, tree):
        pass


def _idle_spots(s: Snapshot, w: Workload) -> list[Node]:
    """Nodes where one more task of `w` fits on the capacity idle in `s` (taints respected;
    a device that a task which may not be moved bursts on is not idle)."""
    capacity = Capacity(s.nodes, respect_taints=True)
    nodes = {n.name: n for n in s.nodes}
    for other in s.workloads:
        for p in other.placements:
            capacity.take(nodes[p.node], other, p.devices)
    for node_name, device in pinned_devices(s):
        capacity.charged[(node_name, device)] += MILLI_PER_GPU
    return [n for n in s.nodes if capacity.devices_for(n, w) is not None]


@PROPERTY_SETTINGS
@given(snapshots())
def test_at_the_fixed_point_nothing_that_fits_waits(s: Snapshot) -> None:
    """G11: a workload needing one more task that fits on idle GPUs, within limits (and quota
    when non-preemptible), would have started; at a fixed point there is none."""
    tree = tree_of(s)
    runs = list(cycles(s, tree))
    _, result, final = runs[-1]
    held = holdings(final, tree)
    held_np = holdings(final, tree, non_preemptible_only=True)
    nodes = {n.name: n for n in final.nodes}
    for w in final.workloads:
        missing = w.tasks - len(w.placements)
        needed = 1 if w.is_running else w.gang_size
        if missing == 0 or needed != 1:
            continue
        path = tree.path(w.project)

        def admissible(n: Node, w: Workload = w, path: list[str] = path) -> bool:
            amount = task_milli(w, nodes, n.name)
            for name in path:
                p = tree.projects[name]
                if p.limit.gpu_milli is not None and held[name] + amount > p.limit.gpu_milli:
                    return False
                if not w.is_preemptible and held_np[name] + amount > p.quota.gpu_milli:
                    return False
            return True

        if not any(admissible(n) for n in _idle_spots(final, w)):
            continue
        raise AssertionError(
            f"G11: {w.name} fits on idle capacity at the fixed point but waits: "
            f"{result.pending_reasons.get(w.name)!r}"
        )


@PROPERTY_SETTINGS
@given(snapshots())
def test_project_shares_are_consistent(s: Snapshot) -> None:
    """Fair share rules that hold whatever the tree: capped by demand and limit, never more than
    the parent has, and (all weights > 0) all of it handed out up to demand."""
    tree = tree_of(s)
    result = run_cycle(s)
    after = apply_decisions(s, result.decisions)
    held = holdings(after, tree)
    nodes = {n.name: n for n in s.nodes}
    demand: dict[str, int] = defaultdict(int)
    estimated: set[str] = set()
    """Projects waiting for memory-sized tasks: their charge depends on where they land."""
    for w in s.workloads:
        asked = sum(task_milli(w, nodes, p.node) for p in w.placements)
        waiting = w.tasks - len(w.placements)
        if w.gpu.kind is GpuRequestKind.MEMORY:
            if waiting:
                estimated.update(tree.path(w.project))
        else:
            asked += waiting * w.gpu.milli_on(MILLI_PER_GPU)
        for name in tree.path(w.project):
            demand[name] += asked
    capacity = sum(n.gpu_count for n in s.nodes) * MILLI_PER_GPU

    def effective(name: str) -> int:
        kids = tree.children(name)
        want = sum(effective(k) for k in kids) if kids else demand[name]
        cap = tree.projects[name].limit.gpu_milli
        return want if cap is None else min(want, cap)

    for name, p in tree.projects.items():
        got = share(result, name)
        if name in estimated:
            assert got.demand.gpu_milli >= demand[name], f"{name} demand {got.demand}"
            demand[name] = got.demand.gpu_milli
        assert got.demand.gpu_milli == demand[name], f"{name} demand {got.demand}"
        assert got.holding.gpu_milli == held[name], f"{name} holding {got.holding}"
        assert got.quota == p.quota
        fair = got.fair_share.gpu_milli
        assert 0 <= fair <= demand[name], f"{name} fair share {fair} > demand {demand[name]}"
        cap = p.limit.gpu_milli
        assert cap is None or fair <= cap, f"{name} fair share {fair} > limit {cap}"

    all_weighted = all(p.over_quota_weight > 0 for p in tree.projects.values())
    for parent in [None, *tree.projects]:
        kids = tree.children(parent)
        if not kids:
            continue
        given_out = sum(share(result, k).fair_share.gpu_milli for k in kids)
        available = capacity if parent is None else share(result, parent).fair_share.gpu_milli
        assert given_out <= available, f"children of {parent} get {given_out} > {available}"
        if all_weighted:
            expected = min(available, sum(effective(k) for k in kids))
            assert given_out == expected, (
                f"children of {parent} get {given_out}, expected {expected} "
                f"(available {available}, nothing idle while demand is unmet)"
            )


@st.composite
def single_gpu_clusters(draw: st.DrawFn) -> Snapshot:
    """Flat projects, one-GPU preemptible train work only: no shape, gang, runtime or limit
    reasons to wait, so at the fixed point quotas (G2) and fair shares (G5) must be met."""
    nodes = tuple(Node(f"n{i}", draw(st.integers(1, 8))) for i in range(draw(st.integers(1, 4))))
    projects = tuple(
        Project(
            f"p{i}",
            quota=Resources(gpu_milli=draw(st.integers(0, 6)) * MILLI_PER_GPU),
            over_quota_weight=draw(st.integers(0, 3)),
            priority=draw(st.sampled_from([0, 0, 0, 1])),
        )
        for i in range(draw(st.integers(2, 4)))
    )
    names = [p.name for p in projects]
    free = [(n.name, d) for n in nodes for d in range(n.gpu_count)]
    out: list[Workload] = []
    for index in range(draw(st.integers(1, 24))):
        w = Workload(
            name=f"w{index}",
            project=draw(st.sampled_from(names)),
            type=WorkloadType.TRAIN,
            gpu=GpuRequest.whole(1),
            submit_seq=index,
        )
        start_running = draw(st.booleans())
        if free and start_running:
            where, device = free.pop(0)
            w = replace(
                w,
                placements=(TaskPlacement(0, where, (device,)),),
                started_at_s=draw(st.integers(0, NOW_S)),
            )
        out.append(w)
    return Snapshot(nodes=nodes, projects=projects, workloads=tuple(out), now_s=NOW_S)


@PROPERTY_SETTINGS
@given(single_gpu_clusters())
def test_at_the_fixed_point_quotas_and_fair_shares_are_met(s: Snapshot) -> None:
    """G2/G5: no project waits with room under its quota (fair share) while another project
    holds more than its quota (fair share) in work that could be reclaimed for it."""
    tree = tree_of(s)
    runs = list(cycles(s, tree))
    _, result, final = runs[-1]
    held = holdings(final, tree)
    waiting = {w.project for w in final.workloads if not w.is_running}
    for p in sorted(waiting):
        for q in tree.projects:
            if q == p or held[q] == 0:
                continue
            quota_p = tree.projects[p].quota.gpu_milli
            quota_q = tree.projects[q].quota.gpu_milli
            assert not (held[p] + MILLI_PER_GPU <= quota_p and held[q] > quota_q), (
                f"G2: {p} holds {held[p]} of quota {quota_p} and waits, while {q} holds "
                f"{held[q]} over its quota {quota_q}"
            )
            fair_p = share(result, p).fair_share.gpu_milli
            fair_q = share(result, q).fair_share.gpu_milli
            assert not (held[p] + MILLI_PER_GPU <= fair_p and held[q] > fair_q), (
                f"G5: {p} holds {held[p]} of fair share {fair_p} and waits, while {q} holds "
                f"{held[q]} over its fair share {fair_q}"
            )
