"""The `gpupool` command: one Typer app, one sub-command per task (`what-if`, `simulate`, and
the commands that talk to a server, registered by `gpupool.cli.cluster`)."""

from __future__ import annotations

import dataclasses
import json
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

import gpupool
from gpupool.cli.bench import bench_app
from gpupool.cli.cluster import register as register_cluster_commands
from gpupool.cli.server_cmd import register as register_server
from gpupool.cli.terminal import output_console
from gpupool.cli.up import register as register_up
from gpupool.sim.choices import Policy

if TYPE_CHECKING:
    # The simulator, what-if and the scheduling core load inside the commands that run them:
    # every start of the CLI (`gpupool list`, `--help`) would pay for them otherwise.
    from gpupool.sim.engine import ProgressFunction
    from gpupool.whatif.report import FileOutcome
    from gpupool.whatif.runner import CycleFunction

app = typer.Typer(
    name="gpupool",
    help="Pool the GPUs of many machines and share them by policy.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


app.add_typer(bench_app, name="bench")
register_cluster_commands(app)


def _print_version(value: bool) -> None:
    if value:
        from gpupool.corebuild import core_build  # the core loads only when asked

        typer.echo(f"gpupool {gpupool.__version__} (scheduling core: {core_build()})")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Pool the GPUs of many machines and share them by policy."""


def run_file(
    path: Path, cycle: CycleFunction | None = None, placement: str | None = None
) -> FileOutcome:
    """Load and run one scenario file; malformed files and scheduler errors become outcomes.
    `placement` replaces the file's placement policy."""
    from gpupool.userfiles import UserFileError
    from gpupool.whatif.loader import load_scenario
    from gpupool.whatif.report import FileOutcome
    from gpupool.whatif.runner import run_scenario

    shown = str(path)
    try:
        scenario = load_scenario(path)
    except UserFileError as error:
        return FileOutcome(shown, error=error)
    if placement is not None:
        scenario = dataclasses.replace(
            scenario, settings=dataclasses.replace(scenario.settings, placement=placement)
        )
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
    placement: Annotated[
        str | None,
        typer.Option(
            "--placement",
            help="Run under this placement policy instead of each file's (what would it change?).",
        ),
    ] = None,
) -> None:
    """Run scenario files through the scheduler and check their expectations.

    Exit status: 0 every expectation holds, 1 an expectation failed,
    2 a file is malformed (wins over 1), 3 the scheduler itself raised an error (a bug).
    """
    from gpupool.core.policies import canonical_name
    from gpupool.whatif.report import outcome_json, print_outcomes

    if placement is not None:
        try:
            placement = canonical_name(placement)
        except ValueError as error:
            typer.secho(f"error: {error}", fg="red", err=True)
            raise typer.Exit(2) from None
    outcomes = [run_file(path, placement=placement) for path in files]
    if json_output:
        typer.echo(json.dumps([outcome_json(o) for o in outcomes], indent=2))
    else:
        print_outcomes(Console(highlight=False), outcomes)
    code = max((o.exit_code for o in outcomes), default=0)
    if code:
        raise typer.Exit(code)


DEFAULT_REPORT = Path("gpupool-report.html")
DEFAULT_WEEKS = 4
DEFAULT_SEED = 1


