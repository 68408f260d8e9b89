"""Consolidation starts a gang whole or not at all, also when its second try of a slot fails.

Consolidation tries every slot for a task inside a statement it rolls back, then tries the best
one again to keep it. Under a policy that chooses at random (`random`), that second try may
choose otherwise and fail; the gang's other tasks were then started without it (G9 broken: a
two-task gang bound with one task). Found by `test_reclaim_scan.py`'s random clusters; this is
that cluster, kept as it was found.
"""

from __future__ import annotations

from gpupool.core.cycle import run_cycle
from gpupool.core.model import Toleration, TolerationOperator, Workload

from .helpers import (
    CORDONED,
    bound_names,
    check_decisions,
    interactive,
    node,
    project,
    running,
    snapshot,
    train,
)

_ANY = (Toleration(None, TolerationOperator.EXISTS, None, None),)


def _found_cluster() -> list[Workload]:
    return [
        running(train("w0", "p2", 2), "n0", (0, 1)),
        train("w1", "p0"),
        train("w2", "p0", tolerations=_ANY),
        running(train("w3", "p0", None, gpu_memory_mib=40960), "n0", (2,)),
        train("w4", "p0", tolerations=_ANY),
        running(train("w5", "p0", 0.1), "n0", (2,)),
        train("w6", "p0"),
        train("w7", "p0", tolerations=_ANY),
        train("w8", "p0", 0.65, tasks=2, tolerations=_ANY),
        running(train("w9", "p0", 0.45, gpu_limit=0.5), "n0", (3,), burst_device=4),
        train("w10", "p0"),
        interactive("w11", "p0", 0.4),
    ]


def test_a_gang_whose_slot_fails_on_the_second_try_does_not_start_short() -> None:
    s = snapshot(
        [
            node("n0", 6, taints=[CORDONED]),
            node("n1", 1, gpu_memory_mib=40960),
            node("n2", 3, taints=[CORDONED]),
        ],
        [
            project("dept0", weight=0),
            project("dept1", weight=0),
            project("p0", 0.5, weight=0),
            project("p1", weight=0),
            project("p2", weight=0),
            project("p3", weight=0),
        ],
        _found_cluster(),
        now_s=1000,
        placement="random",
    )
    result = run_cycle(s)
    check_decisions(s, result)  # G9: every gang started whole
    assert "w8" not in bound_names(result.decisions)
    assert {"w2", "w4", "w7", "w11"} <= bound_names(result.decisions)
