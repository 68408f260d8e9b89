"""Cluster files (YAML `nodes` + `projects`, as in scenario files), the default cluster, policies.

A cluster file has exactly the `nodes` and `projects` sections of the scenario format
(docs/scenario-format.md), plus an optional `name`. It is validated with the pydantic models
it shares with the scenario format (`gpupool.specs`; the simulator does not import the what-if
driver) and converted once into the core's frozen `Node` and `Project`. Errors name the file,
the line and the key.

A policy decides how the projects are handed to the core: `guaranteed` as written (quotas are
guaranteed, idle quota is lent out by over-quota weight and reclaimed), `static` each project
capped at its quota (limit = quota, no over-quota weight): the fixed partitioning gpupool replaces.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import Field
from yaml.nodes import MappingNode, SequenceNode
from yaml.nodes import Node as YamlNode

from gpupool.core.model import MILLI_PER_GPU, Node, Project, Resources
from gpupool.sim.choices import Policy
from gpupool.sim.errors import SimInputError
from gpupool.specs import AmountsSpec, Name, NodeSpec, ProjectSpec
from gpupool.specs import SpecModel as _Model

__all__ = [
    "Cluster",
    "Policy",
    "apply_policy",
    "default_cluster",
    "load_cluster",
    "parse_cluster",
]


@dataclass(frozen=True, slots=True)
class Cluster:
    """Nodes and the project tree; `leaf_projects` are the ones that hold workloads."""

    nodes: tuple[Node, ...]
    projects: tuple[Project, ...]
    name: str = "cluster"

    @property
    def leaf_projects(self) -> tuple[Project, ...]:
        parents = {p.parent for p in self.projects if p.parent is not None}
        return tuple(p for p in self.projects if p.name not in parents)

    @property
    def capacity_gpu_milli(self) -> int:
        return sum(n.gpu_count for n in self.nodes) * MILLI_PER_GPU


def apply_policy(projects: Sequence[Project], policy: Policy) -> tuple[Project, ...]:
    """The projects as the core sees them under `policy`."""
    if policy is Policy.GUARANTEED:
        return tuple(projects)
    capped = []
    for project in projects:
        gpu_limit = project.quota.gpu_milli
        if project.limit.gpu_milli is not None:
            gpu_limit = min(gpu_limit, project.limit.gpu_milli)
        capped.append(
            replace(project, over_quota_weight=0, limit=replace(project.limit, gpu_milli=gpu_limit))
        )
    return tuple(capped)


def default_cluster() -> Cluster:
    """4 nodes x 8 GPUs, 4 projects whose quotas add up to the 32 GPUs (the synthetic default)."""
    nodes = tuple(
        Node(
            name=f"node-{i}",
            gpu_count=8,
            gpu_memory_mib=81920,
            gpu_model="A100",
            cpu_milli=128_000,
            memory_mib=1_048_576,
        )
        for i in range(1, 5)
    )
    quotas = (("vision", 12), ("language", 8), ("speech", 8), ("robotics", 4))
    projects = tuple(
        Project(name=name, quota=Resources(gpu_milli=gpus * MILLI_PER_GPU)) for name, gpus in quotas
    )
    return Cluster(nodes, projects, name="default (4 nodes x 8 GPUs, 4 projects)")


# --- the file ------------------------------------------------------------------------------------


class _ClusterSpec(_Model):
    version: Literal[1] | None = None
    name: Name | None = None
    nodes: Annotated[list[NodeSpec], Field(min_length=1)]
    projects: Annotated[list[ProjectSpec], Field(min_length=1)]


def load_cluster(path: str | os.PathLike[str]) -> Cluster:
    shown = os.fspath(path)
    try:
        text = Path(shown).read_text(encoding="utf-8")
    except OSError as exc:
        raise SimInputError(shown, None, "", f"cannot read the file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SimInputError(shown, None, "", f"not UTF-8 text: {exc.reason}") from None
    return parse_cluster(text, shown)


def parse_cluster(text: str, path: str = "<cluster>") -> Cluster:
    """A cluster from YAML text; `SimInputError` with the file, line and key when it is wrong."""
    root, data = _read_yaml(text, path)
    if not isinstance(data, dict):
        raise SimInputError(path, 1, "", "expected a mapping with `nodes:` and `projects:`")
    try:
        spec = _ClusterSpec.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
        # An unknown key is usually a misspelt known one: report it before the "missing" it causes.
        error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        loc = tuple(error["loc"])
        raise SimInputError(path, _line_of(root, loc), _key(loc), _message(error, loc)) from None
    return _build(spec, path, root)


def _read_yaml(text: str, path: str) -> tuple[YamlNode | None, object]:
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            _no_duplicate_keys(root, path)
        data = None if root is None else loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        raise SimInputError(path, line, "", f"YAML syntax error: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise SimInputError(path, None, "", f"YAML syntax error: {exc}") from None
    finally:
        loader.dispose()
    return root, data


def _no_duplicate_keys(node: YamlNode, path: str) -> None:
    if isinstance(node, MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            line = key.start_mark.line + 1
            if name in seen:
                raise SimInputError(
                    path,
                    line,
                    name,
                    f"key appears twice in this mapping (first on line {seen[name]})",
                )
            seen[name] = line
            _no_duplicate_keys(value, path)
    elif isinstance(node, SequenceNode):
        for item in node.value:
            _no_duplicate_keys(item, path)


def _line_of(root: YamlNode | None, loc: Sequence[int | str]) -> int:
    """The line of the value at `loc`, or of the nearest enclosing one the file has."""
    if root is None:
        return 1
    node = root
    line = node.start_mark.line + 1
    for key in loc:
        found: YamlNode | None = None
        if isinstance(node, MappingNode):
            for key_node, value in node.value:
                if str(key_node.value) == str(key):
                    found = value
                    line = key_node.start_mark.line + 1
                    break
        elif isinstance(node, SequenceNode) and isinstance(key, int) and key < len(node.value):
            found = node.value[key]
            line = found.start_mark.line + 1
        if found is None:
            break
        node = found
    return line


def _key(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(error: Any, loc: Sequence[int | str]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        return f"unknown key; {hint}allowed here: {', '.join(allowed)}"
    if kind == "missing":
        return "missing; this key is required"
    return str(error["msg"]).removeprefix("Value error, ")


def _allowed_keys(loc: Sequence[int | str]) -> list[str]:
    """The keys allowed in the mapping at `loc` of a cluster file."""
    model: type[_Model] = _ClusterSpec
    if len(loc) >= 2 and loc[0] == "nodes":
        model = NodeSpec
    elif len(loc) >= 2 and loc[0] == "projects":
        model = AmountsSpec if len(loc) >= 3 else ProjectSpec
    return list(model.model_fields)


def _build(spec: _ClusterSpec, path: str, root: YamlNode | None) -> Cluster:
    nodes: list[Node] = []
    for index, node in enumerate(spec.nodes):
        if any(n.name == node.name for n in nodes):
            raise SimInputError(
                path,
                _line_of(root, ("nodes", index, "name")),
                f"nodes[{index}].name",
                f"node {node.name!r} appears twice; node names must be unique",
            )
        nodes.append(node.to_core())
    projects: dict[str, Project] = {}
    for index, project in enumerate(spec.projects):
        where = ("projects", index)
        if project.name in projects:
            raise SimInputError(
                path,
                _line_of(root, (*where, "name")),
                f"projects[{index}].name",
                f"project {project.name!r} appears twice; project names must be unique",
            )
        if project.parent is not None and project.parent not in projects:
            raise SimInputError(
                path,
                _line_of(root, (*where, "parent")),
                f"projects[{index}].parent",
                f"{project.parent!r} is not a project defined above this one; define a parent "
                f"(department) before its children",
            )
        projects[project.name] = project.to_core()
    return Cluster(tuple(nodes), tuple(projects.values()), name=spec.name or path)
