"""Request and response bodies of the gpupool HTTP API (version 1)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gpupool.api import limits
from gpupool.api.enums import Role as Role
from gpupool.api.enums import WorkloadStatus as WorkloadStatus
from gpupool.api.enums import WorkloadType as WorkloadType
from gpupool.core.lifecycle import TaskState as TaskState
from gpupool.units import GpuAmount, parse_gpu, parse_gpu_limit, parse_gpu_quota, parse_memory_mib

NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
Name = Annotated[
    str,
    Field(
        min_length=1,
        max_length=limits.NAME_MAX,
        pattern=NAME_PATTERN,
        description="lower-case letters, digits, '.', '_' and '-'; starts and ends alphanumeric",
    ),
]
LabelKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=limits.LABEL_KEY_MAX,
        pattern=r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$",
        description="a node label key as Kubernetes writes them: name or prefix/name, like "
        "zone or nvidia.com/gpu.product",
    ),
]
LabelValue = Annotated[
    str,
    Field(
        max_length=limits.LABEL_VALUE_MAX,
        pattern=r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$",
        description="a node label value: letters, digits, '.', '_' and '-', at most 63",
    ),
]
NonNeg = Annotated[int, Field(ge=0, le=2**31 - 1)]
Pos = Annotated[int, Field(ge=1, le=2**31 - 1)]
Priority = Annotated[int, Field(ge=-1_000_000, le=1_000_000)]
Quantity = Annotated[str, Field(max_length=limits.QUANTITY_MAX)]
"""An amount written as text (`0.5`, `80G`); parsed by the field's own validator."""


