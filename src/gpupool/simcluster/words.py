"""Placements and decisions in words, as reports and error messages show them."""

from __future__ import annotations

from collections.abc import Iterable

from gpupool.core.decisions import Bind, Decision, Evict
from gpupool.core.model import TaskPlacement

__all__ = ["describe_decision", "format_placement", "format_placements"]


def format_placement(placement: TaskPlacement) -> str:
    """`node-1:0,1`, or `node-1:0 (bursting on 1)` for a spread dynamic fraction."""
    text = f"{placement.node}:{','.join(str(d) for d in placement.devices)}"
    if placement.burst_device is not None:
        text += f" (bursting on {placement.burst_device})"
    return text


def format_placements(placements: Iterable[TaskPlacement]) -> str:
    return ", ".join(format_placement(p) for p in placements) or "nothing"


def describe_decision(decision: Decision) -> str:
    """One line for a decision, as shown in reports and failure details."""
    if isinstance(decision, Bind):
        return f"bind {decision.workload} -> {format_placements(decision.placements)}"
    if isinstance(decision, Evict):
        tasks = (
            f" tasks {','.join(str(i) for i in decision.task_indices)}"
            if decision.task_indices
            else ""
        )
        target = f" for {decision.for_workload}" if decision.for_workload else ""
        return f"evict {decision.workload}{tasks} ({decision.cause.value}{target})"
    return (
        f"move {decision.workload} task {decision.target.task_index}: "
        f"{format_placement(decision.source)} -> {format_placement(decision.target)} "
        f"({decision.cause.value})"
    )
