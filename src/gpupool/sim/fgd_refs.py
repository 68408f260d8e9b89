"""The FGD artifact's published results (`data/fgd-refs`), and our runs set beside them.

`gpupool bench fgd-check` runs our `fgd` (and any other policy) on the openb variants the artifact
publishes, with the same seeds, and prints per variant: the published FGD mean allocation at
100% arrived, ours, the difference, and the largest gap between the mean curves at any arrival
level (0..130%). Both sides are measured the same way (`gpupool.sim.packing.level_means`).
"""

from __future__ import annotations

import csv
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpupool.core.packing import PackNode
from gpupool.sim.openb import TracePod, checkout_data
from gpupool.sim.openb_files import (
    ALLOC_FILE,
    FRAG_RATIO_FILE,
    POD_LIST_PREFIX,
    PUBLISHED_SEEDS,
    VARIANTS,
    pod_list_name,
)
from gpupool.sim.packing import run_offline, run_packing

__all__ = [
    "ALLOC_FILE",
    "FGD_POLICY",
    "FRAG_RATIO_FILE",
    "PUBLISHED_SEEDS",
    "VARIANTS",
    "Comparison",
    "PublishedFgd",
    "compare",
    "default_refs_dir",
    "load_published_fgd",
    "pod_list_name",
]

FGD_POLICY = "06-FGD"
"""The artifact's name for FGD in its `sc_policy` column."""
_KEY_COLUMNS = ("workload", "sc_policy", "tune", "seed")


@dataclass(frozen=True, slots=True)
class PublishedFgd:
    """FGD's published results on one variant: per seed, allocated % and fragmentation ratio
    (% of idle GPU) at each arrival level given."""

    variant: str
    alloc: dict[int, dict[int, float]]
    frag_ratio: dict[int, dict[int, float]]

    def alloc_mean(self, seeds: Sequence[int], level: int) -> float:
        return statistics.fmean(self.alloc[s][level] for s in seeds)

    def frag_mean(self, seeds: Sequence[int], level: int) -> float | None:
        values = [self.frag_ratio[s][level] for s in seeds if level in self.frag_ratio.get(s, {})]
        return statistics.fmean(values) if len(values) == len(seeds) else None


def default_refs_dir() -> Path:
    """`data/fgd-refs` of the source checkout (next to `data/openb`: `checkout_data`)."""
    found = checkout_data("fgd-refs")
    if found is None:
        raise FileNotFoundError(
            f"the FGD artifact's published results were not found above "
            f"{Path(__file__).resolve()} or {Path.cwd()}: run from a source checkout; they live "
            "in data/fgd-refs"
        )
    return found


def load_published_fgd(folder: Path, tune: float = 1.3) -> dict[str, PublishedFgd]:
    """Read FGD's rows (at `tune`) from the artifact's allocation and fragmentation-ratio
    files in `folder`, keyed by variant. A malformed file raises ValueError (`file:line`)."""
    alloc = _read(folder / ALLOC_FILE, tune)
    frag_file = folder / FRAG_RATIO_FILE
    frag = _read(frag_file, tune) if frag_file.is_file() else {}
    return {
        variant: PublishedFgd(variant, by_seed, frag.get(variant, {}))
        for variant, by_seed in alloc.items()
    }


def _read(path: Path, tune: float) -> dict[str, dict[int, dict[int, float]]]:
    found: dict[str, dict[int, dict[int, float]]] = {}
    with path.open(newline="") as handle:
        rows = csv.reader(handle)
        header = next(rows, None)
        if header is None or tuple(header[: len(_KEY_COLUMNS)]) != _KEY_COLUMNS:
            raise ValueError(f"{path}:1: header: expected {', '.join(_KEY_COLUMNS)}, ...")
        levels = {i: int(c) for i, c in enumerate(header) if c.isdigit()}
        for line, row in enumerate(rows, start=2):
            if len(row) != len(header):
                raise ValueError(f"{path}:{line}: row: {len(row)} fields, expected {len(header)}")
            workload, policy, row_tune, seed = row[: len(_KEY_COLUMNS)]
            try:
                if policy != FGD_POLICY or abs(float(row_tune) - tune) > 1e-9:
                    continue
                values = {level: float(row[i]) for i, level in levels.items() if row[i]}
                found.setdefault(workload.removeprefix(POD_LIST_PREFIX), {})[int(seed)] = values
            except ValueError as error:
                raise ValueError(f"{path}:{line}: row: {error}") from None
    return found


@dataclass(frozen=True, slots=True)
class Comparison:
    """Our runs of one policy on one variant beside the published FGD (same seeds)."""

    variant: str
    policy: str
    seeds: tuple[int, ...]
    ours_at_100: float
    ours_std_at_100: float
    published_at_100: float
    curve_max_gap: float
    """The largest |ours - published| between the mean curves, over arrival levels 0..130."""
    worst_level: int
    ours_frag_at_100: float
    published_frag_at_100: float | None
    offline_at_100: float | None
    seconds: float

    @property
    def difference(self) -> float:
        return self.ours_at_100 - self.published_at_100


def compare(
    nodes: Sequence[PackNode],
    pods: Sequence[TracePod],
    variant: str,
    policy: str,
    seeds: Sequence[int],
    published: PublishedFgd,
    offline: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Comparison:
    """Run `policy` on the variant's pods with each seed and set the runs beside `published`.

    With `offline`, also the hindsight packing (`run_offline`) at 100% arrived, mean over the
    seeds. Seeds the artifact has no row for are refused (ValueError).
    """
    missing = [s for s in seeds if s not in published.alloc]
    if missing:
        raise ValueError(
            f"{variant}: no published FGD row for seed(s) {', '.join(map(str, missing))}; "
            f"the artifact has {min(published.alloc)}..{max(published.alloc)}"
        )
    started = time.perf_counter()
    runs = []
    for seed in seeds:
        if progress is not None:
            progress(f"{variant} {policy} seed {seed}")
        runs.append(run_packing(nodes, pods, policy, seed))
    bound: float | None = None
    if offline:
        values = []
        for seed in seeds:
            if progress is not None:
                progress(f"{variant} offline seed {seed}")
            values.append(run_offline(nodes, pods, seed, points=(100,))[100])
        bound = statistics.fmean(values)
    gaps = {}
    for level in range(131):
        if all(level in r.alloc_levels for r in runs) and all(
            level in published.alloc[s] for s in seeds
        ):
            ours = statistics.fmean(r.alloc_levels[level] for r in runs)
            gaps[level] = abs(ours - published.alloc_mean(seeds, level))
    worst = max(gaps, key=gaps.__getitem__)
    at_100 = [r.alloc_at[100] for r in runs]
    return Comparison(
        variant=variant,
        policy=str(policy),
        seeds=tuple(seeds),
        ours_at_100=statistics.fmean(at_100),
        ours_std_at_100=statistics.stdev(at_100) if len(at_100) > 1 else 0.0,
        published_at_100=published.alloc_mean(seeds, 100),
        curve_max_gap=gaps[worst],
        worst_level=worst,
        ours_frag_at_100=statistics.fmean(r.frag_at[100] for r in runs),
        published_frag_at_100=published.frag_mean(seeds, 100),
        offline_at_100=bound,
        seconds=time.perf_counter() - started,
    )
