"""The `gpupool` commands that talk to a gpupool server (`register(app)` adds them).

`login` saves the server and token in the config file (`gpupool.client.config`); every other
command reads them from there or from `GPUPOOL_SERVER` / `GPUPOOL_TOKEN` / `GPUPOOL_PROJECT`.
Tables by default; `--json` prints the API's models as JSON instead. Errors go to stderr as one
red line `error: <detail>` plus one line `  <field>: <message>` per field.

Exit codes, for scripts:

    0    ok
    1    anything else (an unexpected answer, a server error)
    2    bad input: rejected before any request, or by the server (HTTP 400, 422)
    3    not found (HTTP 404)
    4    not logged in, not authenticated or not allowed (HTTP 401, 403)
    5    conflict, e.g. the name is taken (HTTP 409)
    6    the server cannot be reached
    130  interrupted (Ctrl-C) while following logs or watching `top`
"""

from __future__ import annotations

import enum
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table

from gpupool.api.enums import WorkloadStatus
from gpupool.cli.terminal import output_console
from gpupool.sim.durations import format_duration_s

if TYPE_CHECKING:
    # Only annotations name these here: pydantic, the API's models and httpx load when a command
    # talks to a server, not at every start of the CLI (see tests/client/test_cli_startup.py).
    from pydantic import BaseModel, ValidationError

    from gpupool.api.schemas import (
        Amounts,
        ErrorDetail,
        ProjectOut,
        ProjectPatch,
        TopOut,
        UsageOut,
        WorkloadDetail,
        WorkloadOut,
    )
    from gpupool.client.http import ApiError, GpupoolClient

__all__ = ["ExitCode", "format_gpu_request", "register"]

LOG_POLL_INTERVAL_S = 0.5
LIST_PAGE_SIZE = 500
REASON_WIDTH = 60


class ExitCode(enum.IntEnum):
    OK = 0
    ERROR = 1
    BAD_INPUT = 2
    NOT_FOUND = 3
    NOT_ALLOWED = 4
    CONFLICT = 5
    UNREACHABLE = 6
    INTERRUPTED = 130


_EXIT_BY_STATUS = {
    400: ExitCode.BAD_INPUT,
    422: ExitCode.BAD_INPUT,
    404: ExitCode.NOT_FOUND,
    401: ExitCode.NOT_ALLOWED,
    403: ExitCode.NOT_ALLOWED,
    409: ExitCode.CONFLICT,
}

# -- errors and output, once -------------------------------------------------------------------


def fail(
    detail: str, errors: Sequence[ErrorDetail] = (), code: int = ExitCode.BAD_INPUT
) -> NoReturn:
    """Print `error: <detail>` to stderr, then `  <field>: <message>` for each field error the
    detail does not already say, and exit with `code`."""
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print(f"[red]error: {escape(detail)}[/]")
    for error in errors:
        if error.message not in detail:
            where = f"{error.field}: " if error.field else ""
            console.print(f"  {escape(where + error.message)}")
    raise typer.Exit(code)


def invalid_request(error: ValidationError) -> ApiError:
    """The server's 422 answer to the same input, so local checks read the same."""
    from gpupool.api.schemas import validation_error_out
    from gpupool.client.http import ApiError

    body = validation_error_out(error.errors())
    return ApiError(422, body.detail, body.errors)


@contextmanager
def handled() -> Iterator[None]:
    """Turn the client's, the config's and validation errors into an error line and exit code."""
    from pydantic import ValidationError

    from gpupool.client.config import ConfigError, NotLoggedInError
    from gpupool.client.http import ApiError, ServerUnreachable

    try:
        yield
    except ApiError as error:
        fail(error.detail, error.errors, _EXIT_BY_STATUS.get(error.status, ExitCode.ERROR))
    except ServerUnreachable as error:
        fail(str(error), code=ExitCode.UNREACHABLE)
    except NotLoggedInError as error:
        fail(str(error), code=ExitCode.NOT_ALLOWED)
    except ConfigError as error:
        fail(str(error))
    except ValidationError as error:
        invalid = invalid_request(error)
        fail(invalid.detail, invalid.errors)
    except KeyboardInterrupt:
        raise typer.Exit(ExitCode.INTERRUPTED) from None


@contextmanager
def connect() -> Iterator[GpupoolClient]:
    """A client for the configured server; errors inside the block exit as documented."""
    from gpupool.client.config import effective_config
    from gpupool.client.http import GpupoolClient

    with handled():
        server, token = effective_config().login()
        with GpupoolClient(server, token) as client:
            yield client


