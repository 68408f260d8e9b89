"""The file names of the openb trace and of the FGD artifact's results, and the variants and
seeds it published, light to import: `gpupool bench` names them in its options' help, which
Typer builds at every start of the CLI (`gpupool.sim.openb` and `gpupool.sim.fgd_refs`
re-export them)."""

from __future__ import annotations

__all__ = [
    "ALLOC_FILE",
    "ALL_NODE_LIST_FILE",
    "DEFAULT_POD_LIST_FILE",
    "FRAG_RATIO_FILE",
    "GPU_NODE_LIST_FILE",
    "POD_LIST_PREFIX",
    "PUBLISHED_SEEDS",
    "VARIANTS",
    "pod_list_name",
]

GPU_NODE_LIST_FILE = "openb_node_list_gpu_node.csv"
"""The 1,213 GPU nodes; the cluster of the FGD experiments."""
ALL_NODE_LIST_FILE = "openb_node_list_all_node.csv"
"""All 1,523 nodes, the GPU nodes plus 310 CPU-only ones."""
DEFAULT_POD_LIST_FILE = "openb_pod_list_default.csv"
"""The main production workload (8,152 pods)."""

ALLOC_FILE = "analysis_allo_discrete.csv"
FRAG_RATIO_FILE = "analysis_frag_ratio_discrete.csv"
VARIANTS = (
    "default",
    "cpu050",
    "cpu100",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpuspec10",
    "multigpu20",
    "multigpu30",
)
"""The openb variants with published FGD curves (all shipped in data/openb)."""
PUBLISHED_SEEDS = tuple(range(42, 52))
POD_LIST_PREFIX = "openb_pod_list_"


def pod_list_name(variant: str) -> str:
    """`default` -> `openb_pod_list_default.csv`."""
    return f"{POD_LIST_PREFIX}{variant}.csv"
