"""The `gpupool` command: one Typer app, one sub-command per task (`what-if`, more to come)."""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpupool.whatif.loader import ScenarioError, load_scenario
from gpupool.whatif.report import FileOutcome, outcome_json, print_outcomes
from gpupool.whatif.runner import CycleFunction, run_scenario

app = typer.Typer(
    name="gpupool",
    help="Pool the GPUs of many machines and share them by policy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """Pool the GPUs of many machines and share them by policy."""


def run_file(path: Path, cycle: CycleFunction | None = None) -> FileOutcome:
    """Load and run one scenario file; malformed files and scheduler errors become outcomes."""
    shown = str(path)
    try:
        scenario = load_scenario(path)
    except ScenarioError as error:
        return FileOutcome(shown, error=error)
    try:
        result = run_scenario(scenario, cycle)
    except Exception as exc:  # a scheduler bug must not hide the other files' results
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{Path(frame.filename).name}:{frame.lineno}"
        return FileOutcome(shown, internal_error=f"{type(exc).__name__} at {where}: {exc}")
    return FileOutcome(shown, result=result)


@app.command("what-if")
def what_if(
    files: Annotated[
        list[Path],
        typer.Argument(help="Scenario files (format v1) to run.", metavar="FILE"),
    ],
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON document (a list, one entry per file).")
    ] = False,
) -> None:
    """Run scenario files through the scheduler and check their expectations.

    Exit status: 0 every expectation holds, 1 an expectation failed,
    2 a file is malformed (wins over 1), 3 the scheduler itself raised an error (a bug).
    """
    outcomes = [run_file(path) for path in files]
    if json_output:
        typer.echo(json.dumps([outcome_json(o) for o in outcomes], indent=2))
    else:
        print_outcomes(Console(highlight=False), outcomes)
    code = max((o.exit_code for o in outcomes), default=0)
    if code:
        raise typer.Exit(code)
