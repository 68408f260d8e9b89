"""What every action of one cycle shares: the session, the placer, and what was decided so far."""

from __future__ import annotations

from dataclasses import replace
from typing import Final, NamedTuple

from gpupool.core.decisions import Evict, Move
from gpupool.core.model import MILLI_PER_GPU, GpuRequestKind, Workload
from gpupool.core.placement import Placer
from gpupool.core.session import NEW_TUPLE, Session, Statement, WorkRecord, WorkState

# Enum members as module globals: reading one from its class costs ten times as much in
# Python 3.11, and the loops here read them per workload.
_MEMORY: Final = GpuRequestKind.MEMORY
_WHOLE: Final = GpuRequestKind.WHOLE
_RUNNING: Final = WorkState.RUNNING

GPU, CPU, MEMORY = 0, 1, 2
_UNIT_NAMES = ("GPU", "CPU", "memory")


def format_gpu(milli: int) -> str:
    """`2000` -> "2 GPUs", `500` -> "0.5 GPU"."""
    if milli % MILLI_PER_GPU == 0:
        count = milli // MILLI_PER_GPU
        return f"{count} GPU" if count == 1 else f"{count} GPUs"
    return f"{milli / MILLI_PER_GPU:g} GPU"


def _selector_text(spec: Workload) -> str:
    return ", ".join(f"{k} in [{', '.join(v)}]" for k, v in spec.node_selector)


def _nodes_have(count: int) -> str:
    return "1 node has" if count == 1 else f"{count} nodes have"


_KEYS_SHOWN: Final = 5


def _keys_text(keys: tuple[str, ...]) -> str:
    """Taint keys for a pending reason: the first few, then how many more."""
    shown = ", ".join(keys[:_KEYS_SHOWN])
    more = len(keys) - _KEYS_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def _format_amount(resource: int, amount: int) -> str:
    if resource == GPU:
        return format_gpu(amount)
    if resource == CPU:
        return f"{amount / 1000:g} CPU"
    return f"{amount} MiB of memory"


class Ask(NamedTuple):
    """What placing some tasks of a workload adds to its project: per resource (indexed by
    GPU, CPU, MEMORY). A tuple, since the cycle makes one per workload it looks at."""

    gpu_milli: int
    cpu_milli: int
    memory_mib: int

    def amount(self, resource: int) -> int:
        return self[resource]


_NOTHING: Final = Ask(0, 0, 0)


def gang_to_start(work: WorkRecord) -> int:
    """How many tasks of `work` must start together now (0 once anything of it is placed):
    `len(CycleContext.tasks_to_start(work)[0])`, without building the lists. A function, not
    a method: consolidate, reclaim and preempt ask it of every pending workload."""
    if work.allocs:
        return 0
    return work.gang


LimitLevel = tuple[int, tuple[tuple[int, int], ...]]
"""A project-tree level with a limit: (project, ((resource, cap), ...)) for the capped ones."""
QuotaCheck = tuple[int, int, int]
"""(project, resource, quota) that non-preemptible work must stay within (G3)."""


