"""`gpupool bench ...`: reproducible measurements. Today: `packing`, the FGD paper's protocol."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from gpupool.core.packing import PackNode, PolicyName
from gpupool.sim.openb import (
    DEFAULT_POD_LIST_FILE,
    GPU_NODE_LIST_FILE,
    TraceError,
    TracePod,
    default_data_dir,
    load_nodes,
    load_pods,
)
from gpupool.sim.packing import PackingRun, pack_nodes, run_offline, run_packing
from gpupool.sim.packing_report import (
    PolicySummary,
    summarise,
    summary_json,
    write_curves_svg,
)

bench_app = typer.Typer(
    help="Reproducible benchmarks of the scheduler's policies.", no_args_is_help=True
)

POLICY_ORDER = tuple(PolicyName)


def _policies(value: str) -> list[PolicyName]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if names == ["all"]:
        return list(POLICY_ORDER)
    known = ", ".join(str(p) for p in POLICY_ORDER)
    chosen: list[PolicyName] = []
    for name in names:
        try:
            chosen.append(PolicyName(name))
        except ValueError:
            raise typer.BadParameter(
                f"unknown policy {name!r}; choose from {known}, or 'all'"
            ) from None
    if not chosen:
        raise typer.BadParameter(f"name at least one policy: {known}, or 'all'")
    return chosen


def _seeds(value: str) -> list[int]:
    try:
        seeds = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not a comma-separated list of integers, e.g. 42,43"
        ) from None
    if not seeds:
        raise typer.BadParameter("name at least one seed, e.g. --seeds 42")
    return seeds


@bench_app.command("packing")
def packing(
    nodes_file: Annotated[
        Path | None,
        typer.Option("--nodes", help=f"Node list CSV (default: data/openb/{GPU_NODE_LIST_FILE})."),
    ] = None,
    pods_file: Annotated[
        Path | None,
        typer.Option("--pods", help=f"Pod list CSV (default: data/openb/{DEFAULT_POD_LIST_FILE})."),
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            help="Policy, a comma-separated list, or 'all': "
            + ", ".join(str(p) for p in POLICY_ORDER),
        ),
    ] = "default",
    seeds: Annotated[str, typer.Option("--seeds", help="Comma-separated seeds.")] = "42",
    inflation: Annotated[
        float,
        typer.Option("--inflation", help="Stop when the pods ask for this x GPU capacity."),
    ] = 1.3,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            help="Also pack each checkpoint's pods with hindsight (slower: ~10 s per seed).",
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    plot: Annotated[
        Path,
        typer.Option("--plot", help="Where to write the curves (SVG) in table mode."),
    ] = Path("gpupool-packing.svg"),
) -> None:
    """Pack the openb trace pod by pod (placed at once or dropped), as in the FGD paper.

    Prints allocated GPU % and fragmentation at 90/95/100/130% arrived, mean over the seeds.
    Exit status 2 on a malformed file or a bad option.
    """
    chosen = _policies(policy)
    seed_list = _seeds(seeds)
    if not 0.5 <= inflation <= 3.0:
        raise typer.BadParameter(f"{inflation} is outside 0.5..3.0", param_hint="--inflation")
    console = Console(stderr=True, highlight=False)
    try:
        data = default_data_dir() if nodes_file is None or pods_file is None else None
        nodes = pack_nodes(load_nodes(nodes_file or _in(data, GPU_NODE_LIST_FILE)))
        pods = load_pods(pods_file or _in(data, DEFAULT_POD_LIST_FILE))
    except (TraceError, OSError) as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None
    if not nodes:
        console.print("[red]error:[/red] the node list has no GPU node to pack onto")
        raise typer.Exit(2)
    try:
        offline_runs = (
            [run_offline(nodes, pods, seed, inflation) for seed in seed_list] if (offline) else []
        )
        runs = _run_all(nodes, pods, chosen, seed_list, inflation, console, quiet=json_output)
    except ValueError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None
    summaries = [summarise(runs[p], offline_runs) for p in runs]
    if json_output:
        documents = [summary_json(s) for s in summaries]
        typer.echo(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
        return
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=160)
    out.print(_table(summaries, len(nodes), len(pods), inflation))
    write_curves_svg(runs, plot)
    out.print(f"curves written to {plot}")


def _in(folder: Path | None, name: str) -> Path:
    if folder is None:
        raise FileNotFoundError(f"no folder to find {name} in")
    return folder / name


def _run_all(
    nodes: Sequence[PackNode],
    pods: Sequence[TracePod],
    policies: list[PolicyName],
    seeds: list[int],
    inflation: float,
    console: Console,
    quiet: bool,
) -> dict[str, list[PackingRun]]:
    runs: dict[str, list[PackingRun]] = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=quiet or not console.is_terminal,
        transient=True,
    ) as progress:
        for name in policies:
            for seed in seeds:
                task = progress.add_task(f"{name} seed {seed}", total=None)

                def advance(done: int, total: int, task_id: TaskID = task) -> None:
                    progress.update(task_id, completed=done, total=total)

                run = run_packing(nodes, pods, name, seed, inflation, advance)
                runs.setdefault(str(name), []).append(run)
                progress.remove_task(task)
    return runs


def _table(summaries: list[PolicySummary], nodes: int, pods: int, inflation: float) -> Table:
    table = Table(
        title=f"Packing: {nodes} GPU nodes, {pods} pods in the list, up to "
        f"{inflation * 100:.0f}% arrived",
        caption="alloc: allocated GPU, % of capacity (mean ± std over seeds); frag: fragmented "
        "share of the idle GPU, %; offline: best hindsight packing found",
    )
    table.add_column("policy")
    points = list(summaries[0].alloc_at)
    for p in points:
        table.add_column(f"alloc@{p}", justify="right")
    for p in points:
        table.add_column(f"frag@{p}", justify="right")
    table.add_column("s / run", justify="right")
    for s in summaries:
        table.add_row(
            s.policy,
            *(f"{s.alloc_at[p]:.2f} ± {s.alloc_std_at[p]:.2f}" for p in points),
            *(f"{s.frag_at[p]:.1f}" for p in points),
            f"{sum(s.seconds) / len(s.seconds):.2f}",
        )
    offline = summaries[0].offline_alloc_at
    if offline is not None:
        table.add_row(
            "offline", *(f"{offline.get(p, 0.0):.2f}" for p in points), *("" for _ in points), ""
        )
    return table
