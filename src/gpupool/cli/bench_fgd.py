"""`gpupool bench fgd-check`: our FGD (and other policies) beside the FGD artifact's published
results, per openb variant (`gpupool.sim.fgd_refs`). `gpupool.cli.bench` declares the command
and imports this module when it runs."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from gpupool.cli.terminal import output_console
from gpupool.core.policies import policy_names
from gpupool.sim.fgd_refs import (
    VARIANTS,
    Comparison,
    compare,
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

__all__ = ["run_fgd_check"]


def _names(value: str, known: tuple[str, ...], what: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if names == ["all"]:
        return list(known)
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise typer.BadParameter(
            f"unknown {what} {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"choose from {', '.join(known)}, or 'all'"
        )
    return names


def run_fgd_check(
    *,
    variants: str,
    policy: str,
    seeds: str,
    offline: bool,
    refs: Path | None,
    json_output: bool,
) -> None:
    """`gpupool bench fgd-check` (`gpupool.cli.bench` declares its options)."""
    chosen = _names(variants, VARIANTS, "variant")
    policies = _names(policy, policy_names(), "policy")
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise typer.BadParameter(f"{seeds!r} is not a comma-separated list of integers") from None
    if not seed_list:
        raise typer.BadParameter("name at least one seed, e.g. --seeds 42")
    console = Console(stderr=True, highlight=False)
    results: list[Comparison] = []
    try:
        published = load_published_fgd(refs or default_refs_dir())
        data = default_data_dir()
        nodes = pack_nodes(load_nodes(data / GPU_NODE_LIST_FILE))
        for variant in chosen:
            if variant not in published:
                raise ValueError(f"no published FGD rows for {variant}")
            pods = load_pods(data / pod_list_name(variant))
            for index, name in enumerate(policies):
                with console.status(f"{variant} {name}...") as status:
                    results.append(
                        compare(
                            nodes,
                            pods,
                            variant,
                            name,
                            seed_list,
                            published[variant],
                            offline=offline and index == 0,
                            progress=None if json_output else status.update,
                        )
                    )
    except (TraceError, OSError, ValueError) as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None
    if json_output:
        typer.echo(json.dumps([_json(r) for r in results], indent=2))
        return
    output_console().print(_table(results, seed_list))


def _json(result: Comparison) -> dict[str, object]:
    return {
        "variant": result.variant,
        "policy": result.policy,
        "seeds": list(result.seeds),
        "alloc_at_100": round(result.ours_at_100, 3),
        "alloc_std_at_100": round(result.ours_std_at_100, 3),
        "published_fgd_at_100": round(result.published_at_100, 3),
        "difference": round(result.difference, 3),
        "curve_max_gap": round(result.curve_max_gap, 3),
        "curve_worst_level": result.worst_level,
        "frag_at_100": round(result.ours_frag_at_100, 2),
        "published_fgd_frag_at_100": _rounded(result.published_frag_at_100, 2),
        "offline_at_100": None
        if result.offline_at_100 is None
        else round(result.offline_at_100, 3),
        "seconds": round(result.seconds, 1),
    }


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _table(results: list[Comparison], seeds: list[int]) -> Table:
    table = Table(
        title=f"Ours beside the FGD artifact's published FGD, seeds {seeds[0]}..{seeds[-1]}"
        if len(seeds) > 1
        else f"Ours beside the FGD artifact's published FGD, seed {seeds[0]}",
        caption="alloc@100: allocated GPU % at 100% arrived, mean over the seeds; curve gap: "
        "largest |ours - published| of the mean curves over arrival 0..130% (at that level); "
        "frag: fragmented share of idle GPU, %; bound: hindsight packing",
    )
    for column in ("variant", "policy", "published FGD", "ours", "Δ", "curve gap", "frag ours/pub"):
        table.add_column(column, justify="left" if column in ("variant", "policy") else "right")
    table.add_column("bound", justify="right")
    table.add_column("s", justify="right")
    for r in results:
        pub_frag = "-" if r.published_frag_at_100 is None else f"{r.published_frag_at_100:.1f}"
        table.add_row(
            r.variant,
            r.policy,
            f"{r.published_at_100:.2f}",
            f"{r.ours_at_100:.2f} ± {r.ours_std_at_100:.2f}",
            f"{r.difference:+.2f}",
            f"{r.curve_max_gap:.2f} (@{r.worst_level})",
            f"{r.ours_frag_at_100:.1f} / {pub_frag}",
            "" if r.offline_at_100 is None else f"{r.offline_at_100:.2f}",
            f"{r.seconds:.0f}",
        )
    return table
