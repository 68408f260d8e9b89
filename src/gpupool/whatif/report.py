"""Rendering what-if results: rich text for people, JSON for scripts.

Both show the same things per file: the final workloads (state, placement, why they wait), the
projects (quota, fair share, holding, demand; GPUs in GPU units, not milli), the decisions in
order with their time, and each failed expectation with what was expected and what happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from gpupool.core.decisions import Bind, Decision, Evict, Move
from gpupool.core.model import MILLI_PER_GPU, GpuRequest, GpuRequestKind, Resources, TaskPlacement
from gpupool.units import format_gpu_milli
from gpupool.userfiles import UserFileError
from gpupool.whatif.runner import (
    Failure,
    RunResult,
    State,
    WorkloadRecord,
    describe_decision,
    format_placements,
)

__all__ = ["FileOutcome", "outcome_json", "render_outcome", "render_summary"]

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class FileOutcome:
    """What happened to one file: a run, a load error, or an error inside the scheduler."""

    path: str
    result: RunResult | None = None
    error: UserFileError | None = None
    internal_error: str | None = None

    @property
    def passed(self) -> bool:
        return self.result is not None and self.result.passed

    @property
    def exit_code(self) -> int:
        """0 passed, 1 an expectation failed, 2 malformed file, 3 the scheduler itself failed."""
        if self.internal_error is not None:
            return 3
        if self.error is not None:
            return 2
        return 0 if self.passed else 1


# --- JSON -----------------------------------------------------------------------------------------


def gpus(milli: int) -> int | float:
    """Milli-GPU as a JSON number of GPUs: 2000 -> 2, 500 -> 0.5."""
    if milli % MILLI_PER_GPU == 0:
        return milli // MILLI_PER_GPU
    return float(Decimal(milli) / Decimal(MILLI_PER_GPU))


def _resources_json(resources: Resources) -> JsonObject:
    return {
        "gpu": gpus(resources.gpu_milli),
        "cpu_milli": resources.cpu_milli,
        "memory_mib": resources.memory_mib,
    }


def _placement_json(placement: TaskPlacement) -> JsonObject:
    return {
        "task": placement.task_index,
        "node": placement.node,
        "devices": list(placement.devices),
        "burst_device": placement.burst_device,
    }


def _request_json(request: GpuRequest) -> JsonObject:
    if request.kind is GpuRequestKind.MEMORY:
        return {"gpu_memory_mib": request.amount}
    amount = request.amount if request.kind is GpuRequestKind.WHOLE else gpus(request.amount)
    result: JsonObject = {"gpu": amount}
    if request.limit_milli is not None:
        result["gpu_limit"] = gpus(request.limit_milli)
    return result


def _workload_json(record: WorkloadRecord) -> JsonObject:
    workload = record.workload
    return {
        "name": workload.name,
        "project": workload.project,
        "type": workload.type.value,
        "tasks": workload.tasks,
        "request": _request_json(workload.gpu),
        "state": record.state.value,
        "placements": [_placement_json(p) for p in workload.placements],
        "pending_reason": record.reason if record.state is State.PENDING else None,
        "reason": record.reason,
        "evictions": record.evictions,
    }


def decision_json(decision: Decision) -> JsonObject:
    result: JsonObject = {"workload": decision.workload, "reason": decision.reason}
    if isinstance(decision, Bind):
        result |= {"kind": "bind", "placements": [_placement_json(p) for p in decision.placements]}
    elif isinstance(decision, Evict):
        result |= {
            "kind": "evict",
            "cause": decision.cause.value,
            "task_indices": list(decision.task_indices),
            "for_workload": decision.for_workload,
        }
    elif isinstance(decision, Move):
        result |= {
            "kind": "move",
            "cause": decision.cause.value,
            "source": _placement_json(decision.source),
            "target": _placement_json(decision.target),
        }
    return result


def _failure_json(failure: Failure) -> JsonObject:
    return {
        "check": failure.check,
        "at": failure.at_s,
        "line": failure.line,
        "expected": failure.expected,
        "actual": failure.actual,
        "detail": list(failure.detail),
    }


def _error_json(error: UserFileError) -> JsonObject:
    return {
        "path": error.path,
        "line": error.line,
        "key": error.key_path,
        "message": error.message,
        "text": str(error),
    }


def outcome_json(outcome: FileOutcome) -> JsonObject:
    """One file's entry in the `--json` document."""
    result = outcome.result
    document: JsonObject = {
        "name": None if result is None else result.scenario.name,
        "path": outcome.path,
        "passed": outcome.passed,
        "exit_code": outcome.exit_code,
        "error": None,
        "errors": [],
        "failures": [],
        "end_s": None,
        "workloads": [],
        "projects": [],
        "decisions": [],
        "timeline": [],
    }
    if outcome.error is not None:
        document["error"] = outcome.error.message
        document["errors"] = [_error_json(e) for e in outcome.error.all]
    if outcome.internal_error is not None:
        document["error"] = outcome.internal_error
    if result is not None:
        document |= {
            "end_s": result.end_s,
            "failures": [_failure_json(f) for f in result.failures],
            "workloads": [_workload_json(r) for r in result.workloads],
            "projects": [
                {
                    "name": p.name,
                    "quota": _resources_json(p.quota),
                    "fair_share": _resources_json(p.fair_share),
                    "holding": _resources_json(p.holding),
                    "demand": _resources_json(p.demand),
                }
                for p in result.projects
            ],
            "decisions": [
                {"at": d.at_s, "cycle": d.cycle, **decision_json(d.decision)}
                for d in result.decisions
            ],
            "timeline": [{"at": t.at_s, "text": t.text} for t in result.timeline],
        }
    return document


