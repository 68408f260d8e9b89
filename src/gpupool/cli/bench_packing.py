"""`gpupool bench packing`, the FGD paper's protocol, on one pod list or (`--all`) on every openb
variant against the FGD artifact's published curves. `gpupool.cli.bench` declares the command
and imports this module when it runs: the simulator and the scheduling core load only then."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import NoReturn

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
    TimeRemainingColumn,
)
from rich.table import Table

from gpupool.cli.bench import ALL_POLICIES, DEFAULT_INFLATION
from gpupool.cli.terminal import output_console
from gpupool.core.packing import PackNode, PolicyName
from gpupool.core.policies import policy_names
from gpupool.sim.fgd_refs import (
    ALLOC_FILE,
    PUBLISHED_SEEDS,
    VARIANTS,
    PublishedFgd,
    default_refs_dir,
    load_published_fgd,
    pod_list_name,
)
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
from gpupool.sim.packing_report import (
    BOUND_AT,
    JOB_WEIGHT,
    OFFLINE,
    JobResult,
    PackingJob,
    PolicySummary,
    VariantResult,
    matrix_header,
    matrix_json,
    matrix_markdown,
    matrix_rows,
    run_job,
    summarise,
    summary_json,
    variant_results,
    write_curves_svg,
    write_matrix_png,
)

__all__ = ["run_packing_command"]

POLICY_ORDER = tuple(PolicyName)
RESULTS_MD = "results.md"
RESULTS_JSON = "results.json"
CURVES_PNG = "curves.png"


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
        _packing_all(
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


# --- --all: every variant x seeds x policies ---------------------------------------------------


def _packing_all(
    *,
    nodes_file: Path | None,
    pods_file: Path | None,
    policies: list[str],
    seed_list: list[int],
    inflation: float,
    offline: bool,
    json_output: bool,
    variant_names: list[str],
    data_dir: Path | None,
    refs_dir: Path | None,
    out_dir: Path,
    jobs: int,
    console: Console,
) -> None:
    def fail(message: str) -> NoReturn:
        console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
        raise typer.Exit(2)

    if pods_file is not None:
        raise typer.BadParameter("--pods does not go with --all (use --data and --variants)")
    try:
        data = data_dir if data_dir is not None else default_data_dir()
    except FileNotFoundError as error:
        fail(str(error))
    node_list = nodes_file or data / GPU_NODE_LIST_FILE
    jobs_list: list[PackingJob] = []
    try:
        if not pack_nodes(load_nodes(node_list)):
            fail(f"{node_list}: the node list has no GPU node to pack onto")
        for variant in variant_names:
            pod_list = data / pod_list_name(variant)
            if not pod_list.is_file():
                fail(f"no pod list for variant {variant!r}: {pod_list} is missing")
            load_pods(pod_list)  # a malformed or missing file fails here, not in a worker
            jobs_list += [
                PackingJob(variant, node_list, pod_list, p, seed, inflation)
                for p in ([None] if offline else []) + list(policies)
                for seed in seed_list
            ]
    except (TraceError, OSError) as error:
        fail(str(error))
    published, published_note = _published(refs_dir, inflation)
    if refs_dir is not None and not published:
        fail(f"{refs_dir / ALLOC_FILE}: no published FGD curve at inflation {inflation}")

    started = time.perf_counter()
    try:
        results = _run_jobs(jobs_list, jobs, console, quiet=json_output)
    except ValueError as error:
        fail(str(error))
    wall_s = time.perf_counter() - started
    names = [str(p) for p in policies]
    matrix = variant_results(results, published)
    command = _command(
        policies,
        seed_list,
        variant_names,
        inflation,
        offline,
        {
            "--nodes": nodes_file,
            "--data": data_dir,
            "--refs": refs_dir,
            "--out": out_dir,
        },
        jobs,
    )
    meta = _meta(wall_s, results, jobs, command, seed_list, inflation, offline, published_note)
    out_dir.mkdir(parents=True, exist_ok=True)
    document = matrix_json(matrix, names, meta)
    (out_dir / RESULTS_JSON).write_text(json.dumps(document, indent=2) + "\n")
    write_matrix_png(matrix, names, out_dir / CURVES_PNG)
    (out_dir / RESULTS_MD).write_text(
        matrix_markdown(
            matrix,
            names,
            "Packing every openb variant (`gpupool bench packing --all`)",
            _preamble(meta, len(seed_list), offline),
            CURVES_PNG,
        )
    )
    if json_output:
        typer.echo(json.dumps(document, indent=2))
        return
    out = output_console()
    out.print(_matrix_table(matrix, names, seed_list, inflation))
    out.print(
        f"{len(jobs_list)} runs in {wall_s:.0f} s on {jobs} worker{'s' if jobs > 1 else ''} "
        f"({meta['cpu_s']} s of CPU); "
        f"published FGD: {published_note}"
    )
    out.print(f"written: {out_dir / RESULTS_MD}, {out_dir / RESULTS_JSON}, {out_dir / CURVES_PNG}")


def _published(folder: Path | None, inflation: float) -> tuple[dict[str, PublishedFgd], str]:
    """The published FGD results, and where they come from.

    Without `--refs`: data/fgd-refs of the source checkout, when it has them.
    """
    if folder is None:
        try:
            folder = default_refs_dir()
        except FileNotFoundError:
            return {}, "none: data/fgd-refs not found, see --refs"
    try:
        published = load_published_fgd(folder, inflation)
    except (OSError, ValueError) as error:
        console = Console(stderr=True, highlight=False)
        console.print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(2) from None
    return published, _shown(folder / ALLOC_FILE)


def _shown(path: Path) -> str:
    """`path` relative to the working folder when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _run_jobs(
    jobs_list: list[PackingJob], workers: int, console: Console, quiet: bool
) -> list[JobResult]:
    """Run the jobs on `workers` processes (in this one for 1), longest first; a progress bar
    with the running jobs and an ETA (weighted by each job's expected cost) on a terminal.
    Results come back in the order of `jobs_list`."""
    order = sorted(range(len(jobs_list)), key=lambda i: -JOB_WEIGHT.get(jobs_list[i].policy, 1.0))
    total = sum(JOB_WEIGHT.get(j.policy, 1.0) for j in jobs_list)
    results: dict[int, JobResult] = {}
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[done]}/{task.fields[runs]} runs"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        disable=quiet or not console.is_terminal,
        transient=True,
    )
    if workers == 1 or len(jobs_list) == 1:
        with progress:
            task = progress.add_task("", total=total, done=0, runs=len(jobs_list))
            for i in order:
                progress.update(task, description=jobs_list[i].label)
                results[i] = run_job(jobs_list[i])
                progress.update(
                    task, advance=JOB_WEIGHT.get(jobs_list[i].policy, 1.0), done=len(results)
                )
        return [results[i] for i in range(len(jobs_list))]
    # Every job is submitted (and, with fork, every worker started) before the progress bar's
    # thread runs: forking a process with threads is unsafe.
    workers = min(workers, len(jobs_list))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures: dict[Future[JobResult], int] = {
            pool.submit(run_job, jobs_list[i]): i for i in order
        }
        pending = list(futures)
        try:
            with progress:
                task = progress.add_task("", total=total, done=0, runs=len(jobs_list))
                while pending:
                    running = [jobs_list[futures[f]].label for f in pending[:workers]]
                    progress.update(task, description=", ".join(running))
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        i = futures[future]
                        results[i] = future.result()
                        progress.update(
                            task,
                            advance=JOB_WEIGHT.get(jobs_list[i].policy, 1.0),
                            done=len(results),
                        )
                    pending = [f for f in pending if f not in done]
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return [results[i] for i in range(len(jobs_list))]


