"""`gpupool bench packing`, the FGD paper's protocol, on one pod list or (`--all`) on every openb
variant against the FGD artifact's published curves. `gpupool.cli.bench` declares the command
and imports this module when it runs: the simulator and the scheduling core load only then."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from gpupool.cli.bench import ALL_POLICIES
from gpupool.cli.bench_packing_all import packing_all
from gpupool.cli.terminal import output_console
from gpupool.core.packing import PackNode, PolicyName
from gpupool.core.policies import policy_names
from gpupool.sim.fgd_refs import PUBLISHED_SEEDS, VARIANTS
from gpupool.sim.openb import (
    DEFAULT_POD_LIST_FILE,
    GPU_NODE_LIST_FILE,
    TraceError,
    TracePod,
    default_data_dir,
    load_nodes,
    load_pods,
)
from gpupool.sim.packing import PackingRun, pack_nodes, parse_policy, run_offline, run_packing
from gpupool.sim.packing_report import PolicySummary, summarise, summary_json, write_curves_svg

__all__ = ["run_packing_command"]

POLICY_ORDER = tuple(PolicyName)


def _policies(value: str) -> list[str]:
    """Registered policy names (`binpack`, `fgd`, `default`, ...), each optionally `@K`: placed
    by the scheduling cycle's placer scoring K candidates, as the server does; or `all` (the
    FGD paper's policies and ours)."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    if names == ["all"]:
        return [str(p) for p in POLICY_ORDER]
    chosen: list[str] = []
    for name in names:
        try:
            base, candidates = parse_policy(name)
        except ValueError as error:
            raise typer.BadParameter(
                f"{error} (NAME@16 places as the server does; 'all' for the paper's policies)"
            ) from None
        chosen.append(base if candidates is None else f"{base}@{candidates}")
    if not chosen:
        raise typer.BadParameter("name at least one policy: " + ", ".join(policy_names()))
    return list(dict.fromkeys(chosen))


def _seeds(value: str) -> list[int]:
    try:
        seeds = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not a comma-separated list of integers, e.g. 42,43"
        ) from None
    if not seeds:
        raise typer.BadParameter("name at least one seed, e.g. --seeds 42")
    return list(dict.fromkeys(seeds))


def _variants(value: str) -> list[str]:
    names = list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if not names:
        raise typer.BadParameter("name at least one variant, e.g. --variants default,cpu050")
    return names


def run_packing_command(
    *,
    nodes_file: Path | None,
    pods_file: Path | None,
    policy: str | None,
    seeds: str | None,
    inflation: float,
    offline: bool | None,
    json_output: bool,
    plot: Path,
    all_variants: bool,
    variants: str | None,
    data_dir: Path | None,
    refs_dir: Path | None,
    out_dir: Path,
    jobs: int | None,
) -> None:
    """`gpupool bench packing` (`gpupool.cli.bench` declares its options)."""
    if not 0.5 <= inflation <= 3.0:
        raise typer.BadParameter(f"{inflation} is outside 0.5..3.0", param_hint="--inflation")
    console = Console(stderr=True, highlight=False)
    if all_variants:
        packing_all(
            nodes_file=nodes_file,
            pods_file=pods_file,
            policies=_policies(policy or ",".join(ALL_POLICIES)),
            seed_list=_seeds(seeds) if seeds is not None else list(PUBLISHED_SEEDS),
            inflation=inflation,
            offline=True if offline is None else offline,
            json_output=json_output,
            variant_names=_variants(variants) if variants is not None else list(VARIANTS),
            data_dir=data_dir,
            refs_dir=refs_dir,
            out_dir=out_dir,
            jobs=jobs or os.cpu_count() or 1,
            console=console,
        )
        return
    for name, value in (
        ("--variants", variants),
        ("--data", data_dir),
        ("--refs", refs_dir),
        ("--jobs", jobs),
    ):
        if value is not None:
            raise typer.BadParameter(f"{name} goes with --all")
    chosen = _policies(policy or str(PolicyName.DEFAULT))
    seed_list = _seeds(seeds or "42")
    try:
        data = default_data_dir() if nodes_file is None or pods_file is None else None
        nodes = pack_nodes(load_nodes(nodes_file or _in(data, GPU_NODE_LIST_FILE)))
        pods = load_pods(pods_file or _in(data, DEFAULT_POD_LIST_FILE))
    except (TraceError, OSError) as error:
        console.print(f"[red]error:[/red] {escape(str(error))}")
        raise typer.Exit(2) from None
    if not nodes:
        console.print("[red]error:[/red] the node list has no GPU node to pack onto")
        raise typer.Exit(2)
    try:
        offline_runs = (
            [run_offline(nodes, pods, seed, inflation) for seed in seed_list] if offline else []
        )
        runs = _run_all(nodes, pods, chosen, seed_list, inflation, console, quiet=json_output)
    except ValueError as error:
        console.print(f"[red]error:[/red] {escape(str(error))}")
        raise typer.Exit(2) from None
    summaries = [summarise(runs[p], offline_runs) for p in runs]
    if json_output:
        documents = [summary_json(s) for s in summaries]
        typer.echo(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
        return
    out = output_console()
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
    policies: list[str],
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
