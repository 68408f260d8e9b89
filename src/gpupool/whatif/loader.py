"""Load a scenario file: YAML with line numbers -> pydantic schema -> checked core objects.

PyYAML's `safe_load` forgets where things were, so the text is `compose`d into nodes (which
carry `start_mark`), and plain Python data is built from those nodes together with a map from
key path (`("workloads", 2, "gpu")`) to line. Schema and cross-reference errors are then
reported as `path:line: key.path: message`, the way a compiler would, and never as a traceback.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pydantic
import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpupool.core.model import (
    MILLI_PER_GPU,
    GpuRequest,
    Project,
    SchedulerSettings,
    TaskPlacement,
    Workload,
    WorkloadType,
)
from gpupool.core.model import Node as ClusterNode
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

KeyPath = tuple[str | int, ...]


class ScenarioError(Exception):
    """A malformed scenario file: where (file, line, key path) and what to do about it.

    `also` holds further problems found in the same pass (schema errors come all at once), so
    that a user can fix them in one go; `str()` shows the first.
    """

    def __init__(
        self,
        path: str,
        line: int | None,
        key_path: str,
        message: str,
        also: tuple[ScenarioError, ...] = (),
    ) -> None:
        super().__init__(path, line, key_path, message)
        self.path = path
        self.line = line
        self.key_path = key_path
        self.message = message
        self.also = also

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        if self.key_path:
            return f"{where}: {self.key_path}: {self.message}"
        return f"{where}: {self.message}"

    @property
    def all(self) -> tuple[ScenarioError, ...]:
        """This problem followed by the others found with it."""
        return (self, *self.also)


def format_key_path(path: Iterable[str | int]) -> str:
    """`("workloads", 2, "gpu")` -> `workloads[2].gpu`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def load_scenario(path: str | Path) -> Scenario:
    """Read and check the scenario at `path`; raises `ScenarioError` for any problem."""
    shown = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(shown, None, "", "no such file") from None
    except IsADirectoryError:
        raise ScenarioError(shown, None, "", "is a directory, not a scenario file") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(shown, None, "", f"is not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise ScenarioError(shown, None, "", f"cannot be read: {exc.strerror}") from None
    return load_scenario_text(text, shown)


def load_scenario_text(text: str, path: str = "<scenario>") -> Scenario:
    """Check a scenario given as YAML text; `path` is only used in messages."""
    data, lines = _read_yaml(text, path)
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {_yaml_kind(data)}"
        raise ScenarioError(
            path,
            1,
            "",
            f"a scenario is a mapping with version, nodes, projects and workloads (got {got})",
        )
    try:
        spec = ScenarioSpec.model_validate(data)
    except pydantic.ValidationError as exc:
        raise _schema_error(exc, path, lines) from None
    return _Builder(spec, path, lines).build()


# --- YAML with line numbers -------------------------------------------------------------------


class _Lines:
    """Line numbers (1-based) of every key and list item, by key path."""

    def __init__(self) -> None:
        self._lines: dict[KeyPath, int] = {}

    def add(self, path: KeyPath, node: Node) -> None:
        self._lines[path] = node.start_mark.line + 1

    def of(self, path: Sequence[str | int]) -> int | None:
        """The line of `path`, or of its nearest ancestor the file has (a missing key's map)."""
        key = tuple(path)
        while key:
            if key in self._lines:
                return self._lines[key]
            key = key[:-1]
        return self._lines.get((), 1)


def _read_yaml(text: str, path: str) -> tuple[object, _Lines]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        what = "; ".join(part for part in (exc.context, exc.problem) if part)
        started = exc.context_mark
        if started is not None and exc.problem_mark is not None and started.line + 1 != line:
            what += f" (the construct started on line {started.line + 1})"
        raise ScenarioError(path, line, "", f"YAML syntax error: {what}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(path, None, "", f"YAML syntax error: {exc}") from None
    lines = _Lines()
    if root is None:
        return None, lines
    lines.add((), root)
    return _Walker(path, lines).build(root, ()), lines


class _Walker:
    """Builds plain data from composed YAML nodes, recording lines and refusing duplicate keys."""

    MAX_NODES = 200_000
    """Aliases are expanded; this bounds the work a few nested `*alias`es can ask for."""

    def __init__(self, path: str, lines: _Lines) -> None:
        self._path = path
        self._lines = lines
        self._constructor = SafeConstructor()
        self._open: set[int] = set()
        self._count = 0

    def build(self, node: Node, path: KeyPath) -> object:
        line = node.start_mark.line + 1
        self._count += 1
        if self._count > self.MAX_NODES:
            raise ScenarioError(
                self._path, line, format_key_path(path), "the file expands to too many values"
            )
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        if id(node) in self._open:
            raise ScenarioError(
                self._path, line, format_key_path(path), "an alias refers to itself (`*name`)"
            )
        self._open.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                items: list[object] = []
                for index, item in enumerate(node.value):
                    self._lines.add((*path, index), item)
                    items.append(self.build(item, (*path, index)))
                return items
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
        finally:
            self._open.discard(id(node))
        raise ScenarioError(self._path, line, format_key_path(path), "unsupported YAML node")

    def _scalar(self, node: ScalarNode, path: KeyPath) -> object:
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise ScenarioError(
                self._path, node.start_mark.line + 1, format_key_path(path), f"bad value: {exc}"
            ) from None

    def _mapping(self, node: MappingNode, path: KeyPath) -> dict[object, object]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self._scalar(key_node, path)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise ScenarioError(
                        self._path,
                        line,
                        format_key_path((*path, str(key))),
                        f"key `{key}` appears twice in this mapping (first on line {seen[key]})",
                    )
                seen[key] = line
        try:
            self._constructor.flatten_mapping(node)  # YAML merge keys (`<<: *defaults`)
        except yaml.YAMLError as exc:
            raise ScenarioError(
                self._path, node.start_mark.line + 1, format_key_path(path), str(exc)
            ) from None
        result: dict[object, object] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise ScenarioError(
                    self._path,
                    key_node.start_mark.line + 1,
                    format_key_path(path),
                    "a key must be a plain name, not a list or mapping",
                )
            key = self._scalar(key_node, path)
            if not isinstance(key, str | int):
                key = str(key)
            self._lines.add((*path, key), key_node)
            result[key] = self.build(value_node, (*path, key))
        return result


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, bool):
        return "true/false value"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "text value"
    return type(value).__name__


# --- schema errors ------------------------------------------------------------------------------


def _schema_error(exc: pydantic.ValidationError, path: str, lines: _Lines) -> ScenarioError:
    problems: list[ScenarioError] = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        key_path, message = _explain(error, loc)
        problems.append(ScenarioError(path, lines.of(loc), key_path, message))
    problems.sort(key=lambda p: p.line or 0)
    first, *rest = problems
    return ScenarioError(first.path, first.line, first.key_path, first.message, tuple(rest))


def _show_input(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


def _explain(error: Mapping[str, Any], loc: KeyPath) -> tuple[str, str]:
    """Key path and a plain-words message for one pydantic error."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    got = _show_input(value)
    if kind == "extra_forbidden":
        key = str(loc[-1])
        return format_key_path(loc), _unknown_key(key, _allowed_keys(loc[:-1]))
    if kind == "missing":
        key = str(loc[-1])
        hint = " (add `version: 1` at the top)" if loc == ("version",) else ""
        return format_key_path(loc[:-1]), f"missing required key `{key}`{hint}"
    if loc == ("version",):
        return "version", f"this gpupool reads scenario format version 1 (got {got})"
    if kind == "value_error":
        return format_key_path(loc), str(ctx.get("error", error["msg"]))
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return format_key_path(loc), f"expected a whole number (got {got})"
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        return format_key_path(loc), f"must be at least {bound} (got {got})"
    if kind == "string_type":
        hint = f"; quote it if it is a name: '{value}'" if isinstance(value, int | float) else ""
        return format_key_path(loc), f"expected text (got {got}){hint}"
    if kind == "string_too_short":
        return format_key_path(loc), "must not be empty"
    if kind == "bool_type":
        return format_key_path(loc), f"expected true or false (got {got})"
    if kind == "literal_error":
        return format_key_path(loc), f"must be {ctx.get('expected', '?')} (got {got})"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return format_key_path(loc), f"expected a mapping of keys like `{{key: value}}` (got {got})"
    if kind == "list_type":
        none = "; write [] for none" if value is None else ""
        return format_key_path(loc), f"expected a list like `[a, b]` (got {got}{none})"
    return format_key_path(loc), f"{error['msg']} (got {got})"


def _unknown_key(key: str, allowed: Sequence[str]) -> str:
    message = f"unknown key `{key}`"
    close = difflib.get_close_matches(key, allowed, n=1)
    if close:
        message += f"; did you mean `{close[0]}`?"
    if allowed:
        message += f" (allowed here: {', '.join(allowed)})"
    return message


def _allowed_keys(loc: KeyPath) -> list[str]:
    """The keys the schema allows at `loc`, found by walking the models' field annotations."""
    model: Any = ScenarioSpec
    annotation: Any = None
    for part in loc:
        if annotation is None:
            if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
                return []
            field_info = model.model_fields.get(str(part))
            if field_info is None:
                return []
            annotation = field_info.annotation
        else:
            annotation = _element(annotation)
        model, annotation = _as_model(annotation)
    if isinstance(model, type) and issubclass(model, pydantic.BaseModel):
        return list(model.model_fields)
    return []


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return options[0] if len(options) == 1 else annotation
    return annotation


def _element(annotation: Any) -> Any:
    annotation = _strip_optional(annotation)
    args = typing.get_args(annotation)
    return _strip_optional(args[-1]) if args else None


def _as_model(annotation: Any) -> tuple[Any, Any]:
    """(model, None) when `annotation` is a model, else (None, annotation) to descend into."""
    annotation = _strip_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation, None
    return None, annotation


# --- cross-references and conversion to core objects -------------------------------------------


class _Builder:
    """Checks what the schema cannot (names, tree order, devices) and builds the `Scenario`."""

    def __init__(self, spec: ScenarioSpec, path: str, lines: _Lines) -> None:
        self._spec = spec
        self._path = path
        self._lines = lines
        self._nodes: dict[str, ClusterNode] = {}
        self._projects: dict[str, Project] = {}
        self._departments: dict[str, list[str]] = {}
        self._workload_names: dict[str, int] = {}
        self._workload_tasks: dict[str, int] = {}

    def _error(self, loc: KeyPath, message: str) -> ScenarioError:
        return ScenarioError(self._path, self._lines.of(loc), format_key_path(loc), message)

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
                    raise self._error(loc, _unknown("project", parent, names))
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
            raise self._error(loc, _unknown("project", name, self._projects))
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
        devices = _DeviceBook(self._nodes)
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
        self, spec: WorkloadSpec, loc: KeyPath, book: _DeviceBook
    ) -> tuple[TaskPlacement, ...]:
        assert spec.running_on is not None
        request = _request(spec)
        result: list[TaskPlacement] = []
        for task, node_name in enumerate(spec.running_on):
            node_loc: KeyPath = (*loc, "running_on", task)
            node = self._nodes.get(node_name)
            if node is None:
                raise self._error(node_loc, _unknown("node", node_name, self._nodes))
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
                        (*loc, "set_quota", "project"), _unknown("project", project, self._projects)
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
            raise self._error(loc, _unknown("workload", name, self._workload_names))

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
                        (*loc, "placements", name, index), _unknown("node", node, self._nodes)
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
                    (*loc, "fair_share", project), _unknown("project", project, self._projects)
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


def _unknown(kind: str, name: str, known: Iterable[str]) -> str:
    names = sorted(known)
    message = f"unknown {kind} `{name}`"
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        message += f"; did you mean `{close[0]}`?"
    if not names:
        return message + f" (no {kind}s are defined)"
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    return message + f" (known {kind}s: {shown})"


def _request(spec: WorkloadSpec) -> GpuRequest:
    if spec.gpu is not None:
        return spec.gpu.to_request(spec.gpu_limit)
    assert spec.gpu_memory_mib is not None  # the schema requires one of the two
    return GpuRequest.memory(spec.gpu_memory_mib)


class _DeviceBook:
    """What the initially running workloads use, to place them and refuse overcommitment."""

    def __init__(self, nodes: Mapping[str, ClusterNode]) -> None:
        self._nodes = nodes
        self._whole: dict[str, set[int]] = {name: set() for name in nodes}
        self._milli: dict[tuple[str, int], int] = {}
        self._memory: dict[tuple[str, int], int] = {}
        self._cpu: dict[str, int] = {}
        self._ram: dict[str, int] = {}

    def take(
        self,
        node: ClusterNode,
        request: GpuRequest,
        wanted: tuple[int, ...] | None,
        cpu_milli: int,
        memory_mib: int,
    ) -> tuple[int, ...]:
        """Devices for one task on `node` (`wanted`, or the first free); ValueError if none."""
        for index in wanted or ():
            if index >= node.gpu_count:
                raise ValueError(
                    f"device {index} does not exist on {node.name}, which has devices "
                    f"0 to {node.gpu_count - 1}"
                    if node.gpu_count
                    else f"device {index} does not exist: {node.name} has no GPUs"
                )
        self._take_cpu_memory(node, cpu_milli, memory_mib)
        if request.is_shared:
            return self._take_shared(node, request, wanted)
        return self._take_whole(node, request.amount, wanted)

    def _take_cpu_memory(self, node: ClusterNode, cpu_milli: int, memory_mib: int) -> None:
        cpu = self._cpu.get(node.name, 0) + cpu_milli
        ram = self._ram.get(node.name, 0) + memory_mib
        if node.cpu_milli is not None and cpu > node.cpu_milli:
            raise ValueError(
                f"{node.name} has {node.cpu_milli} cpu_milli; running work needs {cpu}"
            )
        if node.memory_mib is not None and ram > node.memory_mib:
            raise ValueError(
                f"{node.name} has {node.memory_mib} memory_mib; running work needs {ram}"
            )
        self._cpu[node.name] = cpu
        self._ram[node.name] = ram

    def _is_free(self, node: str, device: int) -> bool:
        return device not in self._whole[node] and (node, device) not in self._milli

    def _take_whole(
        self, node: ClusterNode, count: int, wanted: tuple[int, ...] | None
    ) -> tuple[int, ...]:
        if wanted is None:
            free = [d for d in range(node.gpu_count) if self._is_free(node.name, d)]
            if len(free) < count:
                raise ValueError(
                    f"needs {count} free whole device(s) on {node.name}; {len(free)} left"
                )
            wanted = tuple(free[:count])
        for device in wanted:
            if not self._is_free(node.name, device):
                raise ValueError(f"device {device} of {node.name} is already in use")
        self._whole[node.name].update(wanted)
        return wanted

    def _take_shared(
        self, node: ClusterNode, request: GpuRequest, wanted: tuple[int, ...] | None
    ) -> tuple[int, ...]:
        milli = request.milli_on(node.gpu_memory_mib)
        memory = request.memory_mib_on(node.gpu_memory_mib)

        def room(device: int) -> bool:
            key = (node.name, device)
            return (
                device not in self._whole[node.name]
                and self._milli.get(key, 0) + milli <= MILLI_PER_GPU
                and self._memory.get(key, 0) + memory <= node.gpu_memory_mib
            )

        if wanted is None:
            fits = [d for d in range(node.gpu_count) if room(d)]
            if not fits:
                raise ValueError(f"no device of {node.name} has room for this fraction")
            device = fits[0]
        else:
            (device,) = wanted
            if not room(device):
                raise ValueError(f"device {device} of {node.name} has no room for this fraction")
        key = (node.name, device)
        self._milli[key] = self._milli.get(key, 0) + milli
        self._memory[key] = self._memory.get(key, 0) + memory
        return (device,)
