"""Cluster files (YAML `nodes` + `projects`, as in scenario files), the default cluster, policies.

A cluster file has exactly the `nodes` and `projects` sections of the scenario format
(docs/scenario-format.md), plus an optional `name`. It is validated with the pydantic models
it shares with the scenario format (`gpupool.userfiles.models`; the simulator does not import
the what-if driver) and converted once into the core's frozen `Node` and `Project`. It is read
the one way every user file is (`gpupool.userfiles`): errors are `UserFileError`s that name the
file, the line and the key.

A policy decides how the projects are handed to the core: `guaranteed` as written (quotas are
guaranteed, idle quota is lent out by over-quota weight and reclaimed), `static` each project
capped at its quota (limit = quota, no over-quota weight): the fixed partitioning gpupool replaces.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Literal

from pydantic import Field

from gpupool.core.model import MILLI_PER_GPU, Node, Project, Resources
from gpupool.sim.choices import Policy
from gpupool.userfiles import YamlDocument, read_text, read_yaml, validate
from gpupool.userfiles.models import Name, NodeSpec, ProjectSpec
from gpupool.userfiles.models import SpecModel as _Model

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
    """Read and check the cluster file at `path`; raises `UserFileError` for any problem."""
    return parse_cluster(read_text(path, kind="a cluster file"), os.fspath(path))


def parse_cluster(text: str, path: str = "<cluster>") -> Cluster:
    """A cluster from YAML text; `UserFileError` with the file, line and key when it is wrong."""
    document = read_yaml(text, path)
    spec = validate(document, _ClusterSpec, "expected a mapping with `nodes:` and `projects:`")
    return _build(spec, document)


def _build(spec: _ClusterSpec, document: YamlDocument) -> Cluster:
    nodes: list[Node] = []
    for index, node in enumerate(spec.nodes):
        if any(n.name == node.name for n in nodes):
            raise document.error(
                ("nodes", index, "name"),
                f"node {node.name!r} appears twice; node names must be unique",
            )
        nodes.append(node.to_core())
    projects: dict[str, Project] = {}
    for index, project in enumerate(spec.projects):
        where = ("projects", index)
        if project.name in projects:
            raise document.error(
                (*where, "name"),
                f"project {project.name!r} appears twice; project names must be unique",
            )
        if project.parent is not None and project.parent not in projects:
            raise document.error(
                (*where, "parent"),
                f"{project.parent!r} is not a project defined above this one; define a parent "
                f"(department) before its children",
            )
        projects[project.name] = project.to_core()
    return Cluster(tuple(nodes), tuple(projects.values()), name=spec.name or document.path)
