"""G10 with victims put back together: once the pending workload fits, every victim on none of
the nodes it is placed on goes back in one step, checked once (`victims._restore_off_placement`);
the others are tried one at a time. Where a limit, not room, is what the victims were taken for
(G6), the check fails, they are taken again and tried one at a time, so the limit holds.
"""

from __future__ import annotations

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, Evict
from gpupool.core.model import Snapshot

from .helpers import check_decisions, node, project, running, snapshot, train


def _outcome(s: Snapshot) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    result = run_cycle(s)
    check_decisions(s, result)
    bound = {
        d.workload: tuple(p.node for p in d.placements)
        for d in result.decisions
        if isinstance(d, Bind)
    }
    return bound, sorted(d.workload for d in result.decisions if isinstance(d, Evict))


def alpha_needs_the_node_of_beta_s_oldest() -> Snapshot:
    """beta's work, one GPU each on n1..n3 (n3 the most recent: the first victim), and two on
    n4; alpha's 2-GPU job needs n4 emptied: b3 and b1, b2 (taken before the victims on n4 in
    victim order) are not needed."""
    return snapshot(
        [node("n1", 1), node("n2", 1), node("n3", 1), node("n4", 2)],
        [project("alpha", 5), project("beta", 0)],
        [
            running(train("b4", "beta", 2), "n4", (0, 1), -900),
            running(train("b1", "beta"), "n1", (0,), -600),
            running(train("b2", "beta"), "n2", (0,), -500),
            running(train("b3", "beta"), "n3", (0,), -400),
            train("a", "alpha", 2),
        ],
    )


def test_reclaim_puts_back_the_victims_off_the_placement() -> None:
    bound, evicted = _outcome(alpha_needs_the_node_of_beta_s_oldest())
    assert bound == {"a": ("n4",)}
    assert evicted == ["b4"]


def test_a_limit_keeps_the_victims_off_the_placement_out() -> None:
    # alpha, at its limit of 2 GPUs, preempts its own low-priority work for `high` (2 GPUs):
    # n0 is free, so `high` goes there and neither victim is where it is placed, but putting
    # either back would take alpha above its limit.
    s = snapshot(
        [node("n0", 2), node("n1", 1), node("n2", 1)],
        [project("alpha", 2, limit=2)],
        [
            running(train("low-1", "alpha", priority=10), "n1", (0,), -600),
            running(train("low-2", "alpha", priority=10), "n2", (0,), -300),
            train("high", "alpha", 2, priority=90),
        ],
    )
    bound, evicted = _outcome(s)
    assert bound == {"high": ("n0",)}
    assert evicted == ["low-1", "low-2"]
