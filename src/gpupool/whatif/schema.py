"""The scenario file format, version 1, as pydantic models (shape and per-field checks only).

Every model forbids unknown keys, so a typo (`gpus:` on a workload, `quotas:`) is an error that
names the key, never a silently ignored line. Numbers are strict: `tasks: 1.5` or `gpu: "2"`
is rejected rather than coerced. GPU amounts are parsed by `gpupool.units` into milli-GPU here,
so every later stage works in integers.

Checks that need the whole file (names that must exist, a parent before its children, devices
in range) live in `loader`, which also knows the line numbers.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainValidator,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpupool.core.policies import canonical_name
from gpupool.units import GpuAmount, parse_gpu, parse_gpu_limit
from gpupool.userfiles.models import (
    AmountsSpec,
    GpuMilli,
    Int,
    Name,
    NodeSpec,
    NonNegInt,
    PosInt,
    ProjectSpec,
)
from gpupool.userfiles.models import SpecModel as _Model

GpuPerTask = Annotated[GpuAmount, PlainValidator(parse_gpu)]


def _one_or_many(value: object) -> object:
    """`{pool: default}` means `{pool: [default]}` in a node selector."""
    return [value] if isinstance(value, str) else value


SelectorValues = Annotated[list[Name], BeforeValidator(_one_or_many)]


def _placement_policy(value: str) -> str:
    """A registered placement policy (`binpack`, `spread`, `default`, `fgd`, ...)."""
    return canonical_name(value)


class SettingsSpec(_Model):
    placement: Annotated[str, AfterValidator(_placement_policy)] = "binpack"
    """Format v1 defaults to bin-pack; any registered placement policy's name is accepted."""
    grace_period_s: NonNegInt = 0