def _meta(
    wall_s: float,
    results: list[JobResult],
    jobs: int,
    command: str,
    seeds: list[int],
    inflation: float,
    offline: bool,
    published_note: str,
) -> dict[str, object]:
    cpu: dict[str, list[float]] = {}
    for r in results:
        cpu.setdefault(str(r.job.policy or OFFLINE), []).append(r.cpu_s)
    return {
        "date": datetime.date.today().isoformat(),
        "machine": _machine(),
        "python": platform.python_version(),
        "workers": jobs,
        "wall_s": round(wall_s, 1),
        "cpu_s": round(sum(r.cpu_s for r in results), 1),
        "cpu_s_per_run": {k: round(sum(v) / len(v), 2) for k, v in cpu.items()},
        "command": command,
        "seeds": seeds,
        "inflation": inflation,
        "offline_bound_at": BOUND_AT if offline else None,
        "published": published_note,
    }


def _command(
    policies: list[str],
    seeds: list[int],
    variants: list[str],
    inflation: float,
    offline: bool,
    paths: dict[str, Path | None],
    jobs: int,
) -> str:
    """The command line that reproduces a matrix run, every choice spelled out."""
    words = ["gpupool", "bench", "packing", "--all"]
    if variants != list(VARIANTS):
        words += ["--variants", ",".join(variants)]
    words += ["--seeds", ",".join(map(str, seeds)), "--policy", ",".join(policies)]
    if inflation != DEFAULT_INFLATION:
        words += ["--inflation", f"{inflation:g}"]
    if not offline:
        words.append("--no-offline")
    for option, path in paths.items():
        if path is not None:
            words += [option, str(path)]
    return shlex.join([*words, "--jobs", str(jobs)])


def _machine() -> str:
    """`Linux x86_64, 2 CPUs (AMD EPYC ...)`: the CPU model from /proc/cpuinfo if there."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    text = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    return f"{text} ({model})" if model else text


def _preamble(meta: dict[str, object], seeds: int, offline: bool) -> list[str]:
    lines = [
        f"Date: {meta['date']}. Machine: {meta['machine']}, Python {meta['python']}. "
        f"Wall time: {meta['wall_s']} s on {meta['workers']} worker processes "
        f"({meta['cpu_s']} s of CPU in the runs).",
        f"Command: `{meta['command']}`.",
        "",
        f"Allocated GPU at 100% arrived, % of capacity, mean ± standard deviation over {seeds} "
        f"seed{'s' if seeds > 1 else ''} (pods resampled to {meta['inflation']} x capacity, "
        "placed at once or dropped; docs/packing.md). "
        "**published FGD**: the FGD artifact's curve, mean over the same seeds "
        f"(from {meta['published']}). **Δ**: minus published FGD.",
    ]
    if offline:
        lines[-1] += (
            " **bound**: the best hindsight packing found (feasible, so the optimum is at least "
            "as high); **bound - best**: what the best policy leaves on the table."
        )
    return lines


def _matrix_table(
    variants: list[VariantResult], policies: list[str], seeds: list[int], inflation: float
) -> Table:
    consecutive = len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1))
    span = f"{seeds[0]}-{seeds[-1]}" if consecutive else ",".join(map(str, seeds))
    table = Table(
        title=f"Allocated GPU % at 100% arrived, every variant (seeds {span}, "
        f"inflation {inflation})",
        caption="mean ± std over the seeds; Δ: minus published FGD; bound: hindsight packing",
    )
    for n, name in enumerate(matrix_header(policies)):
        table.add_column(name, justify="left" if n == 0 else "right")
    for row in matrix_rows(variants, policies):
        table.add_row(*row)
    return table
