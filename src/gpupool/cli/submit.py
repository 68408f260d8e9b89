"""`gpupool submit`: options, an env file and a workload file (`-f job.yaml`) into one request.

What the command line gives wins over the file; `env` and `node_selector` merge key by key. A
workload must have something to run: a command (after `--`), else an image (Kubernetes runs the
image's own command), else a duration (simulated nodes); with none of them it is refused
before any request (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand

from gpupool.api.enums import WorkloadType
from gpupool.cli.common import (
    JsonOption,
    ProjectOption,
    connect,
    fail,
    handled,
    show,
)
from gpupool.cli.usage import parse_duration_s

if TYPE_CHECKING:
    from gpupool.userfiles import KeyPath, YamlDocument

__all__ = ["FILE_KEYS", "SubmitCommand", "parse_cpu_milli", "read_env_file", "submit"]

AFTER_DASHES = "gpupool.submit.after_dashes"
MAX_CPU_MILLI = 2**31 - 1

NO_COMMAND = (
    "nothing to run: give the command after `--`, like "
    "`gpupool submit job1 --gpu 1 -- python train.py` (or `command:` in the -f file). "
    "Without a command, --image IMAGE runs the image's own command (Kubernetes) and "
    "--duration SECONDS is enough on simulated nodes"
)

FILE_KEYS: dict[str, str] = {
    # key in a workload file (and the long option) -> field of WorkloadIn
    "name": "name",
    "project": "project",
    "type": "type",
    "gpu": "gpu",
    "gpu_memory": "gpu_memory",
    "gpu_limit": "gpu_limit",
    "tasks": "tasks",
    "min_available": "min_available",
    "priority": "priority",
    "preemptible": "preemptible",
    "cpu": "cpu_milli",
    "memory": "memory",
    "node_selector": "node_selector",
    "env": "env",
    "env_file": "env",
    "working_dir": "working_dir",
    "duration": "duration_s",
    "grace_period": "grace_period_s",
    "min_runtime": "min_runtime_s",
    "image": "image",
    "command": "command",
}
"""Every key a workload file may have; `-` and `_` are the same (`gpu-memory`, `gpu_memory`)."""


class SubmitCommand(TyperCommand):
    """Remembers what came after `--`, so that `submit -f job.yaml -- python x` does not take
    `python` for the workload's name."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own click.Context
        ctx.meta[AFTER_DASHES] = args[args.index("--") + 1 :] if "--" in args else None
        return super().parse_args(ctx, args)


def parse_min_runtime_s(value: object, where: str = "--min-runtime") -> int:
    """`600`, `10m`, `2h` -> whole seconds; a clear error otherwise."""
    text = str(value).strip()
    try:
        seconds = float(text) if text.replace(".", "", 1).isdigit() else None
        if seconds is None:
            seconds = parse_duration_s(text, where)
    except ValueError as error:
        fail(str(error))
    return round(seconds)


def parse_cpu_milli(value: object, where: str = "--cpu") -> int:
    """CPU cores as a user writes them, in millicores: `4` -> 4000, `0.5` -> 500, `250m` -> 250."""
    text = str(value).strip()
    if isinstance(value, bool) or not text:
        fail(f"{where} takes CPU cores like 4, 0.5 or 250m (got {value!r})")
    try:
        milli = Decimal(text[:-1]) if text.endswith("m") else Decimal(text) * 1000
    except InvalidOperation:
        fail(f"{where} takes CPU cores like 4, 0.5 or 250m (got {value!r})")
    if not milli.is_finite() or milli <= 0 or milli != milli.to_integral_value():
        fail(f"{where} must be more than 0 in whole millicores, like 4, 0.5 or 250m (got {text})")
    if milli > MAX_CPU_MILLI:
        fail(f"{where} must be at most {MAX_CPU_MILLI // 1000} cores (got {text})")
    return int(milli)


def read_env_file(path: Path) -> dict[str, str]:
    """`KEY=VALUE` lines; blank lines and `# comments` are skipped, an `export ` before the key
    and one pair of quotes around the value are dropped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        fail(f"cannot read the env file {path}: {error.strerror}")
    except UnicodeDecodeError:
        fail(f"the env file {path} is not UTF-8 text")
    variables: dict[str, str] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.removeprefix("export ").partition("=")
        if not equals or not key.strip():
            fail(f"{path}:{number}: expected KEY=VALUE (got {raw!r}); start comments with #")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        variables[key.strip()] = value
    return variables


def _pairs(items: list[str], option: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        key, equals, value = item.partition("=")
        if not equals or not key:
            fail(f"{option} takes KEY=VALUE (got {item!r})")
        pairs.append((key, value))
    return pairs


@dataclass(frozen=True, slots=True)
class WorkloadFile:
    fields: dict[str, Any]
    """WorkloadIn's fields, as the file gives them."""
    where: dict[str, str]
    """`file:line: key` of each field, for WorkloadIn's errors about a value from the file."""