_NoControl = AfterValidator(limits.plain_text)
ModelText = Annotated[str, Field(max_length=limits.MODEL_MAX), _NoControl]
NodeLabelValue = Annotated[str, Field(max_length=limits.LABEL_VALUE_MAX), _NoControl]
WorkingDir = Annotated[str, Field(max_length=limits.WORKING_DIR_MAX), _NoControl]
TokenLabel = Annotated[str, Field(max_length=limits.TOKEN_LABEL_MAX), _NoControl]
CommandArg = Annotated[
    str, Field(max_length=limits.COMMAND_ARG_MAX), AfterValidator(limits.script_text)
]
EnvKey = Annotated[
    str, Field(min_length=1, max_length=limits.ENV_KEY_MAX, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
]
EnvValue = Annotated[
    str, Field(max_length=limits.ENV_VALUE_MAX), AfterValidator(limits.script_text)
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _gpu_quota(value: object) -> int:
    return parse_gpu_quota(value)


class AmountsIn(_In):
    """A quota or limit: `gpu` in GPUs as written (`4`, `2.5`), CPU in millicores, memory as
    `64G` or MiB."""

    gpu: float | Quantity | None = Field(default=None, examples=[4, 2.5])
    cpu_milli: NonNeg | None = None
    memory: Quantity | int | None = Field(default=None, examples=["64G"])

    _short = field_validator("gpu", "memory", mode="before")(limits.quantity_text)

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, value: float | str | None) -> float | str | None:
        if value is not None:
            parse_gpu_quota(value)
        return value

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            parse_memory_mib(value)
        return value

    @property
    def gpu_milli(self) -> int | None:
        return None if self.gpu is None else parse_gpu_quota(self.gpu)

    @property
    def memory_mib(self) -> int | None:
        return None if self.memory is None else parse_memory_mib(self.memory)


class Amounts(_Out):
    gpu_milli: int | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None


class DepartmentIn(_In):
    name: Name
    quota: AmountsIn = AmountsIn()
    over_quota_weight: NonNeg = 1
    limit: AmountsIn | None = None
    priority: Priority = 0


class ProjectIn(_In):
    name: Name
    department: Name | None = None
    quota: AmountsIn = AmountsIn()
    over_quota_weight: NonNeg = 1
    limit: AmountsIn | None = None
    priority: Priority = 0
    min_runtime_s: NonNeg = 0


class ProjectPatch(_In):
    """Fields to change; a field left out keeps its value. `limit: null` removes the limit."""

    quota: AmountsIn | None = None
    over_quota_weight: NonNeg | None = None
    limit: AmountsIn | None = None
    priority: Priority | None = None
    min_runtime_s: NonNeg | None = None


class ProjectOut(_Out):
    name: str
    kind: str
    """`department` or `project`."""
    department: str | None
    quota: Amounts
    over_quota_weight: int
    limit: Amounts | None
    priority: int
    min_runtime_s: int
    fair_share: Amounts | None = None
    """From the last scheduling cycle; null before the first."""
    holding: Amounts | None = None
    demand: Amounts | None = None
    warnings: list[str] = []


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


class TaskOut(_Out):
    task_index: int
    launch_id: str
    state: TaskState
    node: str
    devices: list[int]
    burst_device: int | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    reason: str | None


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


class TaskPlacement(_Out):
    """Where one live task of a workload is (starting, running or stopping)."""

    task_index: int
    node: str
    devices: list[int]
    state: TaskState


class WorkloadOut(_Out):
    id: int
    name: str
    project: str
    type: WorkloadType
    status: WorkloadStatus
    gpu_kind: str
    """`whole` (gpu_amount devices), `fraction` (milli-GPU) or `memory` (MiB)."""
    gpu_amount: int
    gpu_limit_milli: int | None
    gpu_milli_per_task: int | None
    """Charge per task where known (whole and fraction)."""
    tasks: int
    min_available: int | None
    priority: int
    preemptible: bool
    cpu_milli: int
    memory_mib: int
    command: list[str]
    env: dict[str, str]
    duration_s: float | None
    grace_period_s: int
    min_runtime_s: int | None = None
    """Its own min runtime; None: its project's."""
    submitted_by: str | None
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    pending_reason: str | None
    preemptions: int
    running_tasks: int
    working_dir: str | None = None
    image: str | None = None
    origin: str = "api"
    """`api` (submitted to gpupool) or `kubernetes` (pods someone else created)."""
    placement: list[TaskPlacement] = []
    """Its live tasks' nodes and devices (in lists of workloads; empty when none run)."""
    exit_code: int | None = None
    """When it has finished: the first non-zero exit code of its tasks' last runs, else 0; null
    while it has not finished or no exit code is known."""


class WorkloadDetail(WorkloadOut):
    task_list: list[TaskOut]
    events: list[EventOut]


class WorkloadPage(_Out):
    items: list[WorkloadOut]
    total: int


class LogChunk(_Out):
    text: str
    next_offset: int
    complete: bool
    """True when the task has ended and `text` reaches the end of its log."""


class UserIn(_In):
    name: Name
    role: Role = Role.RESEARCHER
    projects: list[Name] = Field(default=[], max_length=limits.NAME_LIST_MAX)


class UserOut(_Out):
    name: str
    role: Role
    projects: list[str]


TokenLifetime = Annotated[
    int,
    AfterValidator(limits.token_lifetime_s),
    WithJsonSchema(
        {
            "type": "integer",
            "minimum": limits.TOKEN_LIFETIME_MIN_S,
            "maximum": limits.TOKEN_LIFETIME_MAX_S,
        }
    ),
]


class TokenIn(_In):
    label: TokenLabel = "cli"
    expires_in_s: TokenLifetime | None = None
    """Seconds from now until the token stops working; None: it never expires."""


class TokenOut(_Out):
    token: str
    """Shown once; the server keeps only its hash."""
    user: str
    role: Role
    id: int | None = None
    """What `DELETE /api/v1/tokens/{id}` revokes it by."""
    expires_at: float | None = None
    """When it stops working (epoch seconds); None: never."""


class TokenInfo(_Out):
    """A token as `GET /api/v1/tokens` lists it: never the token itself (the server keeps only
    its hash)."""

    id: int
    user: str
    label: str
    created_at: float
    expires_at: float | None = None
    """When it stops working (epoch seconds); None: never."""


class ProjectsIn(_In):
    projects: list[Name] = Field(max_length=limits.NAME_LIST_MAX)


class ProjectTop(_Out):
    name: str
    quota_gpu_milli: int
    fair_share_gpu_milli: int | None
    allocated_gpu_milli: int
    requested_gpu_milli: int
    running: int
    pending: int
    utilized_gpu_milli: int | None = None
    """GPU in use over the last 5 minutes (utilization x allocation); null without samples."""


class NodeTop(_Out):
    name: str
    gpu_count: int
    allocated_gpu_milli: int
    devices: list[DeviceOut]


class TopOut(_Out):
    at: float
    capacity_gpu_milli: int
    allocated_gpu_milli: int
    projects: list[ProjectTop]
    nodes: list[NodeTop]
    last_cycle_at: float | None
    last_cycle_ms: float | None


class NamesOut(_Out):
    """Names only, for a page's filters and colours (`GET /api/v1/names`): far cheaper than
    `/top` or `/nodes`, which read every device and what holds it."""

    projects: list[str]
    """Every project (not departments), sorted; everyone may read them, as in `/top`."""
    nodes: list[str]
    """Every node, sorted."""


class UsagePoint(_Out):
    """Allocation and use of one device, project or workload over one time bucket."""

    key: str
    """`node/device`, `project` or `project/workload`."""
    bucket_start: float
    allocated_gpu_milli: int
    utilized_gpu_milli: int
    memory_used_max_mib: int | None


class UsageOut(_Out):
    by: str
    bucket_s: int
    points: list[UsagePoint]
    summary: list[UsagePoint]
    """One per key: averages over the whole range (`bucket_start` is the range's start)."""


class HistoryRange(enum.StrEnum):
    HOUR = "1h"
    DAY = "24h"
    WEEK = "7d"
    MONTH = "30d"


class ProjectSeries(enum.StrEnum):
    """A project's series in `GET /api/v1/history` (`project_series`; all three by default)."""

    ALLOCATED = "allocated"
    UTILIZED = "utilized"
    REQUESTED = "requested"


class HistorySeries(_Out):
    """One project's lines in a history chart (GPUs, averaged over each step). A line not asked
    for (`project_series`) is null as a whole."""

    key: str
    """The project's name; researchers see projects that are not theirs as usage only."""
    allocated_gpu: list[float | None] | None
    utilized_gpu: list[float | None] | None
    """null at a step where no utilization was measured (unknown, not 0)."""
    requested_gpu: list[float | None] | None


class HistoryOut(_Out):
    """Allocated vs utilized GPUs over time, for the cluster and per project, read from the
    downsampled history store (per-minute rows for short ranges, hourly for long ones)."""

    start: float
    end: float
    step_s: int
    resolution_s: int
    """The store's rows the points were read from: 60 (per minute) or 3600 (per hour)."""
    times: list[float]
    """Start of each step; every list below has one entry per time (null: no data)."""
    capacity_gpu: list[float | None]
    allocated_gpu: list[float | None]
    utilized_gpu: list[float | None]
    pending_workloads: list[float | None]
    pending_gpu: list[float | None]
    projects: list[HistorySeries]
    allocated_gpu_hours: float
    utilized_gpu_hours: float | None
    idle_allocated_gpu_hours: float | None
    """Allocated but not used; null where utilization is unknown."""
    idle_allocated_share: float | None
    """idle_allocated_gpu_hours / allocated_gpu_hours over the hours where both are known."""


class DeviceHistory(_Out):
    """One device over a range of the history store."""

    node: str
    device_index: int
    allocated_gpu: float
    """Part of the device charged to work (0 to 1), averaged over the range's recorded time."""
    utilization_percent: float | None
    """Average over the samples where it was measured; null where it never was."""
    memory_used_max_mib: int | None
    allocated_gpu_hours: float


class DeviceHistoryOut(_Out):
    start: float
    end: float
    resolution_s: int
    devices: list[DeviceHistory]


class LoginIn(_In):
    token: Annotated[
        str,
        Field(min_length=1, max_length=limits.TOKEN_MAX),
        _NoControl,
    ]


class SessionOut(_Out):
    """Who is logged in. `csrf_token` goes back in the X-CSRF-Token header of every change
    made with the session cookie."""

    user: str
    role: Role
    projects: list[str]
    csrf_token: str | None
    """null when the caller used a bearer token (no cookie, so no CSRF to guard against)."""
    expires_at: float | None


class ErrorDetail(_Out):
    field: str | None
    message: str


class ErrorOut(_Out):
    detail: str
    errors: list[ErrorDetail] = []


class Health(_Out):
    status: str
    version: str
    task_isolation: str | None = None
    """Local executor: `bubblewrap` (tasks sandboxed; a `working_dir` must lie under a task
    root) or `none`; None for other executors."""


def validation_error_out(items: Iterable[Mapping[str, Any]]) -> ErrorOut:
    """Pydantic's errors as the API's 422 body: one `field: message` per problem. The server
    answers with it and the CLI builds the same text when it checks input before sending."""
    details = []
    for item in items:
        location = [str(part) for part in item.get("loc", ()) if part != "body"]
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        details.append(ErrorDetail(field=".".join(location) or None, message=message))
    summary = "; ".join(f"{d.field}: {d.message}" if d.field else d.message for d in details)
    return ErrorOut(detail=f"invalid request: {summary}", errors=details)
