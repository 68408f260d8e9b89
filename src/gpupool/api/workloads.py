"""API bodies of a submission (`WorkloadIn`), its dry run, its events and its log; the views of a
workload with its tasks are in `gpupool.api.schemas`, beside `TaskState`."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from gpupool.api import limits
from gpupool.api.enums import WorkloadType
from gpupool.api.fields import (
    CommandArg,
    EnvKey,
    EnvValue,
    LabelKey,
    LabelValue,
    Name,
    NonNeg,
    Priority,
    Quantity,
    WorkingDir,
    _In,
    _Out,
)
from gpupool.units import GpuAmount, parse_gpu, parse_gpu_limit, parse_memory_mib


class WorkloadIn(_In):
    """A submission. Give the GPU per task as exactly one of `gpu` (whole devices like 1, or a
    fraction like 0.5) and `gpu_memory` (like `8G`)."""

    name: Name
    project: Name
    type: WorkloadType = WorkloadType.TRAIN
    gpu: float | Quantity | None = Field(default=None, examples=[1, 0.5])
    gpu_memory: Quantity | int | None = Field(default=None, examples=["8G"])
    gpu_limit: float | Quantity | None = Field(default=None, examples=[0.8])
    tasks: Annotated[int, Field(ge=1, le=10_000)] = 1
    min_available: Annotated[int, Field(ge=1, le=10_000)] | None = None
    priority: Priority | None = None
    preemptible: bool | None = None
    cpu_milli: NonNeg = 0
    memory: Quantity | int | None = None
    command: Annotated[
        list[CommandArg],
        Field(max_length=limits.COMMAND_MAX_ARGS),
        AfterValidator(limits.command_size),
    ] = []
    """Arguments: no control characters but tab and newline (an inline script needs them)."""
    env: Annotated[
        dict[EnvKey, EnvValue],
        Field(max_length=limits.ENV_MAX_VARS),
        AfterValidator(limits.env_size),
    ] = {}
    node_selector: Annotated[
        dict[
            LabelKey,
            Annotated[list[LabelValue], Field(min_length=1, max_length=limits.SELECTOR_VALUES_MAX)],
        ],
        Field(max_length=limits.SELECTOR_KEYS_MAX),
    ] = {}
    """Node label -> the values it may have (nvidia.com/gpu.product: [NVIDIA-H100-80GB-HBM3])."""
    duration_s: Annotated[float, Field(gt=0, le=10**9)] | None = None
    """Simulated executor only: how long each task 'runs'. Real executors ignore it."""
    grace_period_s: Annotated[int, Field(ge=0, le=86_400)] = 30
    min_runtime_s: Annotated[int, Field(ge=0, le=30 * 86_400)] | None = None
    """Not preempted (reclaimed, consolidated) before it has run this long; default: its
    project's min runtime. Interactive work is never preempted anyway."""
    working_dir: WorkingDir | None = None
    """Local executor: where the command runs (the CLI sends its current directory); default
    the workload's checkpoint directory."""
    image: (
        Annotated[
            str,
            Field(
                max_length=limits.IMAGE_MAX,
                pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$",
                description="a container image reference like python:3.12-slim or "
                "registry.example.com/team/train@sha256:...",
            ),
        ]
        | None
    ) = None
    """Kubernetes executor: the container image (default: the server's --default-image).
    Other executors run the command on their own machine and ignore it."""

    _short = field_validator("gpu", "gpu_memory", "gpu_limit", "memory", mode="before")(
        limits.quantity_text
    )

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, value: float | str | None) -> float | str | None:
        if value is not None:
            parse_gpu(value)
        return value

    @field_validator("gpu_memory", "memory")
    @classmethod
    def _memory(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            parse_memory_mib(value)
        return value

    @field_validator("gpu_limit")
    @classmethod
    def _gpu_limit(cls, value: float | str | None, info: ValidationInfo) -> float | str | None:
        if value is None:
            return None
        if "gpu" not in info.data:
            return value  # gpu itself was wrong; that error is reported there
        gpu = info.data["gpu"]
        if gpu is None:
            raise ValueError(
                "gpu_limit applies to a fractional gpu only: give gpu too "
                "(like gpu: 0.25 with gpu_limit: 0.8)"
            )
        parse_gpu_limit(value, parse_gpu(gpu))
        return value

    @field_validator("min_available")
    @classmethod
    def _min_available(cls, value: int | None, info: ValidationInfo) -> int | None:
        tasks = info.data.get("tasks")
        if value is not None and tasks is not None and value > tasks:
            raise ValueError(
                f"min_available ({value}) cannot be more than tasks ({tasks}): it is how many "
                "of the tasks must run together; lower it or raise tasks"
            )
        return value

    @model_validator(mode="after")
    def _one_gpu_request(self) -> Self:
        if self.gpu is not None and self.gpu_memory is not None:
            raise ValueError("give gpu or gpu_memory, not both")
        if self.gpu is None and self.gpu_memory is None:
            raise ValueError("give the GPU per task: gpu (like 1 or 0.5) or gpu_memory (like 8G)")
        return self

    @property
    def gpu_amount(self) -> GpuAmount | None:
        return None if self.gpu is None else parse_gpu(self.gpu)

    @property
    def gpu_limit_milli(self) -> int | None:
        amount = self.gpu_amount
        if self.gpu_limit is None or amount is None:
            return None
        return parse_gpu_limit(self.gpu_limit, amount)

    @property
    def gpu_memory_mib(self) -> int | None:
        return None if self.gpu_memory is None else parse_memory_mib(self.gpu_memory)

    @property
    def memory_mib(self) -> int:
        return 0 if self.memory is None else parse_memory_mib(self.memory)


class PlacementOut(_Out):
    task_index: int
    node: str
    devices: list[int]


class DryRunOut(_Out):
    """`POST /workloads/dry-run`: what the scheduler would do with this submission now."""

    project: str
    name: str
    would_start: bool
    placements: list[PlacementOut]
    """Where each task would start (empty: it would wait)."""
    preempts: int
    """How many running workloads would be preempted for it."""
    preempts_visible: list[str]
    """Those of them in projects the caller may see (others are only counted)."""
    reason: str
    """In words: where it would start, or why it would wait."""


class EventOut(_Out):
    id: int
    at: float
    kind: str
    project: str | None
    workload: str | None
    node: str | None
    message: str
    project_id: int | None = None
    """The project (or department) it is about, by id: a project deleted and created again
    under the same name has a new id."""
    workload_id: int | None = None
    actor: str | None = None
    """The user who did it; None: the scheduler or an executor."""


class LogChunk(_Out):
    text: str
    next_offset: int
    complete: bool
    """True when the task has ended and `text` reaches the end of its log."""