def resolve_project(project: str | None) -> str:
    """`--project`, else the configured default project, else a clear error."""
    from gpupool.client.config import effective_config

    with handled():
        chosen = project or effective_config().project
        if not chosen:
            fail(
                "no project given: pass --project NAME, or set a default with "
                "`gpupool config set project NAME`"
            )
        return chosen


def stdout() -> Console:
    return output_console()


class OutputFormat(enum.StrEnum):
    """`-o`: the table, a wider table, or the API's models as JSON or YAML."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


def output_format(output: OutputFormat | None, as_json: bool) -> OutputFormat:
    """`-o FORMAT`, with `--json` as another way to write `-o json`."""
    if as_json and output not in (None, OutputFormat.JSON):
        fail(f"give --json or -o {output}, not both (--json is -o json)")
    return OutputFormat.JSON if as_json else output or OutputFormat.TABLE


def show_as(
    data: BaseModel | Sequence[BaseModel], chosen: OutputFormat, render: Callable[[], Any]
) -> None:
    """Print `data` as JSON or YAML, or what `render()` returns (for table and wide)."""
    from pydantic import BaseModel

    if chosen == OutputFormat.YAML:
        import yaml  # only this format needs it

        plain = (
            data.model_dump(mode="json")
            if isinstance(data, BaseModel)
            else [item.model_dump(mode="json") for item in data]
        )
        typer.echo(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True), nl=False)
    else:
        show(data, chosen == OutputFormat.JSON, render)


def show(data: BaseModel | Sequence[BaseModel], as_json: bool, render: Callable[[], Any]) -> None:
    """Print `data` as JSON, or what `render()` returns (a rich renderable, or plain text)."""
    from pydantic import BaseModel

    if as_json:
        if isinstance(data, BaseModel):
            typer.echo(data.model_dump_json(indent=2))
        else:
            typer.echo(json.dumps([item.model_dump(mode="json") for item in data], indent=2))
    else:
        rendered = render()
        stdout().print(rendered, markup=not isinstance(rendered, str))


def table(*columns: str, title: str | None = None) -> Table:
    """A table in the style of `what-if`; columns whose header ends in `>` are right-aligned."""
    result = Table(
        title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False
    )
    for column in columns:
        right = column.endswith(">")
        result.add_column(column.rstrip(">"), justify="right" if right else "left")
    return result


# -- formatting ---------------------------------------------------------------------------------


def gpus(milli: int | None) -> str:
    from gpupool.units import format_gpu_milli

    return "-" if milli is None else format_gpu_milli(milli)


def amount_gpus(amounts: Amounts | None) -> str:
    return gpus(None if amounts is None else amounts.gpu_milli)


def memory_text(mib: int) -> str:
    """`8192` -> `8G`, `1536` -> `1536M`: how a user writes it."""
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


def format_gpu_request(workload: WorkloadOut) -> str:
    """The GPU per task as the user wrote it: `2`, `0.5`, `0.25 (limit 0.8)`, `8G`."""
    from gpupool.units import format_gpu_milli

    if workload.gpu_kind == "memory":
        return memory_text(workload.gpu_amount)
    if workload.gpu_kind == "fraction":
        text = format_gpu_milli(workload.gpu_amount)
        if workload.gpu_limit_milli is not None:
            text += f" (limit {format_gpu_milli(workload.gpu_limit_milli)})"
        return text
    return str(workload.gpu_amount)


def age(at: float | None) -> str:
    return "-" if at is None else format_duration_s(max(0.0, time.time() - at))


def clock(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def shorten(text: str | None, width: int = REASON_WIDTH) -> str:
    if not text:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


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


def project_table(projects: Sequence[ProjectOut]) -> Group:
    rows = table(
        "NAME", "KIND", "DEPARTMENT", "QUOTA>", "FAIR SHARE>", "HOLDING>", "DEMAND>", "LIMIT>",
        "WEIGHT>", "PRIORITY>", title="Projects (GPUs)",
    )  # fmt: skip
    warnings = []
    for p in projects:
        rows.add_row(
            p.name,
            p.kind,
            p.department or "-",
            amount_gpus(p.quota),
            amount_gpus(p.fair_share),
            amount_gpus(p.holding),
            amount_gpus(p.demand),
            amount_gpus(p.limit),
            str(p.over_quota_weight),
            str(p.priority),
        )
        warnings += p.warnings
    said = [f"[yellow]warning:[/] {escape(w)}" for w in dict.fromkeys(warnings)]
    return Group(rows, *said)


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


def top_view(top: TopOut) -> Group:
    share = 100 * top.allocated_gpu_milli / top.capacity_gpu_milli if top.capacity_gpu_milli else 0
    cycle = "no scheduling cycle yet"
    if top.last_cycle_at is not None:
        cycle = f"last cycle {age(top.last_cycle_at)} ago, {top.last_cycle_ms or 0:.0f} ms"
    header = (
        f"[bold]{gpus(top.allocated_gpu_milli)} of {gpus(top.capacity_gpu_milli)} GPUs "
        f"allocated ({share:.0f}%)[/]; {cycle}"
    )
    projects = table(
        "PROJECT", "QUOTA>", "FAIR SHARE>", "ALLOCATED>", "UTILIZED 5m>", "REQUESTED>",
        "RUNNING>", "PENDING>",
        title="By project (GPUs)",
    )  # fmt: skip
    for p in top.projects:
        projects.add_row(
            p.name,
            gpus(p.quota_gpu_milli),
            gpus(p.fair_share_gpu_milli),
            gpus(p.allocated_gpu_milli),
            gpus(p.utilized_gpu_milli),
            gpus(p.requested_gpu_milli),
            str(p.running),
            str(p.pending),
        )
    nodes = table(
        "NODE", "GPUS>", "ALLOCATED>", "DEVICES (index:allocated, utilization 5m)",
        title="By node",
    )  # fmt: skip
    for n in top.nodes:
        devices = " ".join(
            f"{d.index}:{gpus(d.allocated_milli)}"
            + (f",{d.utilization_percent}%" if d.utilization_percent is not None else "")
            for d in n.devices
        )
        nodes.add_row(n.name, str(n.gpu_count), gpus(n.allocated_gpu_milli), devices)
    return Group(header, projects, nodes)


# -- login and config ---------------------------------------------------------------------------

OutputOption = Annotated[
    OutputFormat | None,
    typer.Option("--output", "-o", help="table (default), wide, json or yaml."),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the API's JSON instead of a table (-o json).")
]
ProjectOption = Annotated[
    str | None,
    typer.Option("--project", "-p", metavar="NAME", help="Project (default: the configured one)."),
]
WorkloadName = Annotated[str, typer.Argument(metavar="NAME", help="The workload's name.")]


def login(
    server: Annotated[
        str | None,
        typer.Option(metavar="URL", help="Server URL, like http://127.0.0.1:8000."),
    ] = None,
    token: Annotated[str | None, typer.Option(metavar="TOKEN", help="Your API token.")] = None,
    token_file: Annotated[
        Path | None, typer.Option(metavar="PATH", help="Read the token from this file.")
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Check a server URL and token with the server and save them in the config file."""
    from gpupool.api.schemas import Role
    from gpupool.client.config import (
        ENV_OVERRIDES,
        ClientConfig,
        config_path,
        normalize_server,
        read_config,
        write_config,
    )
    from gpupool.client.http import GpupoolClient

    with handled():
        if (token is None) == (token_file is None):
            fail("give the token with --token TOKEN or --token-file PATH (one of them)")
        if token_file is not None:
            try:
                token = token_file.read_text(encoding="utf-8").strip()
            except OSError as error:
                fail(f"cannot read the token file {token_file}: {error.strerror}")
        if not token:
            fail("the token is empty")
        path = config_path()
        saved = read_config(path)
        chosen = server or os.environ.get(ENV_OVERRIDES["server"]) or saved.server
        if not chosen:
            fail("give the server with --server URL, like http://127.0.0.1:8000")
        url = normalize_server(chosen)
        with GpupoolClient(url, token) as client:
            me = client.whoami()
        project = saved.project
        if me.role != Role.ADMIN and project not in me.projects:
            project = me.projects[0] if len(me.projects) == 1 else None
        write_config(ClientConfig(server=url, token=token, project=project), path)
    projects = ", ".join(me.projects) or "none"
    show(
        me,
        json_output,
        lambda: (
            f"Logged in to {url} as {me.name} ({me.role}); projects: {projects}; "
            f"default project: {project or 'none'}. Saved in {path}."
        ),
    )


