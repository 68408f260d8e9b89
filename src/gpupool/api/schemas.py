"""Request and response bodies of the gpupool HTTP API (version 1).

Every body is importable from here, as it always was. The bodies live in rooms by topic, and this
module re-exports them: `fields` (field types and the `_In`/`_Out` bases), `projects`, `nodes`,
`workloads` (a submission, its dry run, events and log), `users` (users, tokens, sessions),
`usage` (top, names, usage, history) and `errors` (errors and health). Defined here: the views
of a workload with its tasks (`TaskState` is the core lifecycle's, re-exported)."""

from __future__ import annotations

from gpupool.api.enums import Role as Role
from gpupool.api.enums import WorkloadStatus as WorkloadStatus
from gpupool.api.enums import WorkloadType as WorkloadType
from gpupool.api.errors import ErrorDetail, ErrorOut, Health, validation_error_out
from gpupool.api.fields import (
    NAME_PATTERN,
    CommandArg,
    EnvKey,
    EnvValue,
    LabelKey,
    LabelValue,
    ModelText,
    Name,
    NodeLabelValue,
    NonNeg,
    Pos,
    Priority,
    Quantity,
    TokenLabel,
    WorkingDir,
    _In,
    _NoControl,
    _Out,
)
from gpupool.api.nodes import DeviceIn, DeviceOut, DeviceShare, NodeIn, NodeOut
from gpupool.api.projects import (
    Amounts,
    AmountsIn,
    DepartmentIn,
    ProjectIn,
    ProjectOut,
    ProjectPatch,
)
from gpupool.api.usage import (
    DeviceHistory,
    DeviceHistoryOut,
    HistoryOut,
    HistoryRange,
    HistorySeries,
    NamesOut,
    NodeTop,
    ProjectSeries,
    ProjectTop,
    TopOut,
    UsageOut,
    UsagePoint,
)
from gpupool.api.users import (
    LoginIn,
    ProjectsIn,
    SessionOut,
    TokenIn,
    TokenInfo,
    TokenLifetime,
    TokenOut,
    UserIn,
    UserOut,
)
from gpupool.api.workloads import DryRunOut, EventOut, LogChunk, PlacementOut, WorkloadIn
from gpupool.core.lifecycle import TaskState as TaskState

__all__ = [
    "NAME_PATTERN",
    "Amounts",
    "AmountsIn",
    "CommandArg",
    "DepartmentIn",
    "DeviceHistory",
    "DeviceHistoryOut",
    "DeviceIn",
    "DeviceOut",
    "DeviceShare",
    "DryRunOut",
    "EnvKey",
    "EnvValue",
    "ErrorDetail",
    "ErrorOut",
    "EventOut",
    "Health",
    "HistoryOut",
    "HistoryRange",
    "HistorySeries",
    "LabelKey",
    "LabelValue",
    "LogChunk",
    "LoginIn",
    "ModelText",
    "Name",
    "NamesOut",
    "NodeIn",
    "NodeLabelValue",
    "NodeOut",
    "NodeTop",
    "NonNeg",
    "PlacementOut",
    "Pos",
    "Priority",
    "ProjectIn",
    "ProjectOut",
    "ProjectPatch",
    "ProjectSeries",
    "ProjectTop",
    "ProjectsIn",
    "Quantity",
    "Role",
    "SessionOut",
    "TaskOut",
    "TaskPlacement",
    "TaskState",
    "TokenIn",
    "TokenInfo",
    "TokenLabel",
    "TokenLifetime",
    "TokenOut",
    "TopOut",
    "UsageOut",
    "UsagePoint",
    "UserIn",
    "UserOut",
    "WorkingDir",
    "WorkloadDetail",
    "WorkloadIn",
    "WorkloadOut",
    "WorkloadPage",
    "WorkloadStatus",
    "WorkloadType",
    "_In",
    "_NoControl",
    "_Out",
    "validation_error_out",
]


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
