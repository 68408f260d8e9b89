"""Pydantic models of what several user files share: nodes, projects, quotas and limits.

The scenario format (`gpupool.whatif.schema`) and the simulator's cluster file
(`gpupool.sim.cluster`) describe nodes and projects the same way; both build on these. Every
model forbids unknown keys and takes numbers strictly; GPU amounts are parsed once, here, into
milli-GPU by `gpupool.units`; `to_core` gives the core's frozen `Node` and `Project`.

These are the file formats' models, not the API's: `gpupool.api.schemas` describes what the
HTTP API takes (text quantities like `80G`, limits per field, its own error bodies), and a
user's file is read with line numbers into these. (They were `gpupool.specs`.)
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PlainValidator

from gpupool.core.model import Limits, Node, Project, Resources
from gpupool.units import parse_gpu_quota

__all__ = [
    "AmountsSpec",
    "GpuMilli",
    "Int",
    "Name",
    "NodeSpec",
    "NonNegInt",
    "PosInt",
    "ProjectSpec",
    "SpecModel",
]

Name = Annotated[str, Field(strict=True, min_length=1)]
Int = Annotated[int, Field(strict=True)]
NonNegInt = Annotated[int, Field(strict=True, ge=0)]
PosInt = Annotated[int, Field(strict=True, ge=1)]
GpuMilli = Annotated[int, PlainValidator(parse_gpu_quota)]
"""A GPU amount for quotas, limits and shares, written in GPUs (`2.5`), held in milli-GPU."""


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeSpec(SpecModel):
    name: Name
    gpus: NonNegInt
    gpu_memory_mib: PosInt = 81920
    gpu_model: Name | None = None
    cpu_milli: PosInt | None = None
    memory_mib: PosInt | None = None
    labels: dict[Name, Name] = Field(default_factory=dict)

    def to_core(self) -> Node:
        return Node(
            name=self.name,
            gpu_count=self.gpus,
            gpu_memory_mib=self.gpu_memory_mib,
            gpu_model=self.gpu_model,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            labels=tuple(sorted(self.labels.items())),
        )


class AmountsSpec(SpecModel):
    """A quota or limit: `gpu` in GPUs (held as milli-GPU), CPU in millicores, memory in MiB."""

    gpu: GpuMilli | None = None
    cpu_milli: NonNegInt | None = None
    memory_mib: NonNegInt | None = None

    def to_resources(self) -> Resources:
        """As a quota: an amount not given is 0."""
        return Resources(
            gpu_milli=self.gpu or 0, cpu_milli=self.cpu_milli or 0, memory_mib=self.memory_mib or 0
        )

    def to_limits(self) -> Limits:
        """As a limit: an amount not given is no cap."""
        return Limits(gpu_milli=self.gpu, cpu_milli=self.cpu_milli, memory_mib=self.memory_mib)


class ProjectSpec(SpecModel):
    name: Name
    parent: Name | None = None
    quota: AmountsSpec = AmountsSpec()
    over_quota_weight: NonNegInt = 1
    limit: AmountsSpec | None = None
    priority: Int = 0
    min_runtime_s: NonNegInt = 0

    def to_core(self) -> Project:
        return Project(
            name=self.name,
            parent=self.parent,
            quota=self.quota.to_resources(),
            over_quota_weight=self.over_quota_weight,
            limit=(self.limit or AmountsSpec()).to_limits(),
            priority=self.priority,
            min_runtime_s=self.min_runtime_s,
        )