class ConfigKey(enum.StrEnum):
    SERVER = "server"
    PROJECT = "project"


config_app = typer.Typer(help="Show or change the CLI's config file.", no_args_is_help=True)


@config_app.command("set")
def config_set(
    key: Annotated[ConfigKey, typer.Argument(help="What to set.")],
    value: Annotated[str, typer.Argument(help="The new value.")],
) -> None:
    """Set the server URL or the default project in the config file."""
    from gpupool.client.config import (
        ClientConfig,
        check_project_name,
        config_path,
        normalize_server,
        read_config,
        write_config,
    )

    with handled():
        path = config_path()
        saved = read_config(path)
        if key == ConfigKey.SERVER:
            saved = ClientConfig(normalize_server(value), saved.token, saved.project)
        else:
            saved = ClientConfig(saved.server, saved.token, check_project_name(value))
        write_config(saved, path)
    stdout().print(f"{key} = {escape(value)} (in {path})")


@config_app.command("show")
def config_show(json_output: JsonOption = False) -> None:
    """Show the config in effect: the file's values, with the GPUPOOL_* variables on top."""
    from gpupool.client.config import ENV_OVERRIDES, config_path, effective_config

    with handled():
        config = effective_config()
    token = config.token and f"{config.token[:6]}… ({len(config.token)} characters)"
    values = {"server": config.server, "token": token, "project": config.project}
    if json_output:
        typer.echo(json.dumps({"path": str(config_path()), **values}, indent=2))
        return
    console = stdout()
    console.print(f"config file: {config_path()}")
    for key, value in values.items():
        source = f"  (from {ENV_OVERRIDES[key]})" if os.environ.get(ENV_OVERRIDES[key]) else ""
        console.print(f"{key}: {escape(value or '-')}{source}")


