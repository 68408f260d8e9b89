"""Reclaim spends its per-cycle budget (`max_reclaim_attempts_per_cycle`) on attempts that can
succeed: once a shape failed for a project, the project's work of that shape is not tried again
in the cycle, nor work that needs as much GPU and at least as much CPU and memory per task (the
same victims could free no more room for it). Work that needs less is still tried.

One cycle each: n1 and n2 with 2 GPUs, beta (no quota) runs a GPU on each of their devices, and
b2 on n1 is inside its min runtime, so no reclaim can empty n1: alpha's gangs of two 2-GPU
tasks cannot start. With a budget of two attempts, whether alpha's 1-GPU job reclaims this cycle
depends on whether the second gang spends the second attempt.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, Evict

from .helpers import node, project, running, snapshot, train

_BOUNDED = "reclaim is bounded per cycle"


@dataclass(frozen=True)
class Row:
    name: str
    second_cpu_milli: int
    second_memory_mib: int
    small_starts: bool


ROWS = [
    Row("same-shape-is-not-tried-again", 1000, 4096, small_starts=True),
    Row("needing-more-cpu-is-not-tried", 2000, 4096, small_starts=True),
    Row("needing-more-memory-is-not-tried", 1000, 8192, small_starts=True),
    Row("needing-less-cpu-is-tried", 500, 4096, small_starts=False),
    Row("needing-less-memory-is-tried", 1000, 2048, small_starts=False),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_reclaim_does_not_spend_its_budget_on_a_shape_that_cannot_fit(row: Row) -> None:
    gang = {"tasks": 2}
    s = snapshot(
        [node("n1", 2), node("n2", 2)],
        [project("alpha", 4), project("beta", 0)],
        [
            running(train("b1", "beta"), "n1", (0,), -600),
            running(train("b2", "beta", min_runtime_s=3600), "n1", (1,), -600),
            running(train("b3", "beta"), "n2", (0,), -600),
            running(train("b4", "beta"), "n2", (1,), -600),
            train("big-1", "alpha", 2, cpu_milli=1000, memory_mib=4096, **gang),
            train(
                "big-2",
                "alpha",
                2,
                cpu_milli=row.second_cpu_milli,
                memory_mib=row.second_memory_mib,
                **gang,
            ),
            train("small", "alpha"),
        ],
    )
    s = replace(s, settings=replace(s.settings, max_reclaim_attempts_per_cycle=2))
    result = run_cycle(s)
    bound = {d.workload for d in result.decisions if isinstance(d, Bind)}
    evicted = [d.workload for d in result.decisions if isinstance(d, Evict)]
    assert not {"big-1", "big-2"} & bound
    if row.small_starts:
        assert bound == {"small"}
        assert len(evicted) == 1 and evicted[0] in {"b1", "b3", "b4"}
    else:
        assert bound == set() and evicted == []
        assert _BOUNDED in result.pending_reasons["small"]