class CycleContext:
    """Shared state of one cycle. Actions read and extend it; `cycle.py` turns it into output."""

    def __init__(self, session: Session, placer: Placer) -> None:
        self.session = session
        self.placer = placer
        self.bound: dict[int, None] = {}
        """Works that started tasks this cycle, in order."""
        self.evictions: list[Evict] = []
        self.moves: list[Move] = []
        self.pack_moves: list[Move] = []
        self.spread_moves: list[Move] = []
        self.reasons: list[str | None] = [None] * len(session.works)
        """Per work index, why it waits (None: no reason yet). A list rather than a dict by
        index: most of a long queue gets a reason, and a list is set by a machine integer,
        where a dict boxes and hashes every index."""
        self.bind_reasons: dict[int, str] = {}
        self.joined_reasons: dict[tuple[str, str], str] = {}
        """A reason with a note appended (`actions.reclaim`), by (reason, note)."""
        self.policy_blocked: set[int] = set()
        """Works that G3 holds back this cycle: evicting others cannot help them."""
        self.queues: dict[int, list[WorkRecord]] | None = None
        """Allocate's queues: per project, the work waiting to start tasks when allocate began,
        by priority then submission (work that waits later in the cycle is among it)."""
        self._limit_levels: list[tuple[LimitLevel, ...]] = []
        """Per project: the levels of its path, root first, that have a limit."""
        self._quota_checks: list[tuple[QuotaCheck, ...]] = []
        """Per project: the quotas along its path, root first, that G3 checks."""
        self._limit_texts: dict[tuple[int, int, int, bool], str] = {}
        self._quota_texts: dict[tuple[int, int, int, bool, str], str] = {}
        """Policy problems in words by what they say: a long queue gets a few texts, often."""
        self._gpu_caps: list[tuple[tuple[int, bool, int | None], ...]] = []
        """Per project: (level, is quota, GPU cap) along its path, for `gpu_headroom`."""
        for record in session.projects:
            levels: list[LimitLevel] = []
            quotas: list[QuotaCheck] = []
            caps: list[tuple[int, bool, int | None]] = []
            for p in record.ancestors:
                spec = session.projects[p].spec
                limit, quota = spec.limit, spec.quota
                capped = tuple(
                    (resource, cap)
                    for resource, cap in enumerate(
                        (limit.gpu_milli, limit.cpu_milli, limit.memory_mib)
                    )
                    if cap is not None
                )
                if capped:
                    levels.append((p, capped))
                for resource, amount in enumerate(
                    (quota.gpu_milli, quota.cpu_milli, quota.memory_mib)
                ):
                    if resource == GPU or amount != 0:
                        quotas.append((p, resource, amount))
                caps.append((p, False, limit.gpu_milli))
                caps.append((p, True, quota.gpu_milli))
            self._limit_levels.append(tuple(levels))
            self._quota_checks.append(tuple(quotas))
            self._gpu_caps.append(tuple(caps))

    def limit_levels(self, project: int) -> tuple[LimitLevel, ...]:
        """The levels of `project`'s path, root first, that have a limit."""
        return self._limit_levels[project]

    # --- requests ---------------------------------------------------------------------------

    def ask(self, work: WorkRecord, task_count: int) -> Ask:
        spec = work.spec
        # `NEW_TUPLE`: the `__new__` that `NamedTuple` writes is Python code (the compiled
        # core would run it interpreted), and the cycle asks for thousands.
        return NEW_TUPLE(
            Ask,
            (
                work.task_gpu_milli * task_count,
                spec.cpu_milli * task_count,
                spec.memory_mib * task_count,
            ),
        )

    def tasks_to_start(self, work: WorkRecord) -> tuple[list[int], list[int]]:
        """(gang tasks that must start together, elastic extras that start when they fit)."""
        if work.allocs:
            return [], work.missing_tasks
        missing = list(range(work.spec.tasks))
        gang = work.gang  # `WorkRecord.gang`: the one rule for how many start together
        if gang == len(missing):  # the common case: every task, and no list sliced twice
            return missing, []
        return missing[:gang], missing[gang:]

    # --- policy checks ----------------------------------------------------------------------

    def over_limit(self, work: WorkRecord, ask: Ask) -> list[int]:
        """Levels of the project tree (root first) whose limit `ask` would exceed."""
        levels = []
        projects = self.session.projects
        for p, capped in self._limit_levels[work.project]:
            holding = projects[p].holding
            for resource, cap in capped:
                if holding[resource] + ask[resource] > cap:
                    levels.append(p)
                    break
        return levels

    def limit_problem(self, work: WorkRecord, ask: Ask) -> str | None:
        """Why `ask` would take the project or a department above its limit, or None."""
        levels = self._limit_levels[work.project]
        if not levels:
            return None
        projects = self.session.projects
        for p, capped in levels:
            record = projects[p]
            for resource, cap in capped:
                held = record.holding[resource]
                if held + ask[resource] > cap:
                    key = (p, resource, held, p == work.project)
                    text = self._limit_texts.get(key)
                    if text is None:
                        kind = "project" if p == work.project else "department"
                        text = self._limit_texts[key] = (
                            f"{kind} {record.name} is at its limit of"
                            f" {_format_amount(resource, cap)}"
                            f" (holding {_format_amount(resource, held)})"
                        )
                    return text
        return None

    def quota_problem(self, work: WorkRecord, ask: Ask) -> str | None:
        """G3: non-preemptible work only within quota, at every level. None if fine."""
        if work.preemptible:
            return None
        projects = self.session.projects
        for p, resource, amount in self._quota_checks[work.project]:
            record = projects[p]
            held = record.nonpreemptible_holding[resource]
            if held + ask[resource] > amount:
                work_type = work.spec.type._value_
                key = (p, resource, held, p == work.project, work_type)
                text = self._quota_texts.get(key)
                if text is None:
                    kind = "project" if p == work.project else "department"
                    text = self._quota_texts[key] = (
                        f"non-preemptible ({work_type}) work must stay within quota:"
                        f" {kind} {record.name} has a quota of {_format_amount(resource, amount)}"
                        f" and already holds {_format_amount(resource, held)} of"
                        " non-preemptible work"
                    )
                return text
        return None

    def policy_problem(self, work: WorkRecord, task_count: int) -> str | None:
        """Checked before placing. A memory request is charged as the fraction of the device it
        lands on, estimated here on the largest device: a lower bound, so `holds_within_policy`
        checks again once the tasks are placed."""
        if work.preemptible and not self._limit_levels[work.project]:
            return None
        ask = self.ask(work, task_count)
        return self.limit_problem(work, ask) or self.quota_problem(work, ask)

    def holds_within_policy(self, work: WorkRecord) -> bool:
        """After placing: limits at every level, and G3 for non-preemptible work. Allocate needs
        it for memory requests only (other charges are exact in `policy_problem`); evictions
        need it always, since evicting the project's own work changes what it holds."""
        projects = self.session.projects
        for p, capped in self._limit_levels[work.project]:
            holding = projects[p].holding
            for resource, cap in capped:
                if holding[resource] > cap:
                    return False
        return work.preemptible or self.quota_problem(work, _NOTHING) is None

    # --- placing ----------------------------------------------------------------------------

    def place_tasks(
        self, statement: Statement, work: WorkRecord, tasks: list[int], excluded: int | None = None
    ) -> bool:
        """Place `tasks` of `work` inside `statement`; False (partly placed) if one does not fit."""
        exact_charge = work.spec.gpu.kind is not _MEMORY
        for task in tasks:
            headroom = None if exact_charge else self.gpu_headroom(work)
            alloc = self.placer.find(work.spec, task, excluded, headroom)
            if alloc is None:
                return False
            statement.place(work, alloc)
        return exact_charge or self.holds_within_policy(work)

    def gpu_headroom(self, work: WorkRecord) -> int | None:
        """Most GPU one more task may be charged under the limits (and quota, for non-preemptible
        work) of every level; None when nothing caps it. Matters for memory requests, whose
        charge depends on the device they land on."""
        headroom: int | None = None
        projects = self.session.projects
        preemptible = work.preemptible
        for p, is_quota, cap in self._gpu_caps[work.project]:
            if cap is None or (is_quota and preemptible):
                continue
            record = projects[p]
            holding = record.nonpreemptible_holding[GPU] if is_quota else record.holding[GPU]
            if headroom is None or cap - holding < headroom:
                headroom = cap - holding
        return headroom

    def place_extras(self, work: WorkRecord, extras: list[int]) -> None:
        """Start elastic tasks above `min_available`, one at a time, while they fit."""
        for task in extras:
            if self.policy_problem(work, 1) is not None:
                return
            exact_charge = work.spec.gpu.kind is not _MEMORY
            headroom = None if exact_charge else self.gpu_headroom(work)
            alloc = self.placer.find(work.spec, task, None, headroom)
            if alloc is None:
                return
            statement = Statement(self.session)
            statement.place(work, alloc)
            if not exact_charge and not self.holds_within_policy(work):
                statement.rollback()
                return
            if work.index not in self.bound:
                self.mark_started(work, "elastic task fits in idle capacity")

    def mark_started(self, work: WorkRecord, reason: str) -> None:
        work.state = _RUNNING
        work.started_this_cycle = True
        self.bound[work.index] = None
        self.bind_reasons.setdefault(work.index, reason)
        self.reasons[work.index] = None

    def add_move(self, move: Move) -> None:
        """Record a move; a task moved again in the same cycle keeps one Move, first source to
        last target (none at all if it ends where it started)."""
        for position, earlier in enumerate(self.moves):
            if (earlier.workload, earlier.target.task_index) == (
                move.workload,
                move.target.task_index,
            ):
                merged = replace(earlier, target=move.target)
                if merged.source == merged.target:
                    del self.moves[position]
                else:
                    self.moves[position] = merged
                return
        self.moves.append(move)

    def moved_this_cycle(self, workload: str, task_index: int) -> bool:
        return any((m.workload, m.target.task_index) == (workload, task_index) for m in self.moves)

    # --- pending reasons --------------------------------------------------------------------

    def capacity_reason(self, work: WorkRecord, gang: list[int]) -> str:
        """Why `gang` of `work` does not fit in the idle capacity, in a researcher's words."""
        reason = self._capacity_reason(work, gang)
        spec = work.spec
        if not self.placer.admits_any(spec):
            return reason  # the reason is the selector or the taints already
        notes = []
        if spec.node_selector:
            notes.append(f"it may only use nodes matching its selector: {_selector_text(spec)}")
        tainted, keys = self.placer.repelling_taints(spec)
        if tainted:
            notes.append(f"{_nodes_have(tainted)} taints it does not tolerate: {_keys_text(keys)}")
        return f"{reason} ({'; '.join(notes)})" if notes else reason

    def _capacity_reason(self, work: WorkRecord, gang: list[int]) -> str:
        spec = work.spec
        headroom = self.gpu_headroom(work)
        if (
            spec.gpu.kind is _MEMORY
            and headroom is not None
            and self.placer.find(spec, gang[0]) is not None
        ):
            bars = "limit" if work.preemptible else "limit or quota"
            return (
                f"{spec.gpu.amount} MiB of device memory is charged as the fraction of the device"
                f" it lands on; on every device with room that is more than the"
                f" {format_gpu(max(headroom, 0))} its project may still take under its {bars}"
            )
        session = self.session
        placer = self.placer
        if not placer.selector_matches_any(spec):
            return f"no node matches its node selector ({_selector_text(spec)})"
        if not placer.admits_any(spec):
            tainted, keys = placer.repelling_taints(spec)
            if spec.node_selector:
                which = "node" if tainted == 1 else "nodes"
                verb = "has" if tainted == 1 else "have"
                return (
                    f"no node admits it: the {tainted} {which} matching its node selector"
                    f" ({_selector_text(spec)}) {verb} taints it does not tolerate"
                    f" ({_keys_text(keys)})"
                )
            return (
                f"no node admits it: {_nodes_have(tainted)} taints it does not tolerate"
                f" ({_keys_text(keys)})"
            )
        idle = format_gpu(session.idle_gpu_milli)
        cpu_memory = self._cpu_memory_reason(work)
        if cpu_memory is not None:
            return cpu_memory
        if spec.gpu.kind is _WHOLE:
            per_task = spec.gpu.amount
            if per_task > session.max_gpus_per_node:
                return (
                    f"needs {per_task} GPUs on one node, but the largest node has "
                    f"{session.max_gpus_per_node}"
                )
            block = placer.largest_empty_block(spec)
            if len(gang) > 1:
                return (
                    f"needs {len(gang)} tasks of {format_gpu(per_task * MILLI_PER_GPU)} each, "
                    f"all placed together; {idle} idle, largest free block on one node is {block}"
                )
            if per_task > 1:
                return f"needs {per_task} whole GPUs on one node; largest free block is {block}"
            if session.idle_gpu_milli == 0:
                return (
                    f"needs 1 whole GPU; all {format_gpu(session.capacity_gpu_milli)} are allocated"
                )
            return f"needs 1 whole GPU; none is entirely free ({idle} idle, in parts of GPUs)"
        largest = format_gpu(placer.largest_free_fraction(spec))
        need = format_gpu(work.task_gpu_milli)
        if len(gang) > 1:
            return (
                f"needs {len(gang)} tasks of {need} each, all placed together; "
                f"largest free part of a device is {largest}"
            )
        return f"needs {need} on one device; largest free part of a device is {largest}"

    def _cpu_memory_reason(self, work: WorkRecord) -> str | None:
        """A reason when GPUs would fit somewhere but CPU or memory does not, else None."""
        spec = work.spec
        if spec.cpu_milli == 0 and spec.memory_mib == 0:
            return None
        placer = self.placer
        if spec.gpu.kind is _WHOLE:
            gpu_only = placer.largest_empty_block(spec, count_cpu_memory=False)
            fits_gpu_only = gpu_only >= spec.gpu.amount
            fits = placer.largest_empty_block(spec) >= spec.gpu.amount
        else:
            fits_gpu_only = placer.largest_free_fraction(spec, False) >= work.task_gpu_milli
            fits = placer.largest_free_fraction(spec) >= work.task_gpu_milli
        if not fits_gpu_only or fits:
            return None
        wanted = []
        if spec.cpu_milli:
            wanted.append(_format_amount(CPU, spec.cpu_milli))
        if spec.memory_mib:
            wanted.append(_format_amount(MEMORY, spec.memory_mib))
        return (
            f"needs {' and '.join(wanted)} per task beside its GPUs; no node with enough idle"
            " GPUs has that much CPU and memory free"
        )
