"""`gpupool bench packing --all`: every openb variant x seeds x policies on worker processes,
against the FGD artifact's published curves; writes results.md, results.json and curves.png.
`gpupool.cli.bench_packing` hands `--all` to `packing_all` here."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from gpupool.cli.bench import DEFAULT_INFLATION
from gpupool.cli.terminal import output_console
from gpupool.core.packing import PolicyName
from gpupool.sim.fgd_refs import (
    ALLOC_FILE,
    VARIANTS,
    PublishedFgd,
    default_refs_dir,
    load_published_fgd,
    pod_list_name,
)
from gpupool.sim.openb import (
    GPU_NODE_LIST_FILE,
    TraceError,
    default_data_dir,
    load_nodes,
    load_pods,
)
from gpupool.sim.packing import pack_nodes
from gpupool.sim.packing_report import (
    BOUND_AT,
    JobResult,
    PackingJob,
    VariantResult,
    matrix_header,
    matrix_json,
    matrix_markdown,
    matrix_rows,
    run_job,
    variant_results,
    write_matrix_png,
)

RESULTS_MD = "results.md"
RESULTS_JSON = "results.json"
CURVES_PNG = "curves.png"


def packing_all(
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
            # the default policy's jobs compute the bound too when both are asked for: their
            # online run is the bound's arrival order
            alongside = offline and PolicyName.DEFAULT in policies
            jobs_list += [
                PackingJob(
                    variant,
                    node_list,
                    pod_list,
                    p,
                    seed,
                    inflation,
                    bound=alongside and p == PolicyName.DEFAULT,
                )
                for p in ([None] if offline and not alongside else []) + list(policies)
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
    """Run the jobs on `workers` processes (in this one for 1), a variant's jobs together and
    the longest of them first; a progress bar with the running jobs and an ETA (weighted by each
    job's expected cost) on a terminal. Results come back in the order of `jobs_list`.

    A variant's runs follow each other because a worker's policies keep their measures' memos
    for the next run on the same target workload (`shared_memo`, a few at a time): most node
    states recur from seed to seed."""
    variants = {name: rank for rank, name in enumerate(dict.fromkeys(j.variant for j in jobs_list))}
    order = sorted(
        range(len(jobs_list)),
        key=lambda i: (variants[jobs_list[i].variant], -jobs_list[i].weight),
    )
    total = sum(j.weight for j in jobs_list)
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
                progress.update(task, advance=jobs_list[i].weight, done=len(results))
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
                            advance=jobs_list[i].weight,
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
        cpu.setdefault(r.job.kind, []).append(r.cpu_s)
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
