"""What every `gpupool` command that talks to a server shares: exit codes and error lines, the
connection, output formats (`--json`, `-o`), tables and how cells are written.

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
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpupool.cli.terminal import output_console
from gpupool.sim.durations import format_duration_s

if TYPE_CHECKING:
    # Only annotations name these here: pydantic, the API's models and httpx load when a command
    # talks to a server, not at every start of the CLI (see tests/client/test_cli_startup.py).
    from pydantic import BaseModel, ValidationError

    from gpupool.api.schemas import Amounts, ErrorDetail, WorkloadOut
    from gpupool.client.http import ApiError, GpupoolClient

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


# -- options of several commands ---------------------------------------------------------------

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
