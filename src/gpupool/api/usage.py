"""API bodies of what the cluster holds and used: `/top`, `/names`, usage and history."""

from __future__ import annotations

import enum

from gpupool.api.fields import _Out
from gpupool.api.nodes import DeviceOut


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
