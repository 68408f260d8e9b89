"""Load a scenario file: YAML with line numbers -> pydantic schema -> checked core objects.

Reading the file, YAML with the line of every key and the schema's errors in plain words are
`gpupool.userfiles`' (the one way every user file is read); this module adds what only a
scenario has: checks across the file (names that must exist, a parent before its children,
devices in range, events that fit) and the conversion to core objects. Every problem is a
`UserFileError` reported as `path:line: key.path: message`, the way a compiler would, and
never as a traceback. `ScenarioError` is the same class, under the name it had here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpupool.core.model import (
    GpuRequest,
    Project,
    SchedulerSettings,
    TaskPlacement,
    Workload,
    WorkloadType,
)
from gpupool.core.model import Node as ClusterNode
from gpupool.userfiles import (
    KeyPath,
    Lines,
    UserFileError,
    format_key_path,
    read_text,
    read_yaml,
    unknown_name,
    validate,
)
from gpupool.whatif.devices import DeviceBook
from gpupool.whatif.scenario import (
    Action,
    Event,
    Expectations,
    Lifecycle,
    LifecycleAction,
    Scenario,
    SetQuota,
    ShareExpectation,
    Submit,
    WorkloadSetup,
)
from gpupool.whatif.schema import (
    EventSpec,
    ExpectSpec,
    ScenarioSpec,
    WorkloadSpec,
)

__all__ = ["ScenarioError", "load_scenario", "load_scenario_text"]

ScenarioError = UserFileError
"""A malformed scenario file: the one error type of every user file (`gpupool.userfiles`)."""

_SHAPE = "a scenario is a mapping with version, nodes, projects and workloads"
_MISSING_HINTS: dict[KeyPath, str] = {("version",): "add `version: 1` at the top"}
_WRONG: dict[KeyPath, str] = {
    ("version",): "this gpupool reads scenario format version 1 (got {got})"
}


def load_scenario(path: str | Path) -> Scenario:
    """Read and check the scenario at `path`; raises `UserFileError` for any problem."""
    return load_scenario_text(read_text(path, kind="a scenario file"), str(path))


def load_scenario_text(text: str, path: str = "<scenario>") -> Scenario:
    """Check a scenario given as YAML text; `path` is only used in messages."""
    document = read_yaml(text, path)
    spec = validate(document, ScenarioSpec, _SHAPE, _MISSING_HINTS, _WRONG)
    return _Builder(spec, path, document.lines).build()


# --- cross-references and conversion to core objects -------------------------------------------


class _Builder:
    """Checks what the schema cannot (names, tree order, devices) and builds the `Scenario`."""

    def __init__(self, spec: ScenarioSpec, path: str, lines: Lines) -> None:
        self._spec = spec
        self._path = path
        self._lines = lines
        self._nodes: dict[str, ClusterNode] = {}
        self._projects: dict[str, Project] = {}
        self._departments: dict[str, list[str]] = {}
        self._workload_names: dict[str, int] = {}
        self._workload_tasks: dict[str, int] = {}

    def _error(self, loc: KeyPath, message: str) -> UserFileError:
        return UserFileError(self._path, self._lines.of(loc), format_key_path(loc), message)

    def build(self) -> Scenario:
        spec = self._spec
        self._build_nodes()
        self._build_projects()
        self._collect_workload_names()
        initial = self._initial_workloads()
        events = self._events(first_seq=len(initial))
        expect = None if spec.expect is None else self._expectations(spec.expect, ("expect",))
        return Scenario(
            path=self._path,
            name=spec.name or Path(self._path).stem,
            settings=SchedulerSettings(placement=spec.settings.placement),
            grace_period_s=spec.settings.grace_period_s,
            nodes=tuple(self._nodes.values()),
            projects=tuple(self._projects.values()),
            workloads=initial,
            events=events,
            expect=expect,
        )

    def _build_nodes(self) -> None:
        for index, node in enumerate(self._spec.nodes):
            if node.name in self._nodes:
                raise self._error(("nodes", index, "name"), f"node `{node.name}` is listed twice")
            self._nodes[node.name] = node.to_core()

    def _build_projects(self) -> None:
        specs = self._spec.projects
        names = {p.name for p in specs}
        for index, project in enumerate(specs):
            if project.name in self._projects:
                raise self._error(
                    ("projects", index, "name"), f"project `{project.name}` is listed twice"
                )
            parent = project.parent
            if parent is not None:
                loc: KeyPath = ("projects", index, "parent")
                if parent == project.name:
                    raise self._error(loc, f"project `{parent}` cannot be its own parent")
                if parent not in names:
                    raise self._error(loc, unknown_name("project", parent, names))
                if parent not in self._projects:
                    raise self._error(
                        loc,
                        f"parent `{parent}` must be listed before its child `{project.name}`: "
                        "move it up",
                    )
                self._departments.setdefault(parent, []).append(project.name)
            self._projects[project.name] = project.to_core()

    def _collect_workload_names(self) -> None:
        """All workload names (initial and submitted): unique, each in a leaf project."""
        located: list[tuple[WorkloadSpec, KeyPath]] = [
            (w, ("workloads", i)) for i, w in enumerate(self._spec.workloads)
        ]
        located += [
            (e.submit, ("events", i, "submit"))
            for i, e in enumerate(self._spec.events)
            if e.submit is not None
        ]
        for workload, loc in located:
            if workload.name in self._workload_names:
                first = self._workload_names[workload.name]
                raise self._error(
                    (*loc, "name"),
                    f"workload `{workload.name}` is defined twice (first on line {first})",
                )
            self._workload_names[workload.name] = self._lines.of((*loc, "name")) or 0
            self._workload_tasks[workload.name] = workload.tasks
            self._check_project(workload.project, (*loc, "project"))

    def _check_project(self, name: str, loc: KeyPath) -> None:
        if name not in self._projects:
            raise self._error(loc, unknown_name("project", name, self._projects))
        children = self._departments.get(name)
        if children:
            raise self._error(
                loc,
                f"`{name}` is a department (parent of {', '.join(children)}); workloads belong "
                "to a project without children",
            )

    def _initial_workloads(self) -> tuple[WorkloadSetup, ...]:
        specs = list(enumerate(self._spec.workloads))
        order = sorted(specs, key=lambda item: item[1].submitted_at)
        seq = {index: position for position, (index, _) in enumerate(order)}
        devices = DeviceBook(self._nodes)
        placements: dict[int, tuple[TaskPlacement, ...]] = {}
        # Explicit devices first, so that "first free" never takes a device someone named.
        running = [(i, w) for i, w in specs if w.running_on is not None]
        running.sort(key=lambda item: item[1].devices is None)
        for index, spec in running:
            placements[index] = self._place(spec, ("workloads", index), devices)
        setups = [
            self._setup(spec, ("workloads", index), seq[index], placements.get(index, ()))
            for index, spec in specs
        ]
        return tuple(sorted(setups, key=lambda s: s.workload.submit_seq))

    def _place(
        self, spec: WorkloadSpec, loc: KeyPath, book: DeviceBook
    ) -> tuple[TaskPlacement, ...]:
        assert spec.running_on is not None
        request = _request(spec)
        result: list[TaskPlacement] = []
        for task, node_name in enumerate(spec.running_on):
            node_loc: KeyPath = (*loc, "running_on", task)
            node = self._nodes.get(node_name)
            if node is None:
                raise self._error(node_loc, unknown_name("node", node_name, self._nodes))
            wanted = None if spec.devices is None else tuple(spec.devices[task])
            device_loc: KeyPath = node_loc if wanted is None else (*loc, "devices", task)
            try:
                chosen = book.take(node, request, wanted, spec.cpu_milli, spec.memory_mib)
            except ValueError as exc:
                raise self._error(device_loc, f"{spec.name} task {task}: {exc}") from None
            result.append(TaskPlacement(task_index=task, node=node_name, devices=chosen))
        return tuple(result)

    def _setup(
        self,
        spec: WorkloadSpec,
        loc: KeyPath,
        submit_seq: int,
        placements: tuple[TaskPlacement, ...],
    ) -> WorkloadSetup:
        started = None
        if placements:
            started = spec.started_at if spec.started_at is not None else 0
        workload = Workload(
            name=spec.name,
            project=spec.project,
            type=WorkloadType(spec.type),
            gpu=_request(spec),
            tasks=spec.tasks,
            min_available=spec.min_available,
            priority=spec.priority,
            preemptible=spec.preemptible,
            cpu_milli=spec.cpu_milli,
            memory_mib=spec.memory_mib,
            node_selector=tuple(sorted((k, tuple(v)) for k, v in spec.node_selector.items())),
            min_runtime_s=spec.min_runtime_s,
            submit_seq=submit_seq,
            started_at_s=started,
            placements=placements,
        )
        return WorkloadSetup(workload=workload, duration_s=spec.duration_s, line=self._line(loc))

    def _line(self, loc: KeyPath) -> int:
        return self._lines.of(loc) or 0

    def _events(self, first_seq: int) -> tuple[Event, ...]:
        indexed = sorted(enumerate(self._spec.events), key=lambda item: item[1].at)
        events: list[Event] = []
        seq = first_seq
        for index, event in indexed:
            loc: KeyPath = ("events", index)
            action: Action
            if event.submit is not None:
                self._check_submit(event.submit, (*loc, "submit"))
                action = Submit(self._setup(event.submit, (*loc, "submit"), seq, ()))
                seq += 1
            elif event.set_quota is not None:
                project = event.set_quota.project
                if project not in self._projects:
                    raise self._error(
                        (*loc, "set_quota", "project"),
                        unknown_name("project", project, self._projects),
                    )
                quota = event.set_quota.quota
                action = SetQuota(project, quota.gpu, quota.cpu_milli, quota.memory_mib)
            elif event.expect is not None:
                action = self._expectations(event.expect, (*loc, "expect"))
            else:
                action = self._lifecycle(event, loc)
            events.append(Event(at_s=event.at, action=action, line=self._line(loc)))
        return tuple(events)

    def _lifecycle(self, event: EventSpec, loc: KeyPath) -> LifecycleAction:
        for kind in Lifecycle:
            name = getattr(event, kind.value)
            if isinstance(name, str):
                self._check_workload(name, (*loc, kind.value))
                return LifecycleAction(kind, name)
        raise AssertionError("the schema guarantees exactly one action per event")

    def _check_submit(self, spec: WorkloadSpec, loc: KeyPath) -> None:
        """A submitted workload starts pending at the event's time; refuse keys that disagree."""
        for key in ("running_on", "devices", "started_at"):
            if getattr(spec, key) is not None:
                raise self._error(
                    (*loc, key),
                    f"a submitted workload starts pending, so `{key}` does not apply; "
                    "list a workload that is already running under `workloads`",
                )
        if "submitted_at" in spec.model_fields_set:
            raise self._error(
                (*loc, "submitted_at"),
                "a submitted workload is submitted at the event's `at`; remove submitted_at",
            )

    def _check_workload(self, name: str, loc: KeyPath) -> None:
        if name not in self._workload_names:
            raise self._error(loc, unknown_name("workload", name, self._workload_names))

    def _check_workloads(self, names: Sequence[str] | None, loc: KeyPath) -> tuple[str, ...] | None:
        if names is None:
            return None
        for index, name in enumerate(names):
            self._check_workload(name, (*loc, index))
        return tuple(names)

    def _expectations(self, spec: ExpectSpec, loc: KeyPath) -> Expectations:
        placements: list[tuple[str, tuple[str, ...]]] = []
        for name, nodes in (spec.placements or {}).items():
            self._check_workload(name, (*loc, "placements", name))
            for index, node in enumerate(nodes):
                if node not in self._nodes:
                    raise self._error(
                        (*loc, "placements", name, index), unknown_name("node", node, self._nodes)
                    )
            placements.append((name, tuple(nodes)))
        groups: dict[str, tuple[tuple[str, ...], ...]] = {}
        for key in ("same_device", "different_devices"):
            value: list[list[str]] = getattr(spec, key) or []
            for group_index, group in enumerate(value):
                group_loc: KeyPath = (*loc, key, group_index)
                if len(group) < 2:
                    raise self._error(group_loc, "a group names at least two workloads")
                self._check_workloads(group, group_loc)
                if key == "same_device":
                    for index, name in enumerate(group):
                        if self._workload_tasks[name] != 1:
                            raise self._error(
                                (*group_loc, index),
                                f"same_device compares single-task workloads; `{name}` has "
                                f"{self._workload_tasks[name]} tasks",
                            )
            groups[key] = tuple(tuple(group) for group in value)
        shares: list[tuple[str, ShareExpectation]] = []
        for project, share in (spec.fair_share or {}).items():
            if project not in self._projects:
                raise self._error(
                    (*loc, "fair_share", project), unknown_name("project", project, self._projects)
                )
            shares.append((project, ShareExpectation(share.gpu, share.cpu_milli, share.memory_mib)))
        count = spec.count
        return Expectations(
            line=self._line(loc),
            running=self._check_workloads(spec.running, (*loc, "running")),
            pending=self._check_workloads(spec.pending, (*loc, "pending")),
            evicted=self._check_workloads(spec.evicted, (*loc, "evicted")),
            not_evicted=self._check_workloads(spec.not_evicted, (*loc, "not_evicted")),
            count_running=None if count is None else count.running,
            count_pending=None if count is None else count.pending,
            count_evicted=None if count is None else count.evicted,
            placements=tuple(placements),
            same_device=groups["same_device"],
            different_devices=groups["different_devices"],
            fair_share=tuple(shares),
            key_lines=tuple(
                (key, self._line((*loc, key))) for key in sorted(spec.model_fields_set)
            ),
        )


def _request(spec: WorkloadSpec) -> GpuRequest:
    if spec.gpu is not None:
        return spec.gpu.to_request(spec.gpu_limit)
    assert spec.gpu_memory_mib is not None  # the schema requires one of the two
    return GpuRequest.memory(spec.gpu_memory_mib)
