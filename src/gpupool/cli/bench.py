"""`gpupool bench ...`: reproducible measurements. Today: `packing`, the FGD paper's protocol,
on one pod list or (`--all`) on every openb variant against the FGD artifact's published curves,
and `fgd-check`, ours beside the FGD artifact's published FGD.

Only the commands' options live here: Typer reads every command's signature at each start of
the CLI, so this module stays light; each command imports its implementation
(`gpupool.cli.bench_packing`, `gpupool.cli.bench_fgd`), and with it the simulator, when it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperOption

from gpupool.sim.openb_files import (
    ALLOC_FILE,
    DEFAULT_POD_LIST_FILE,
    GPU_NODE_LIST_FILE,
    PUBLISHED_SEEDS,
    VARIANTS,
)

__all__ = ["ALL_POLICIES", "DEFAULT_INFLATION", "POLICY_NAMES", "PolicyNamesHelp", "bench_app"]

ALL_POLICIES = ("fgd", "default", "default@16")
"""--all: faithful FGD, our default as the paper's protocol places it (every node scored), and
our default as the server places it (16 candidates per kind, the default of the settings).
(`PolicyName.FGD`, `PolicyName.DEFAULT` of `gpupool.core.packing`; tests/client/
test_cli_startup.py checks it.)"""
DEFAULT_INFLATION = 1.3
POLICY_NAMES = "{policy names}"
"""Stands in an option's help for the registered policy names until the help is shown."""


class PolicyNamesHelp(TyperCommand):
    """Writes the registered placement policies into the options' help when the help is shown:
    listing them loads the scheduling core's policy registry, too heavy for every start."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # typer's own click types
        from gpupool.core.policies import policy_names

        names = ", ".join(policy_names())
        for param in self.params:
            if isinstance(param, TyperOption) and param.help and POLICY_NAMES in param.help:
                param.help = param.help.replace(POLICY_NAMES, names)
        super().format_help(ctx, formatter)


bench_app = typer.Typer(
    help="Reproducible benchmarks of the scheduler's policies.", no_args_is_help=True
)


@bench_app.command("fgd-check")
def fgd_check(
    variants: Annotated[
        str,
        typer.Option("--variants", help="Comma-separated openb variants, or 'all'."),
    ] = "all",
    policy: Annotated[
        str,
        typer.Option("--policy", help="Comma-separated policies to set beside published FGD."),
    ] = "fgd",
    seeds: Annotated[
        str, typer.Option("--seeds", help="Comma-separated seeds (the artifact has 42..51).")
    ] = ",".join(map(str, PUBLISHED_SEEDS)),
    offline: Annotated[
        bool,
        typer.Option("--offline", help="Also the hindsight packing at 100% (slower)."),
    ] = False,
    refs: Annotated[
        Path | None,
        typer.Option("--refs", help="Folder of the artifact's results (default: data/fgd-refs)."),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Our policies beside the FGD artifact's published FGD, per openb variant.

    Per variant and policy: the mean allocation at 100% arrived over the seeds (ours and the
    artifact's, measured the same way), the difference, and the largest gap between the two
    mean curves at any arrival level. Exit status 2 on a bad option or a missing file.
    """
    from gpupool.cli.bench_fgd import run_fgd_check

    run_fgd_check(
        variants=variants,
        policy=policy,
        seeds=seeds,
        offline=offline,
        refs=refs,
        json_output=json_output,
    )


@bench_app.command("packing", cls=PolicyNamesHelp)
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
        str | None,
        typer.Option(
            "--policy",
            help="Policies, comma-separated: any registered placement policy ("
            + POLICY_NAMES
            + "); NAME@K places through the scheduling cycle's placer scoring K candidates, "
            "as the server does; 'all' for the FGD paper's and ours (default: default; with "
            "--all: " + ",".join(ALL_POLICIES) + ")",
        ),
    ] = None,
    seeds: Annotated[
        str | None,
        typer.Option("--seeds", help="Comma-separated seeds (default: 42; with --all: 42-51)."),
    ] = None,
    inflation: Annotated[
        float,
        typer.Option("--inflation", help="Stop when the pods ask for this x GPU capacity."),
    ] = DEFAULT_INFLATION,
    offline: Annotated[
        bool | None,
        typer.Option(
            "--offline/--no-offline",
            help="Also pack each checkpoint's pods with hindsight (slower: ~15 s per seed; "
            "default: off, on with --all, where only up to 100% arrived is packed).",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    plot: Annotated[
        Path,
        typer.Option("--plot", help="Where to write the curves (SVG) in table mode."),
    ] = Path("gpupool-packing.svg"),
    all_variants: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every openb variant with published FGD curves x the seeds x the policies, "
            "in parallel; writes results.md, results.json and curves.png to --out.",
        ),
    ] = False,
    variants: Annotated[
        str | None,
        typer.Option(
            "--variants",
            help="With --all: comma-separated pod-list variants (default: the nine with "
            "published curves: " + ", ".join(VARIANTS) + ").",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data",
            help="With --all: the folder with the node list and the openb_pod_list_*.csv files "
            "(default: data/openb).",
        ),
    ] = None,
    refs_dir: Annotated[
        Path | None,
        typer.Option(
            "--refs",
            help=f"With --all: the folder of the FGD artifact's published results ({ALLOC_FILE}; "
            "default: data/fgd-refs of the checkout, if there).",
        ),
    ] = None,
    out_dir: Annotated[
        Path,
        typer.Option("--out", help="With --all: the folder to write the results to."),
    ] = Path("gpupool-packing"),
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help="With --all: worker processes (default: CPUs)."),
    ] = None,
) -> None:
    """Pack the openb trace pod by pod (placed at once or dropped), as in the FGD paper.

    Prints allocated GPU % and fragmentation at 90/95/100/130% arrived, mean over the seeds.
    With --all: every variant, compared with the FGD artifact's published curves.
    Exit status 2 on a malformed file or a bad option.
    """
    from gpupool.cli.bench_packing import run_packing_command

    run_packing_command(
        nodes_file=nodes_file,
        pods_file=pods_file,
        policy=policy,
        seeds=seeds,
        inflation=inflation,
        offline=offline,
        json_output=json_output,
        plot=plot,
        all_variants=all_variants,
        variants=variants,
        data_dir=data_dir,
        refs_dir=refs_dir,
        out_dir=out_dir,
        jobs=jobs,
    )
