"""`gpupool usage`: allocated vs utilized GPU over time, from the server's history store
(`/api/v1/history`), or per workload from its per-minute samples (`/api/v1/usage`)."""

from __future__ import annotations

import enum
import math
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table

from gpupool.cli.common import JsonOption, clock, connect, fail, gpus, show, table

if TYPE_CHECKING:
    from gpupool.api.schemas import DeviceHistoryOut, HistoryOut, UsageOut

__all__ = ["UsageBy", "parse_since", "usage", "usage_view"]

RANGES = {"1h": 3_600, "24h": 86_400, "7d": 7 * 86_400, "30d": 30 * 86_400}
"""The server's named ranges; any other duration is sent as an explicit start."""
WORKLOAD_DAYS = 14
"""How long the per-workload samples are kept."""
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)\s*$")
_UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3_600, "d": 86_400, "w": 7 * 86_400}
_BLOCKS = "▁▂▃▄▅▆▇█"
TREND_WIDTH = 24
CLUSTER_ROWS = 24


class UsageBy(enum.StrEnum):
    PROJECT = "project"
    CLUSTER = "cluster"
    DEVICE = "device"
    WORKLOAD = "workload"


def parse_duration_s(text: str, option: str = "--since") -> float:
    """`30s`, `90m`, `36h`, `2d`, `1w` -> seconds; ValueError with the fix otherwise."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(
            f"{option} {text!r} is not a duration: write a number and a unit (s, m, h, d, w), "
            "like 1h, 90m, 24h, 7d or 30d"
        )
    return float(match[1]) * _UNIT_S[match[2]]


def parse_since(text: str) -> int:
    """`90m`, `36h`, `2d`, `1w` -> seconds; ValueError with the fix otherwise."""
    seconds = round(parse_duration_s(text))
    if seconds < 60:
        raise ValueError(f"--since {text!r} is too short: the history has one point a minute")
    return seconds


def usage(
    since: Annotated[
        str,
        typer.Option(
            metavar="DURATION", help="How far back: 1h, 24h, 7d, 30d or any duration (90m, 2d)."
        ),
    ] = "24h",
    by: Annotated[
        UsageBy,
        typer.Option(
            help="project, cluster or device (the history store: per minute for 7 days, per "
            "hour for a year), or workload (samples per minute for 2 days, per hour for "
            f"{WORKLOAD_DAYS} days)."
        ),
    ] = UsageBy.PROJECT,
    json_output: JsonOption = False,
) -> None:
    """Allocated vs utilized GPU over time: the number to improve."""
    try:
        seconds = parse_since(since)
    except ValueError as error:
        fail(str(error))
    label = since.strip()
    if by is UsageBy.WORKLOAD:
        minutes = math.ceil(seconds / 60)
        if minutes > WORKLOAD_DAYS * 1440:
            fail(
                f"per-workload samples are kept {WORKLOAD_DAYS} days: use a shorter --since, "
                "or --by project for longer"
            )
        # Only the averages over the whole range are shown: one bucket of it (a day at most),
        # not a point per workload and minute.
        with connect() as client:
            report = client.usage(
                by="workload", minutes=minutes, bucket_s=min(86_400, 60 * minutes)
            )
        show(report, json_output, lambda: usage_view(report, minutes))
        return
    range_ = label if label in RANGES else None
    start = None if range_ is not None else time.time() - seconds
    with connect() as client:
        if by is UsageBy.DEVICE:
            devices = client.device_history(range_, start)
            show(devices, json_output, lambda: device_view(devices, label))
            return
        out = client.history(range_, start)
    view = project_view if by is UsageBy.PROJECT else cluster_view
    show(out, json_output, lambda: view(out, label))


# -- views --------------------------------------------------------------------------------------


def usage_view(report: UsageOut, minutes: int) -> Table:
    """The per-minute samples' averages (`gpupool usage --by workload`)."""
    view = table(
        report.by.upper(), "ALLOCATED>", "UTILIZED>", "UTILIZED / ALLOCATED>",
        title=f"GPU allocated and utilized, average over the last {minutes} min",
    )  # fmt: skip
    for point in report.summary:
        ratio = (
            f"{100 * point.utilized_gpu_milli / point.allocated_gpu_milli:.0f}%"
            if point.allocated_gpu_milli
            else "-"
        )
        view.add_row(
            point.key, gpus(point.allocated_gpu_milli), gpus(point.utilized_gpu_milli), ratio
        )
    return view


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _gpus(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(part: float | None, whole: float | None) -> str:
    if part is None or not whole:
        return "-"
    return f"{100 * part / whole:.0f}%"


def _hours(out: HistoryOut, values: Sequence[float | None]) -> float:
    """GPU-hours of a series: each step's average times the part of the step in the range."""
    total = 0.0
    for at, value in zip(out.times, values, strict=True):
        covered = min(at + out.step_s, out.end) - max(at, out.start)
        if value is not None and covered > 0:
            total += value * covered / 3600
    return total


def sparkline(values: Sequence[float | None], width: int = TREND_WIDTH) -> str:
    """`values` in at most `width` characters, the highest as a full block; blank: no data."""
    if not values:
        return ""
    size = math.ceil(len(values) / width)
    chunks = [_mean(values[i : i + size]) for i in range(0, len(values), size)]
    top = max((v for v in chunks if v is not None), default=0.0)
    steps = len(_BLOCKS) - 1
    return "".join(
        " " if v is None else _BLOCKS[round(v / top * steps) if top else 0] for v in chunks
    )


def _span(out: HistoryOut | DeviceHistoryOut, label: str) -> str:
    return f"last {label} ({clock(out.start)} to {clock(out.end)})"


def _totals(out: HistoryOut) -> str:
    allocated = f"{out.allocated_gpu_hours:,.1f} GPU-hours allocated"
    if out.utilized_gpu_hours is None:
        return f"Cluster: {allocated}; utilization unknown (no GPU was measured)"
    idle = (
        f"; {100 * out.idle_allocated_share:.0f}% of the allocated GPU time measured was idle"
        if out.idle_allocated_share is not None
        else ""
    )
    return f"Cluster: {allocated}, {out.utilized_gpu_hours:,.1f} utilized{idle}"


def project_view(out: HistoryOut, label: str) -> Group:
    view = table(
        "PROJECT", "ALLOCATED>", "UTILIZED>", "UTILIZED / ALLOCATED>", "REQUESTED>",
        "GPU-HOURS>", "ALLOCATED OVER TIME",
        title=f"GPUs by project, average over the {_span(out, label)}",
    )  # fmt: skip
    for series in out.projects:
        # The CLI asks for every series; one left out (null) reads as unknown.
        allocated_line = series.allocated_gpu or []
        allocated = _mean(allocated_line)
        utilized = _mean(series.utilized_gpu or [])
        view.add_row(
            escape(series.key),
            _gpus(allocated),
            _gpus(utilized),
            _ratio(utilized, allocated),
            _gpus(_mean(series.requested_gpu or [])),
            f"{_hours(out, allocated_line):,.1f}",
            sparkline(allocated_line),
        )
    return Group(view, _totals(out))


def cluster_view(out: HistoryOut, label: str) -> Group:
    view = table(
        "FROM", "CAPACITY>", "ALLOCATED>", "UTILIZED>", "PENDING>", "PENDING GPUS>",
        title=f"The cluster over the {_span(out, label)} (GPUs, averages)",
    )  # fmt: skip
    size = max(1, math.ceil(len(out.times) / CLUSTER_ROWS))
    for i in range(0, len(out.times), size):
        part = slice(i, i + size)
        pending = _mean(out.pending_workloads[part])
        view.add_row(
            clock(out.times[i]),
            _gpus(_mean(out.capacity_gpu[part])),
            _gpus(_mean(out.allocated_gpu[part])),
            _gpus(_mean(out.utilized_gpu[part])),
            "-" if pending is None else f"{pending:.1f}",
            _gpus(_mean(out.pending_gpu[part])),
        )
    return Group(view, _totals(out))


def device_view(out: DeviceHistoryOut, label: str) -> Table:
    view = table(
        "DEVICE", "ALLOCATED>", "UTILIZATION>", "MEMORY USED (MAX)>", "GPU-HOURS>",
        title=f"Devices over the {_span(out, label)} (averages)",
    )  # fmt: skip
    for d in out.devices:
        utilization = d.utilization_percent
        memory = d.memory_used_max_mib
        view.add_row(
            escape(f"{d.node}/{d.device_index}"),
            _gpus(d.allocated_gpu),
            "-" if utilization is None else f"{utilization:.0f}%",
            "-" if memory is None else f"{memory:,} MiB",
            f"{d.allocated_gpu_hours:,.1f}",
        )
    return view
