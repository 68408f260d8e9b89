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
from gpupool.core.model import Workload

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


# One task walked node by node: when no node has, or would have with every victim the attempt
# could count out, the devices for it, the shape fails with any CPU and memory, and work of the
# shape needing less of them is not tried again either. Where devices were found but CPU was
# short, work needing less CPU is still tried. Budget: two attempts; "half" (0.5 GPU) reclaims
# with the second one if it is left.


def _halves(cpu_per_half: int) -> list[Workload]:
    # n1..n3: one GPU each, shared by gamma (in quota) and beta (no quota): evicting beta frees
    # half a device, never a whole one.
    return [
        *(
            running(train(f"g{i}", "gamma", 0.5, cpu_milli=cpu_per_half), f"n{i}", (0,), -600)
            for i in range(1, 4)
        ),
        *(
            running(train(f"b{i}", "beta", 0.5, cpu_milli=cpu_per_half), f"n{i}", (0,), -100 * i)
            for i in range(1, 4)
        ),
    ]


@pytest.mark.parametrize(
    ("short_of", "second_tried"), [("devices", False), ("cpu", True)], ids=["devices", "cpu"]
)
def test_a_shape_short_of_devices_is_not_tried_with_less_cpu(
    short_of: str, second_tried: bool
) -> None:
    nodes = [node(f"n{i}", 1, cpu_milli=16000) for i in range(1, 4)]
    held = _halves(2000)
    if short_of == "cpu":  # n4's whole GPU is beta's: it frees a device, but 6 CPUs only
        nodes.append(node("n4", 1, cpu_milli=6000))
        held.append(running(train("b-whole", "beta", cpu_milli=2000), "n4", (0,), -50))
    s = snapshot(
        nodes,
        [project("alpha", 1.5), project("beta", 0), project("gamma", 1.5)],
        [
            *held,
            train("one", "alpha", cpu_milli=8000),
            train("one-less-cpu", "alpha", cpu_milli=4000),
            train("half", "alpha", 0.5),
        ],
    )
    s = replace(s, settings=replace(s.settings, max_reclaim_attempts_per_cycle=2))
    result = run_cycle(s)
    bound = {d.workload for d in result.decisions if isinstance(d, Bind)}
    evicted = {d.workload for d in result.decisions if isinstance(d, Evict)}
    if second_tried:  # it fits on n4 once b-whole is out; "half" finds the budget spent
        assert bound == {"one-less-cpu"} and evicted == {"b-whole"}
        assert _BOUNDED in result.pending_reasons["half"]
    else:
        assert bound == {"half"} and len(evicted) == 1 and evicted < {"b1", "b2", "b3"}
        assert _BOUNDED not in result.pending_reasons["one-less-cpu"]