# --- text -----------------------------------------------------------------------------------------

_STATE_STYLE = {
    State.RUNNING: "green",
    State.PENDING: "yellow",
    State.STOPPING: "magenta",
    State.SUCCEEDED: "blue",
    State.FAILED: "red",
    State.SUSPENDED: "dim",
    State.DELETED: "dim",
}


def _request_text(request: GpuRequest) -> str:
    if request.kind is GpuRequestKind.MEMORY:
        return f"{request.amount} MiB"
    text = format_gpu_milli(
        request.amount * MILLI_PER_GPU if not request.is_shared else request.amount
    )
    if request.limit_milli is not None:
        text += f" up to {format_gpu_milli(request.limit_milli)}"
    return text


def _workloads_table(result: RunResult) -> Table:
    table = Table(
        title=f"Workloads at t={result.end_s}",
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("workload", no_wrap=True)
    table.add_column("project", no_wrap=True)
    table.add_column("type", overflow="fold")
    table.add_column("gpu/task", overflow="fold")
    table.add_column("state", no_wrap=True)
    table.add_column("evicted", no_wrap=True)
    table.add_column("placement", overflow="fold", min_width=10)
    for record in result.workloads:
        workload = record.workload
        tasks = f"{workload.tasks} x " if workload.tasks > 1 else ""
        table.add_row(
            Text(workload.name),
            Text(workload.project),
            Text(workload.type.value),
            Text(tasks + _request_text(workload.gpu)),
            Text(str(record.state), style=_STATE_STYLE[record.state]),
            Text(f"{record.evictions}x" if record.evictions else ""),
            Text(format_placements(workload.placements) if workload.placements else ""),
        )
    return table


def _reasons_text(result: RunResult) -> Text:
    """Why each workload that is not running is where it is, in the scheduler's words."""
    text = Text()
    waiting = [r for r in result.workloads if r.state is not State.RUNNING and r.reason]
    if not waiting:
        return text
    text.append("Not running\n", style="bold")
    for record in waiting:
        text.append(f"  {record.name}", style="bold")
        text.append(f" ({record.state}): ", style=_STATE_STYLE[record.state])
        text.append(f"{record.reason}\n")
    return text


def _amount_text(resources: Resources) -> str:
    text = format_gpu_milli(resources.gpu_milli)
    extras = []
    if resources.cpu_milli:
        extras.append(f"{resources.cpu_milli}m cpu")
    if resources.memory_mib:
        extras.append(f"{resources.memory_mib} MiB")
    return text + (f" ({', '.join(extras)})" if extras else "")


def _projects_table(result: RunResult) -> Table:
    table = Table(
        title="Projects (GPUs)",
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for column in ("project", "quota", "fair share", "holding", "demand"):
        table.add_column(
            column, overflow="fold", justify="left" if column == "project" else "right"
        )
    for share in result.projects:
        table.add_row(
            Text(share.name),
            Text(_amount_text(share.quota)),
            Text(_amount_text(share.fair_share)),
            Text(_amount_text(share.holding)),
            Text(_amount_text(share.demand)),
        )
    return table


def _decisions_text(result: RunResult) -> Text:
    """Decisions and timeline entries in one list by time; at an instant the timeline's
    entries (stops, completions, events) come first, as the runner applies them before cycles.
    """
    entries: list[tuple[int, int, int, Text]] = []
    for index, entry in enumerate(result.timeline):
        entries.append((entry.at_s, 0, index, Text(entry.text, style="dim")))
    for index, record in enumerate(result.decisions):
        decision = record.decision
        line = Text()
        line.append(describe_decision(decision), style=_DECISION_STYLE[type(decision)])
        line.append(f": {decision.reason}")
        entries.append((record.at_s, 1, index, line))
    text = Text()
    text.append("Decisions and events\n", style="bold")
    if not entries:
        text.append("  (none)\n", style="dim")
    for at_s, _, _, line in sorted(entries, key=lambda e: e[:3]):
        text.append(f"  t={at_s:<6} ", style="dim")
        text.append(line)
        text.append("\n")
    return text


_DECISION_STYLE: dict[type[Decision], str] = {Bind: "green", Evict: "red", Move: "cyan"}


def _failures_text(failures: Sequence[Failure]) -> Text:
    text = Text()
    if not failures:
        text.append("PASSED", style="bold green")
        text.append(": every expectation holds\n")
        return text
    text.append(f"FAILED: {len(failures)} expectation(s) do not hold\n", style="bold red")
    for failure in failures:
        when = "at the end" if failure.at_s is None else f"at t={failure.at_s}"
        where = f" (line {failure.line})" if failure.line is not None else ""
        text.append("  x ", style="red")
        text.append(f"{failure.check} {when}{where}\n", style="bold")
        text.append(f"      expected: {failure.expected}\n")
        text.append(f"      actual:   {failure.actual}\n")
        for line in failure.detail:
            text.append(f"        - {line}\n", style="dim")
    return text


def render_outcome(outcome: FileOutcome) -> list[RenderableType]:
    """Everything about one file, for a rich console: `Text` parts are lines that should not be
    hard-wrapped (so paths and messages stay whole for grep and copy), the rest are tables.
    """
    result = outcome.result
    header = Text()
    header.append(outcome.path, style="bold")
    if result is not None:
        header.append(f"  {result.scenario.name}")
    parts: list[RenderableType] = [header]
    if outcome.error is not None:
        errors = Text()
        errors.append("malformed scenario\n", style="bold red")
        for error in outcome.error.all:
            errors.append(f"  {error}\n")
        parts.append(errors)
    if outcome.internal_error is not None:
        errors = Text()
        errors.append(
            "the scheduler failed on this scenario (a bug in gpupool)\n", style="bold red"
        )
        errors.append(f"  {outcome.internal_error}\n")
        parts.append(errors)
    if result is not None:
        parts += [
            _workloads_table(result),
            _reasons_text(result),
            _projects_table(result),
            _decisions_text(result),
            _failures_text(result.failures),
        ]
    return parts


def render_summary(outcomes: Sequence[FileOutcome]) -> Text:
    passed = sum(1 for o in outcomes if o.exit_code == 0)
    failed = sum(1 for o in outcomes if o.exit_code == 1)
    malformed = sum(1 for o in outcomes if o.exit_code == 2)
    broken = sum(1 for o in outcomes if o.exit_code == 3)
    text = Text()
    text.append(f"{len(outcomes)} file(s): ")
    text.append(f"{passed} passed", style="green" if passed else "")
    text.append(", ")
    text.append(f"{failed} failed", style="red" if failed else "")
    text.append(", ")
    text.append(f"{malformed} malformed", style="red" if malformed else "")
    if broken:
        text.append(", ")
        text.append(f"{broken} scheduler error(s)", style="red")
    return text


def print_outcomes(console: Console, outcomes: Sequence[FileOutcome]) -> None:
    for outcome in outcomes:
        console.rule()
        for part in render_outcome(outcome):
            console.print(part, soft_wrap=isinstance(part, Text))
    console.rule()
    console.print(render_summary(outcomes), soft_wrap=True)