class WorkloadSpec(_Model):
    """One workload. Fields are validated in this order, so later validators see earlier ones."""

    name: Name
    project: Name
    type: Literal["train", "interactive", "inference"]
    priority: Int | None = None
    preemptible: Annotated[bool, Field(strict=True)] | None = None
    tasks: PosInt = 1
    min_available: PosInt | None = None
    gpu: GpuPerTask | None = None
    gpu_memory_mib: PosInt | None = None
    gpu_limit: int | None = None
    """Dynamic fraction limit, held in milli-GPU."""
    cpu_milli: NonNegInt = 0
    memory_mib: NonNegInt = 0
    node_selector: dict[Name, SelectorValues] = Field(default_factory=dict)
    min_runtime_s: NonNegInt | None = None
    submitted_at: Int = 0
    duration_s: PosInt | None = None
    running_on: list[Name] | None = None
    devices: list[list[NonNegInt]] | None = None
    started_at: Int | None = None

    @field_validator("min_available")
    @classmethod
    def _min_available_within_tasks(cls, value: int | None, info: ValidationInfo) -> int | None:
        tasks = info.data.get("tasks")
        if value is not None and tasks is not None and value > tasks:
            raise ValueError(
                f"min_available ({value}) cannot be more than tasks ({tasks}): it is how many "
                "of the tasks must run together"
            )
        return value

    @field_validator("gpu_limit", mode="plain")
    @classmethod
    def _gpu_limit(cls, value: object, info: ValidationInfo) -> int | None:
        if value is None:
            return None
        gpu = info.data.get("gpu")
        if gpu is None:
            if "gpu_memory_mib" in info.data and info.data["gpu_memory_mib"] is not None:
                raise ValueError(
                    "gpu_limit applies to a fractional gpu only (like gpu: 0.25 with "
                    "gpu_limit: 0.8), not to gpu_memory_mib"
                )
            return None  # gpu itself was missing or wrong; that error is reported there
        assert isinstance(gpu, GpuAmount)
        return parse_gpu_limit(value, gpu)

    @field_validator("running_on")
    @classmethod
    def _one_node_per_task(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        tasks = info.data.get("tasks")
        if value is None or tasks is None:
            return value
        least = info.data.get("min_available") or tasks
        if not least <= len(value) <= tasks:
            want = f"{tasks}" if least == tasks else f"{least} to {tasks}"
            raise ValueError(
                f"running_on names one node per running task: {want} node(s) for this "
                f"workload (got {len(value)})"
            )
        return value

    @field_validator("devices")
    @classmethod
    def _devices_per_task(
        cls, value: list[list[int]] | None, info: ValidationInfo
    ) -> list[list[int]] | None:
        if value is None:
            return value
        if "running_on" in info.data and info.data["running_on"] is None:
            raise ValueError("devices needs running_on: the node each task runs on")
        running_on = info.data.get("running_on")
        if running_on is not None and len(value) != len(running_on):
            raise ValueError(
                f"devices lists device indices per task, one entry per running_on node: "
                f"{len(running_on)} entries (got {len(value)})"
            )
        gpu = info.data.get("gpu")
        per_task = gpu.devices if isinstance(gpu, GpuAmount) and gpu.is_whole else 1
        for index, devices in enumerate(value):
            if len(devices) != per_task:
                shape = (
                    f"{per_task} device(s), one per whole GPU requested"
                    if per_task > 1
                    else "one device"
                )
                raise ValueError(
                    f"each task lists {shape} (task {index} lists {len(devices)}: {devices})"
                )
            if len(set(devices)) != len(devices):
                raise ValueError(f"task {index} lists a device twice: {devices}")
        return value

    @field_validator("started_at")
    @classmethod
    def _started_needs_running(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("running_on") is None:
            raise ValueError("started_at needs running_on: only a running workload has started")
        return value

    @model_validator(mode="after")
    def _one_gpu_request(self) -> Self:
        if (self.gpu is None) == (self.gpu_memory_mib is None):
            raise ValueError(
                "give the GPU request per task as exactly one of gpu (whole devices like 1, or "
                "a fraction like 0.5) or gpu_memory_mib"
                + (" (got both)" if self.gpu is not None else " (got neither)")
            )
        return self


class CountSpec(_Model):
    running: NonNegInt | None = None
    pending: NonNegInt | None = None
    evicted: NonNegInt | None = None


class ShareSpec(_Model):
    gpu: GpuMilli | None = None
    cpu_milli: NonNegInt | None = None
    memory_mib: NonNegInt | None = None


class ExpectSpec(_Model):
    running: list[Name] | None = None
    pending: list[Name] | None = None
    evicted: list[Name] | None = None
    not_evicted: list[Name] | None = None
    count: CountSpec | None = None
    placements: dict[Name, list[Name]] | None = None
    same_device: list[list[Name]] | None = None
    different_devices: list[list[Name]] | None = None
    fair_share: dict[Name, ShareSpec] | None = None


class SetQuotaSpec(_Model):
    project: Name
    quota: AmountsSpec


EVENT_ACTIONS = ("submit", "complete", "delete", "suspend", "resume", "set_quota", "expect")


class EventSpec(_Model):
    at: NonNegInt
    submit: WorkloadSpec | None = None
    complete: Name | None = None
    delete: Name | None = None
    suspend: Name | None = None
    resume: Name | None = None
    set_quota: SetQuotaSpec | None = None
    expect: ExpectSpec | None = None

    @model_validator(mode="after")
    def _exactly_one_action(self) -> Self:
        given = [action for action in EVENT_ACTIONS if getattr(self, action) is not None]
        if len(given) != 1:
            raise ValueError(
                "an event has `at` and exactly one of "
                + ", ".join(EVENT_ACTIONS)
                + (f" (got {', '.join(given)})" if given else " (got none)")
            )
        return self


class ScenarioSpec(_Model):
    version: Literal[1]
    name: Name | None = None
    settings: SettingsSpec = SettingsSpec()
    nodes: list[NodeSpec]
    projects: list[ProjectSpec]
    workloads: list[WorkloadSpec] = Field(default_factory=list)
    events: list[EventSpec] = Field(default_factory=list)
    expect: ExpectSpec | None = None