@app.command("simulate")
def simulate(
    workload: Annotated[
        Path | None,
        typer.Option(
            "--workload", metavar="FILE", help="Workload file (.jsonl or .csv) to simulate."
        ),
    ] = None,
    synthetic: Annotated[
        bool,
        typer.Option("--synthetic", help="Simulate the synthetic lab workload (the default)."),
    ] = False,
    cluster_file: Annotated[
        Path | None,
        typer.Option(
            "--cluster",
            metavar="FILE",
            help="Cluster file (YAML nodes + projects); default 4 nodes x 8 GPUs, 4 projects.",
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help=f"Synthetic: random seed (default {DEFAULT_SEED}).")
    ] = None,
    weeks: Annotated[
        int | None,
        typer.Option("--weeks", min=1, help=f"Synthetic: weeks of work (default {DEFAULT_WEEKS})."),
    ] = None,
    policies: Annotated[
        list[Policy] | None,
        typer.Option(
            "--policy",
            help="Policy to simulate; repeat to compare (default: static and guaranteed).",
        ),
    ] = None,
    placement: Annotated[
        str,
        typer.Option(
            "--placement",
            help="Placement policy, as the server's --placement (default: the server's default).",
        ),
    ] = "default",
    checkpoint_interval_s: Annotated[
        int,
        typer.Option(
            "--checkpoint-interval-s",
            min=0,
            help="Workloads checkpoint every N seconds of progress; 0 = never.",
        ),
    ] = 1800,
    min_cycle_interval_s: Annotated[
        int,
        typer.Option(
            "--min-cycle-interval-s",
            min=0,
            help="Run scheduling cycles at most every N simulated seconds; 0 = at every event.",
        ),
    ] = 0,
    out: Annotated[
        Path, typer.Option("--out", metavar="FILE", help="Where to write the HTML report.")
    ] = DEFAULT_REPORT,
    json_path: Annotated[
        str | None,
        typer.Option(
            "--json", metavar="PATH", help="Also write the summary as JSON to PATH ('-': stdout)."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Simulate a workload through the scheduler under each policy and report side by side.

    With no input options: the synthetic workload on the default cluster, static vs guaranteed.
    Exit status: 0 done, 2 bad options or input files (nothing written), 3 a scheduler bug.
    """
    from rich.progress import BarColumn, Progress, TextColumn

    from gpupool.core.model import SchedulerSettings
    from gpupool.core.policies import canonical_name
    from gpupool.sim.cluster import default_cluster, load_cluster
    from gpupool.sim.compare import compare_policies, summary_json
    from gpupool.sim.console import print_summary
    from gpupool.sim.durations import format_duration_s
    from gpupool.sim.engine import EngineSettings
    from gpupool.sim.errors import SimulationError
    from gpupool.sim.synthetic import WEEK_S, generate
    from gpupool.sim.workload import load_workloads
    from gpupool.userfiles import UserFileError

    to_stdout = json_path == "-"
    console = output_console(stderr=to_stdout)
    errors = Console(stderr=True, highlight=False)

    def fail(message: str, code: int = 2) -> NoReturn:
        errors.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
        raise typer.Exit(code)

    if workload is not None and synthetic:
        fail("give either --workload FILE or --synthetic, not both")
    if workload is not None and (seed is not None or weeks is not None):
        fail("--seed and --weeks apply to --synthetic only, not to --workload")
    try:
        cluster = default_cluster() if cluster_file is None else load_cluster(cluster_file)
        if workload is not None:
            names = [p.name for p in cluster.leaf_projects]
            workloads = load_workloads(workload, names)
            source, window_s = str(workload), None
        else:
            seed = DEFAULT_SEED if seed is None else seed
            weeks = DEFAULT_WEEKS if weeks is None else weeks
            workloads = generate(seed, weeks, cluster)
            plural = "s" if weeks > 1 else ""
            source = f"synthetic (seed {seed}, {weeks} week{plural})"
            window_s = weeks * WEEK_S
    except UserFileError as error:
        fail(error.explain())
    except ValueError as error:
        fail(str(error))
    try:
        scheduler = SchedulerSettings(placement=canonical_name(placement))
    except ValueError as error:
        fail(str(error))
    settings = EngineSettings(
        checkpoint_interval_s=checkpoint_interval_s,
        min_cycle_interval_s=min_cycle_interval_s,
        scheduler=scheduler,
    )
    chosen = list(dict.fromkeys(policies or [Policy.STATIC, Policy.GUARANTEED]))
    estimate_s = max(w.submit_s + w.duration_s for w in workloads)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[done]} of ~{task.fields[estimate]} simulated"),
        console=errors,
        disable=quiet or not errors.is_terminal,
        transient=True,
    )

    def progress(policy: Policy) -> ProgressFunction:
        task = bar.add_task(
            policy.value, total=estimate_s, done="0 s", estimate=format_duration_s(estimate_s)
        )

        def report(now_s: int) -> None:
            total = max(now_s, estimate_s)  # the estimate is a lower bound: work may queue
            bar.update(
                task,
                total=total,
                completed=now_s,
                done=format_duration_s(now_s),
                estimate=format_duration_s(total),
            )

        return report

    try:
        with bar:
            comparison = compare_policies(
                cluster,
                workloads,
                chosen,
                settings,
                source=source,
                window_s=window_s,
                progress=progress,
            )
    except SimulationError as error:
        fail(f"the scheduler did something the simulator cannot carry out (a bug): {error}", 3)
    from gpupool.sim.report import render_html  # matplotlib loads only for this command

    page = render_html(comparison)
    summary = json.dumps(summary_json(comparison), indent=2)
    outputs = {out: page}
    if json_path is not None and not to_stdout:
        outputs[Path(json_path)] = summary + "\n"
    try:
        _write_all(outputs)
    except OSError as error:
        fail(f"cannot write the output: {error}")
    print_summary(console, comparison)
    console.print(f"Report written to {out.resolve()}", soft_wrap=True)
    if json_path is not None and not to_stdout:
        console.print(f"JSON summary written to {Path(json_path).resolve()}", soft_wrap=True)
    if to_stdout:
        typer.echo(summary)


def _write_all(outputs: dict[Path, str]) -> None:
    """Write every file or none: all to temporary files first, then rename them into place.

    A path that is there and is not a regular file (`/dev/null`, `/dev/stdout`, a pipe) is
    written to, never renamed over: a rename would replace the device with a file (as root,
    `--json /dev/null` once broke /dev/null for the whole machine)."""
    staged: list[tuple[Path, Path]] = []
    direct = {p: t for p, t in outputs.items() if p.exists() and not p.is_file()}
    try:
        for path, text in outputs.items():
            if path in direct:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.tmp")
            temporary.write_text(text, encoding="utf-8")
            staged.append((temporary, path))
    except OSError:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
        raise
    for temporary, path in staged:
        temporary.replace(path)
    for path, text in direct.items():
        with path.open("w", encoding="utf-8") as stream:
            stream.write(text)


register_server(app)
register_up(app)
