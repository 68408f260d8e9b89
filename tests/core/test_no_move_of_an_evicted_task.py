"""A task that a later action evicts is not also moved in the same cycle.

Found by `test_properties.py` once `apply_decisions` carried decisions out on the simulated
cluster (which refuses to move a task it was told to stop): consolidation moved a task of `w1`
so that `w13` fits, then preempt evicted all of `w1` for `w12` of a higher priority. The cycle
returned the eviction and the move; a driver told to stop a workload and then to move one of
its tasks may start that task again. The snapshot hypothesis found is kept as data (its repr).
"""

from __future__ import annotations

from pathlib import Path

from gpupool.core import model
from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, Evict, EvictionCause, Move
from gpupool.simcluster.apply import apply_decisions

SNAPSHOT_REPR = Path(__file__).parent / "data" / "move_then_evict_snapshot.txt"


def _snapshot() -> model.Snapshot:
    names = {name: getattr(model, name) for name in dir(model) if not name.startswith("_")}
    snapshot = eval(SNAPSHOT_REPR.read_text(encoding="utf-8"), {"__builtins__": {}}, names)
    assert isinstance(snapshot, model.Snapshot)
    return snapshot


def test_the_case_still_preempts_the_workload_consolidation_would_move() -> None:
    """The snapshot keeps exercising the case: w1 is preempted, w12 and w13 start."""
    decisions = run_cycle(_snapshot()).decisions
    evicted = {d.workload for d in decisions if isinstance(d, Evict) and not d.task_indices}
    assert "w1" in evicted
    assert any(
        isinstance(d, Evict) and d.workload == "w1" and d.cause is EvictionCause.PREEMPT
        for d in decisions
    )
    assert {"w12", "w13"} <= {d.workload for d in decisions if isinstance(d, Bind)}


def test_no_move_names_a_task_the_same_cycle_evicts() -> None:
    snapshot = _snapshot()
    decisions = run_cycle(snapshot).decisions
    whole = {d.workload for d in decisions if isinstance(d, Evict) and not d.task_indices}
    tasks = {(d.workload, t) for d in decisions if isinstance(d, Evict) for t in d.task_indices}
    moves = [d for d in decisions if isinstance(d, Move)]
    assert [m for m in moves if m.workload in whole] == []
    assert [m for m in moves if (m.workload, m.source.task_index) in tasks] == []
    apply_decisions(snapshot, decisions)  # the simulated cluster carries every decision out
