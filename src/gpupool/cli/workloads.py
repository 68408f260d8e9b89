"""The workload commands: `list`, `describe`, `logs`, and `suspend` / `resume` / `delete`
(`submit` is in `gpupool.cli.submit`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table

from gpupool.api.enums import WorkloadStatus
from gpupool.cli.common import (
    JsonOption,
    OutputFormat,
    OutputOption,
    ProjectOption,
    WorkloadName,
    age,
    clock,
    connect,
    fail,
    format_gpu_request,
    handled,
    memory_text,
    output_format,
    resolve_project,
    shorten,
    show,
    show_as,
    table,
)
from gpupool.cli.usage import parse_duration_s

if TYPE_CHECKING:
    from gpupool.api.schemas import WorkloadDetail, WorkloadOut
    from gpupool.client.http import GpupoolClient

__all__ = ["action_commands", "describe", "list_workloads", "logs"]

LOG_POLL_INTERVAL_S = 0.5
LIST_PAGE_SIZE = 500


def workload_table(workloads: Sequence[WorkloadOut], wide: bool = False) -> Table:
    """One row per workload; `wide` adds its nodes, submitter and priority, and does not
    shorten the reason."""
    columns = ["PROJECT", "NAME", "TYPE", "STATUS", "GPU/TASK>", "TASKS>", "EXIT>", "PREEMPTED>"]
    columns += ["AGE>", "NODES", "USER", "PRIORITY>", "REASON"] if wide else ["AGE>", "REASON"]
    rows = table(*columns)
    for w in workloads:
        cells = [
            w.project,
            w.name,
            w.type,
            w.status,
            format_gpu_request(w),
            f"{w.running_tasks}/{w.tasks}",
            "-" if w.exit_code is None else str(w.exit_code),
            str(w.preemptions),
            age(w.submitted_at),
        ]
        if wide:
            nodes = ",".join(dict.fromkeys(p.node for p in w.placement)) or "-"
            cells += [nodes, w.submitted_by or "-", str(w.priority)]
            cells.append(escape(w.pending_reason or ""))
        else:
            cells.append(escape(shorten(w.pending_reason)))
        rows.add_row(*cells)
    return rows


def describe_view(w: WorkloadDetail) -> Group:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    preemptible = "preemptible" if w.preemptible else "not preemptible"
    if w.preemptible and w.min_runtime_s:
        preemptible += f" after {w.min_runtime_s} s of running"
    gang = f", at least {w.min_available} together" if w.min_available else ""
    submitted = f"{clock(w.submitted_at)} by {w.submitted_by or '-'}, {age(w.submitted_at)} ago"
    for key, value in [
        ("Workload", f"{w.project}/{w.name}"),
        ("Type", f"{w.type}, priority {w.priority}, {preemptible}"),
        ("Status", w.status),
        ("Pending reason", w.pending_reason or "-"),
        ("GPU per task", format_gpu_request(w)),
        ("Tasks", f"{w.running_tasks} running of {w.tasks}{gang}"),
        ("Command", " ".join(w.command) or "-"),
        ("Env", " ".join(f"{k}={v}" for k, v in w.env.items()) or "-"),
        ("CPU per task", f"{w.cpu_milli / 1000:g} cores" if w.cpu_milli else "-"),
        ("Memory per task", memory_text(w.memory_mib) if w.memory_mib else "-"),
        ("Image", w.image or "-"),
        ("Working dir", w.working_dir or "-"),
        ("Submitted", submitted),
        ("Started", clock(w.started_at)),
        ("Finished", clock(w.finished_at)),
        ("Preemptions", str(w.preemptions)),
        ("Exit code", "-" if w.exit_code is None else str(w.exit_code)),
    ]:  # fmt: skip
        facts.add_row(key, escape(value))
    tasks = table("TASK>", "STATE", "NODE", "DEVICES", "STARTED", "EXIT>", "REASON", title="Tasks")
    for t in w.task_list:
        devices = ",".join(map(str, t.devices)) or "-"
        if t.burst_device is not None:
            devices += f" (burst {t.burst_device})"
        exit_code = "-" if t.exit_code is None else str(t.exit_code)
        started = clock(t.started_at)
        tasks.add_row(str(t.task_index), t.state, t.node, devices, started, exit_code, t.reason)
    events = table("TIME", "KIND", "MESSAGE", title="Events")
    for e in w.events:
        events.add_row(clock(e.at), e.kind, escape(e.message))
    return Group(facts, "", tasks if w.task_list else "[bold]Tasks[/]: none placed yet", events)


def list_workloads(
    project: ProjectOption = None,
    status: Annotated[WorkloadStatus | None, typer.Option(help="Only this status.")] = None,
    all_projects: Annotated[
        bool, typer.Option("--all", "-A", help="Every project you can see, not the default one.")
    ] = False,
    output: OutputOption = None,
    json_output: JsonOption = False,
) -> None:
    """List workloads: of --project, else of the default project, else of every project."""
    from gpupool.api import schemas
    from gpupool.client.config import effective_config

    chosen_format = output_format(output, json_output)
    if all_projects and project:
        fail("give --project NAME or --all, not both")
    with handled():
        chosen = None if all_projects else project or effective_config().project
    items: list[WorkloadOut] = []
    with connect() as client:
        while True:
            page = client.list_workloads(
                chosen,
                None if status is None else schemas.WorkloadStatus(status),
                limit=LIST_PAGE_SIZE,
                offset=len(items),
            )
            items += page.items
            if not page.items or len(items) >= page.total:
                break
    wide = chosen_format == OutputFormat.WIDE
    page = schemas.WorkloadPage(items=items, total=len(items))
    show_as(page, chosen_format, lambda: workload_table(items, wide))


def describe(
    name: WorkloadName,
    project: ProjectOption = None,
    output: OutputOption = None,
    json_output: JsonOption = False,
) -> None:
    """Everything about a workload: why it waits, its tasks and its events (wide: the same)."""
    chosen_format = output_format(output, json_output)
    chosen = resolve_project(project)
    with connect() as client:
        detail = client.describe(chosen, name)
    show_as(detail, chosen_format, lambda: describe_view(detail))


def logs(
    name: WorkloadName,
    project: ProjectOption = None,
    task: Annotated[int, typer.Option(min=0, help="Task index (of a gang).")] = 0,
    all_tasks: Annotated[
        bool,
        typer.Option("--all-tasks", help="Every task of a gang, each line prefixed with [N]."),
    ] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the task ends.")
    ] = False,
    tail: Annotated[
        int | None,
        typer.Option(min=0, metavar="N", help="Only the last N lines (then follow with -f)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Only runs still running DURATION ago (10m, 2h). Lines carry no times: a "
            "run is shown whole or not at all.",
        ),
    ] = None,
    run: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            help="Only run N (1 = the first start; a preempted task runs again).",
        ),
    ] = None,
) -> None:
    """Print a task's log, every run of it in order; with -f, follow it until the task ends
    (Ctrl-C stops). A log of any size is read in 1 MiB pages."""
    chosen = resolve_project(project)
    since_at = None
    if since is not None:
        try:
            since_at = time.time() - parse_duration_s(since)
        except ValueError as error:
            fail(str(error))
    with connect() as client:
        count = client.describe(chosen, name).tasks if all_tasks else 0
        readers = [_LogReader(i, f"[{i}] ") for i in range(count)] if all_tasks else []
        readers = readers or [_LogReader(task, "")]
        while readers:
            progressed = False
            for reader in list(readers):
                chunk = client.logs(
                    chosen,
                    name,
                    reader.task,
                    reader.offset or 0,
                    run=run,
                    since=since_at,
                    tail=tail if reader.offset is None else None,
                )
                reader.offset = chunk.next_offset
                reader.show(chunk.text)
                progressed = progressed or bool(chunk.text)
                if chunk.complete or (not chunk.text and not follow):
                    reader.show_rest()
                    readers.remove(reader)
            if readers and not progressed:
                time.sleep(LOG_POLL_INTERVAL_S)


class _LogReader:
    """Where `gpupool logs` is in one task's log, and the start of a line it has not ended."""

    def __init__(self, task: int, prefix: str) -> None:
        self.task = task
        self.prefix = prefix
        self.offset: int | None = None
        """None before the first read (which `--tail` places)."""
        self._partial = ""

    def show(self, text: str) -> None:
        if not self.prefix:
            typer.echo(text, nl=False)
            return
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            typer.echo(self.prefix + line)

    def show_rest(self) -> None:
        if self._partial:
            typer.echo(self.prefix + self._partial)
            self._partial = ""


