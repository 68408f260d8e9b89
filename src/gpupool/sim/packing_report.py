"""Summaries and plots of packing runs (`gpupool bench packing`), and the matrix of
`--all`: every openb variant x seeds x policies, as independent jobs (`run_job`, run in worker
processes), compared with the FGD artifact's published curves (`gpupool.sim.fgd_refs`).

The names live in rooms and are re-exported here: `packing_summary` (one policy over its seeds,
the SVG of the curves), `packing_jobs` (a job of `--all` and its result) and `packing_matrix`
(the results per variant against the published curves: table, JSON, Markdown, PNG)."""

from __future__ import annotations

from gpupool.sim.packing_jobs import (
    BOUND_AT,
    JOB_WEIGHT,
    OFFLINE,
    JobResult,
    PackingJob,
    grid_run,
    run_job,
)
from gpupool.sim.packing_matrix import (
    VariantResult,
    matrix_header,
    matrix_json,
    matrix_markdown,
    matrix_rows,
    published_mean_curve,
    variant_results,
    write_matrix_png,
)
from gpupool.sim.packing_summary import PolicySummary, summarise, summary_json, write_curves_svg

__all__ = [
    "BOUND_AT",
    "JOB_WEIGHT",
    "OFFLINE",
    "JobResult",
    "PackingJob",
    "PolicySummary",
    "VariantResult",
    "grid_run",
    "matrix_header",
    "matrix_json",
    "matrix_markdown",
    "matrix_rows",
    "published_mean_curve",
    "run_job",
    "summarise",
    "summary_json",
    "variant_results",
    "write_curves_svg",
    "write_matrix_png",
]
