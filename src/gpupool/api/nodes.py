"""API bodies of nodes and their GPU devices: registration, and what each device holds."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, model_validator

from gpupool.api import limits
from gpupool.api.fields import ModelText, Name, NodeLabelValue, NonNeg, Pos, _In, _Out


class DeviceIn(_In):
    index: NonNeg
    uuid: ModelText | None = None
    model: ModelText | None = None
    memory_mib: Pos


class NodeIn(_In):
    name: Name
    gpu_count: Annotated[int, Field(ge=0, le=1024)]
    gpu_memory_mib: Pos = 81920
    gpu_model: ModelText | None = None
    cpu_milli: Pos | None = None
    memory_mib: Pos | None = None
    labels: Annotated[dict[Name, NodeLabelValue], Field(max_length=limits.LABELS_MAX)] = {}
    devices: list[DeviceIn] = Field(default=[], max_length=limits.DEVICES_MAX)

    @model_validator(mode="after")
    def _devices_match(self) -> Self:
        if self.devices and sorted(d.index for d in self.devices) != list(range(self.gpu_count)):
            raise ValueError(
                f"devices must list indices 0..{self.gpu_count - 1} once each "
                f"(gpu_count is {self.gpu_count})"
            )
        return self


class DeviceShare(_Out):
    """What one workload holds on one device."""

    project: str
    workload: str | None
    """null for a researcher looking at a project not theirs: usage only, no names."""
    milli: int
    """Milli-GPU of this device (1000 for the whole device)."""


class DeviceOut(_Out):
    index: int
    uuid: str | None
    model: str | None
    memory_mib: int
    allocated_milli: int = 0
    workloads: list[str] = []
    """`project/workload` of what holds it; a researcher sees only their projects' names."""
    shares: list[DeviceShare] = []
    """Who holds which part of the device (one per workload), largest first."""
    utilization_percent: int | None = None
    """Average over the last 5 minutes; null without samples."""
    memory_used_mib: int | None = None
    """Peak over the last 5 minutes (what the executor's samples say the device held); null
    without samples."""


class NodeOut(_Out):
    name: str
    executor: str
    state: str
    gpu_count: int
    gpu_memory_mib: int
    gpu_model: str | None
    cpu_milli: int | None
    memory_mib: int | None
    labels: dict[str, str]
    allocated_gpu_milli: int = 0
    devices: list[DeviceOut] = []