WorkloadAction = Callable[["GpupoolClient", str, str], "WorkloadOut"]


def _workload_action(action: WorkloadAction, doc: str) -> Callable[..., None]:
    def command(
        name: WorkloadName, project: ProjectOption = None, json_output: JsonOption = False
    ) -> None:
        chosen = resolve_project(project)
        with connect() as client:
            workload = action(client, chosen, name)
        show(
            workload, json_output, lambda: f"{workload.project}/{workload.name}: {workload.status}"
        )

    command.__doc__ = doc
    return command


def _suspend(client: GpupoolClient, project: str, name: str) -> WorkloadOut:
    return client.suspend(project, name)


def _resume(client: GpupoolClient, project: str, name: str) -> WorkloadOut:
    return client.resume(project, name)


def _delete(client: GpupoolClient, project: str, name: str) -> WorkloadOut:
    return client.delete(project, name)


def action_commands() -> list[tuple[str, Callable[..., None]]]:
    """`suspend`, `resume` and `delete`, in the order `gpupool --help` lists them."""
    return [
        (verb, _workload_action(action, doc))
        for verb, action, doc in [
            ("suspend", _suspend, "Suspend a workload until `gpupool resume`."),
            ("resume", _resume, "Resume a suspended workload."),
            ("delete", _delete, "Delete a workload (it stops its tasks first)."),
        ]
    ]