# -- workloads ----------------------------------------------------------------------------------


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
        from gpupool.cli.usage import parse_duration_s

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


# -- cluster views ------------------------------------------------------------------------------


def projects(
    departments: Annotated[
        bool, typer.Option("--departments", help="List the departments instead.")
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Projects: quota, fair share, holding, demand, limit, weight and priority (GPUs)."""
    with connect() as client:
        rows = client.departments() if departments else client.projects()
    show(rows, json_output, lambda: project_table(rows))


def nodes(json_output: JsonOption = False) -> None:
    """Nodes: GPUs, allocated, model and state."""
    with connect() as client:
        rows = client.nodes()

    def render() -> Table:
        view = table("NODE", "STATE", "GPUS>", "ALLOCATED>", "MODEL", "MEMORY/GPU>", "EXECUTOR")
        for n in rows:
            memory = memory_text(n.gpu_memory_mib)
            model = n.gpu_model or "-"
            allocated = gpus(n.allocated_gpu_milli)
            view.add_row(n.name, n.state, str(n.gpu_count), allocated, model, memory, n.executor)
        return view

    show(rows, json_output, render)


def top(
    watch_s: Annotated[
        float | None,
        typer.Option("--watch", min=0.1, metavar="SECONDS", help="Refresh every SECONDS."),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Live GPU allocation by project and by node; --watch refreshes until Ctrl-C."""
    with connect() as client:
        snapshot = client.top()
        if watch_s is None:
            show(snapshot, json_output, lambda: top_view(snapshot))
        elif json_output:  # one JSON document per line
            while True:
                typer.echo(snapshot.model_dump_json())
                time.sleep(watch_s)
                snapshot = client.top()
        else:
            from rich.live import Live

            with Live(top_view(snapshot), console=stdout(), auto_refresh=False) as live:
                while True:
                    time.sleep(watch_s)
                    live.update(top_view(client.top()), refresh=True)


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


# -- admin --------------------------------------------------------------------------------------

project_app = typer.Typer(help="Create, change or delete projects (admin).", no_args_is_help=True)
department_app = typer.Typer(help="Create departments (admin).", no_args_is_help=True)

QuotaOption = Annotated[str | None, typer.Option(metavar="GPUS", help="Guaranteed GPUs (4, 2.5).")]
WeightOption = Annotated[int | None, typer.Option(help="Over-quota weight (default 1).")]
LimitOption = Annotated[str | None, typer.Option(metavar="GPUS", help="At most this many GPUs.")]
NoLimitOption = Annotated[bool, typer.Option("--no-limit", help="Remove the limit.")]
MinRuntimeOption = Annotated[
    int | None, typer.Option("--min-runtime", metavar="SECONDS", help="Not preempted before.")
]
PriorityOption = Annotated[int | None, typer.Option(help="Over-quota priority (default 0).")]


def _policy_fields(
    quota_gpu: str | None, weight: int | None, limit_gpu: str | None, priority: int | None
) -> dict[str, object]:
    """The given fields of a project or department body (a field not given is left out)."""
    fields: dict[str, object] = {
        "quota": None if quota_gpu is None else {"gpu": quota_gpu},
        "over_quota_weight": weight,
        "limit": None if limit_gpu is None else {"gpu": limit_gpu},
        "priority": priority,
    }
    return {key: value for key, value in fields.items() if value is not None}


def _patch(fields: dict[str, object], no_limit: bool) -> ProjectPatch:
    from gpupool.api.schemas import ProjectPatch

    if no_limit:
        if "limit" in fields:
            fail("give --limit-gpu or --no-limit, not both")
        fields["limit"] = None
    if not fields:
        fail("nothing to change: give at least one of the options (see --help)")
    with handled():
        return ProjectPatch.model_validate(fields)


@project_app.command("create")
def project_create(
    name: Annotated[str, typer.Argument(help="Project name.")],
    department: Annotated[str | None, typer.Option(help="Parent department.")] = None,
    quota_gpu: QuotaOption = None,
    weight: WeightOption = None,
    limit_gpu: LimitOption = None,
    priority: PriorityOption = None,
    min_runtime_s: MinRuntimeOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create a project."""
    from gpupool.api.schemas import ProjectIn

    fields = _policy_fields(quota_gpu, weight, limit_gpu, priority)
    extra = {"department": department, "min_runtime_s": min_runtime_s}
    fields |= {key: value for key, value in extra.items() if value is not None}
    with handled():
        spec = ProjectIn.model_validate({"name": name} | fields)
    with connect() as client:
        created = client.create_project(spec)
    show(created, json_output, lambda: project_table([created]))


@project_app.command("set")
def project_set(
    name: Annotated[str, typer.Argument(help="Project name.")],
    quota_gpu: QuotaOption = None,
    weight: WeightOption = None,
    limit_gpu: LimitOption = None,
    no_limit: NoLimitOption = False,
    priority: PriorityOption = None,
    min_runtime_s: MinRuntimeOption = None,
    json_output: JsonOption = False,
) -> None:
    """Change a project's quota, weight, limit or priority; other fields keep their values."""
    fields = _policy_fields(quota_gpu, weight, limit_gpu, priority)
    if min_runtime_s is not None:
        fields["min_runtime_s"] = min_runtime_s
    patch = _patch(fields, no_limit)
    with connect() as client:
        changed = client.update_project(name, patch)
    show(changed, json_output, lambda: project_table([changed]))


@project_app.command("delete")
def project_delete(name: Annotated[str, typer.Argument(help="Project name.")]) -> None:
    """Delete a project (the server refuses while it has workloads)."""
    with connect() as client:
        client.delete_project(name)
    stdout().print(f"Deleted project {escape(name)}")


@department_app.command("create")
def department_create(
    name: Annotated[str, typer.Argument(help="Department name.")],
    quota_gpu: QuotaOption = None,
    weight: WeightOption = None,
    limit_gpu: LimitOption = None,
    priority: PriorityOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create a department (projects join it with `project create --department`)."""
    from gpupool.api.schemas import DepartmentIn

    fields = _policy_fields(quota_gpu, weight, limit_gpu, priority)
    with handled():
        spec = DepartmentIn.model_validate({"name": name} | fields)
    with connect() as client:
        created = client.create_department(spec)
    show(created, json_output, lambda: project_table([created]))


def register(app: typer.Typer) -> None:
    """Add the server commands to the `gpupool` app."""
    panel = "Cluster"
    app.command("login", rich_help_panel=panel)(login)
    app.add_typer(config_app, name="config", rich_help_panel=panel)
    from gpupool.cli.submit import SubmitCommand, submit

    app.command("submit", cls=SubmitCommand, rich_help_panel=panel)(submit)
    app.command("list", rich_help_panel=panel)(list_workloads)
    app.command("describe", rich_help_panel=panel)(describe)
    app.command("logs", rich_help_panel=panel)(logs)
    for verb, action, doc in [
        ("suspend", _suspend, "Suspend a workload until `gpupool resume`."),
        ("resume", _resume, "Resume a suspended workload."),
        ("delete", _delete, "Delete a workload (it stops its tasks first)."),
    ]:  # fmt: skip
        app.command(verb, rich_help_panel=panel)(_workload_action(action, doc))
    app.command("projects", rich_help_panel=panel)(projects)
    app.command("nodes", rich_help_panel=panel)(nodes)
    app.command("top", rich_help_panel=panel)(top)
    from gpupool.cli.usage import usage  # it builds on this module's helpers

    app.command("usage", rich_help_panel=panel)(usage)
    from gpupool.cli.events import events

    app.command("events", rich_help_panel=panel)(events)
    admin = "Cluster admin"
    app.add_typer(project_app, name="project", rich_help_panel=admin)
    app.add_typer(department_app, name="department", rich_help_panel=admin)
    from gpupool.cli.users import token_app, user_app

    app.add_typer(user_app, name="user", rich_help_panel=admin)
    app.add_typer(token_app, name="token", rich_help_panel=admin)