def load_workload_file(path: Path) -> WorkloadFile:
    """A workload file's fields as WorkloadIn's, checked for unknown keys and shapes; a problem
    is shown as `file:line: key: message` (exit 2)."""
    from gpupool.userfiles import UserFileError  # only a workload file needs YAML

    try:
        return read_workload_file(path)
    except UserFileError as error:
        fail(error.explain())


def read_workload_file(path: Path) -> WorkloadFile:
    """The file at `path`; `UserFileError` naming the file, line and key if it is wrong."""
    from gpupool.userfiles import read_text, read_yaml, unknown_key

    document = read_yaml(read_text(path, kind="a workload file"), str(path))
    data = document.data
    if not isinstance(data, Mapping):
        raise document.error(
            (), "must be one YAML mapping like `name: job1`, `gpu: 1`, `command: [python]`"
        )
    fields: dict[str, Any] = {}
    env: dict[str, str] = {}
    found: dict[str, str] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        loc = (raw_key,)
        where = f"{path}:{document.lines.of(loc)}: {raw_key}"
        if key not in FILE_KEYS:
            raise document.error(loc, unknown_key(str(raw_key), list(FILE_KEYS)))
        found[FILE_KEYS[key]] = where
        if key == "command":
            if not isinstance(value, list):
                raise document.error(loc, "must be a list, like command: [python, train.py]")
            fields["command"] = [_scalar(document, (*loc, i), v) for i, v in enumerate(value)]
        elif key == "env":
            if not isinstance(value, Mapping):
                raise document.error(loc, "must be a mapping, like env: {SEED: '1'}")
            env |= {str(k): _scalar(document, (*loc, k), v) for k, v in value.items()}
        elif key == "env_file":
            env = read_env_file(path.parent / str(value)) | env
        elif key == "cpu":
            fields["cpu_milli"] = parse_cpu_milli(value, where)
        elif key == "node_selector":
            fields["node_selector"] = _selector(document, loc, value)
        elif key == "min_runtime" and value is not None:
            fields["min_runtime_s"] = parse_min_runtime_s(value, where)
        elif key == "working_dir" and value is not None:
            fields["working_dir"] = os.path.abspath(path.parent / str(value))
        elif value is not None:
            fields[FILE_KEYS[key]] = value
    if env:
        fields["env"] = env
    return WorkloadFile(fields, found)


def _invalid(body: Any, where: Mapping[str, str]) -> str:
    """The 422 detail for WorkloadIn's errors, with `file:line: key` for a value from the file."""
    parts = []
    for detail in body.errors:
        field = detail.field or ""
        top, dot, rest = field.partition(".")
        if top in where:
            parts.append(f"{where[top]}{dot}{rest}: {detail.message}")
        else:
            parts.append(f"{field}: {detail.message}" if field else detail.message)
    return "invalid request: " + "; ".join(parts)


def _selector(document: YamlDocument, loc: KeyPath, raw: object) -> dict[str, list[str]]:
    """A node selector from a file: `label: value` or `label: [value, ...]`."""
    if not isinstance(raw, Mapping):
        raise document.error(loc, "must be a mapping like {zone: eu-1}")
    selector = {}
    for key, value in raw.items():
        values = value if isinstance(value, list) else [value]
        selector[str(key)] = [_scalar(document, (*loc, key), v) for v in values]
    return selector


def _scalar(document: YamlDocument, loc: KeyPath, value: object) -> str:
    from gpupool.userfiles import yaml_kind

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise document.error(loc, f"must be a string or a number (got a {yaml_kind(value)})")


def submit(
    ctx: typer.Context,
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="The workload's name (or `name:` in the -f file)."),
    ] = None,
    command: Annotated[
        list[str] | None,
        typer.Argument(metavar="-- COMMAND", help="The command each task runs, after `--`."),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", "-f", metavar="FILE", help="A YAML workload file; options override it."
        ),
    ] = None,
    project: ProjectOption = None,
    type_: Annotated[
        WorkloadType | None, typer.Option("--type", help="Workload type (default train).")
    ] = None,
    gpu: Annotated[
        str | None, typer.Option(help="GPUs per task: whole devices (1, 2) or a fraction (0.5).")
    ] = None,
    gpu_memory: Annotated[
        str | None, typer.Option(help="GPU memory per task instead of --gpu, like 8G.")
    ] = None,
    gpu_limit: Annotated[
        str | None, typer.Option(help="A fraction may burst up to this while it is idle (0.8).")
    ] = None,
    tasks: Annotated[int | None, typer.Option(help="Number of tasks (default 1).")] = None,
    min_available: Annotated[
        int | None, typer.Option(help="Tasks that must start together (a gang).")
    ] = None,
    priority: Annotated[int | None, typer.Option(help="Priority inside the project.")] = None,
    min_runtime: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Not preempted before it has run this long: 600, 10m, 2h (default: the "
            "project's).",
        ),
    ] = None,
    preemptible: Annotated[
        bool | None,
        typer.Option("--preemptible/--non-preemptible", help="Default: by type."),
    ] = None,
    cpu: Annotated[
        str | None, typer.Option(metavar="CORES", help="CPU cores per task: 4, 0.5 or 250m.")
    ] = None,
    memory: Annotated[
        str | None, typer.Option(metavar="SIZE", help="Memory per task: 16G or 512M.")
    ] = None,
    node_selector: Annotated[
        list[str] | None,
        typer.Option(
            metavar="LABEL=VALUE",
            help="Only nodes with this label value; repeatable (same label: any of the values).",
        ),
    ] = None,
    duration_s: Annotated[
        float | None,
        typer.Option("--duration", metavar="SECONDS", help="Simulated nodes: how long tasks run."),
    ] = None,
    grace_period_s: Annotated[
        int | None,
        typer.Option("--grace-period", metavar="SECONDS", help="Time to stop before a kill."),
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", metavar="K=V", help="Repeatable.")
    ] = None,
    env_file: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="KEY=VALUE lines (# comments); --env wins over it."),
    ] = None,
    working_dir: Annotated[
        str | None,
        typer.Option(metavar="DIR", help="Local nodes: where it runs (default: this directory)."),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(help="Container image (Kubernetes; default: the server's default image)."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Say where it would run now, or why it would wait; submit nothing."
        ),
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Submit a workload: `gpupool submit job1 --gpu 1 -- python train.py --lr 0.1`."""
    from pydantic import ValidationError

    from gpupool.api import schemas

    after_dashes = ctx.meta.get(AFTER_DASHES)
    positional = ([] if name is None else [name]) + (command or [])
    if after_dashes is not None and len(positional) == len(after_dashes):
        name, command = None, after_dashes  # no NAME before `--`: all of it is the command
    from_file = load_workload_file(file) if file is not None else WorkloadFile({}, {})
    spec = from_file.fields

    variables = dict(spec.get("env", {}))
    if env_file is not None:
        variables |= read_env_file(env_file)
    variables |= dict(_pairs(env or [], "--env"))
    selector = dict(spec.get("node_selector", {}))
    chosen: dict[str, list[str]] = {}
    for key, value in _pairs(node_selector or [], "--node-selector"):
        chosen.setdefault(key, []).extend(value.split(","))
    selector |= chosen

    given: dict[str, object] = {
        "name": name,
        "project": project,
        "type": None if type_ is None else schemas.WorkloadType(type_),
        "gpu": gpu,
        "gpu_memory": gpu_memory,
        "gpu_limit": gpu_limit,
        "tasks": tasks,
        "min_available": min_available,
        "priority": priority,
        "min_runtime_s": None if min_runtime is None else parse_min_runtime_s(min_runtime),
        "preemptible": preemptible,
        "cpu_milli": None if cpu is None else parse_cpu_milli(cpu),
        "memory": memory,
        "duration_s": duration_s,
        "grace_period_s": grace_period_s,
        "image": image,
        "working_dir": None if working_dir is None else os.path.abspath(working_dir),
        "command": command or None,
        "env": variables or None,
        "node_selector": selector or None,
    }
    if gpu_memory is not None:
        spec.pop("gpu", None)  # the command line's choice of gpu or gpu_memory wins
    if gpu is not None:
        spec.pop("gpu_memory", None)
    fields = spec | {key: value for key, value in given.items() if value is not None}
    in_file = {k: v for k, v in from_file.where.items() if k in spec and given.get(k) is None}
    if "name" not in fields:
        fail("no workload name: give it first, `gpupool submit NAME ...`, or `name:` in the file")
    if "project" not in fields:
        with handled():
            from gpupool.client.config import effective_config

            fields["project"] = effective_config().project
        if not fields["project"]:
            fail(
                "no project given: pass --project NAME, or set a default with "
                "`gpupool config set project NAME`"
            )
    runnable = fields.get("command") or fields.get("image") or fields.get("duration_s")
    try:
        workload = schemas.WorkloadIn.model_validate(fields)
    except ValidationError as error:
        problems = error.errors()
        if not runnable:
            problems.append({"loc": ("command",), "msg": NO_COMMAND})  # type: ignore[typeddict-item]
        body = schemas.validation_error_out(problems)
        fail(_invalid(body, in_file), body.errors)
    if not runnable:
        fail(NO_COMMAND)
    if "working_dir" not in fields and not _server_isolates_tasks():
        # Checked after the input (a mistake costs no request), validated like the rest.
        try:
            workload = schemas.WorkloadIn.model_validate({**fields, "working_dir": os.getcwd()})
        except ValidationError as error:
            body = schemas.validation_error_out(error.errors())
            fail(body.detail, body.errors)
    if dry_run:
        with connect() as client:
            answer = client.dry_run(workload)
        said = f"Dry run {answer.project}/{answer.name}: {answer.reason} (nothing submitted)"
        show(answer, json_output, lambda: said)
        return
    with connect() as client:
        submitted = client.submit(workload)

    def render() -> str:
        text = f"Submitted {submitted.project}/{submitted.name}: {submitted.status}"
        return text + (f" ({submitted.pending_reason})" if submitted.pending_reason else "")

    show(submitted, json_output, render)


def _server_isolates_tasks() -> bool:
    """Whether the server sandboxes local tasks: then a task runs in its own directory unless
    a working directory is given (the current one is rarely under an allowed task root)."""
    with connect() as client:
        return client.health().task_isolation not in (None, "none")
