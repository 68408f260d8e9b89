"""Apply a cycle's decisions to a snapshot, as a driver with zero grace period would.

Drivers with richer state (grace periods, durations, processes) keep their own bookkeeping; this
pure helper is what property tests and simple drivers use to iterate cycles.
"""

from __future__ import annotations

from dataclasses import replace

from gpupool.core.decisions import Bind, Decision, Evict, Move
from gpupool.core.model import Snapshot, TaskPlacement, Workload


def apply_decisions(snapshot: Snapshot, decisions: tuple[Decision, ...]) -> Snapshot:
    """The snapshot after `decisions`, with evicted work stopped at once.

    Evicted preemptible workloads return to pending; a non-preemptible one evicted is dropped
    (it failed). Started workloads get `started_at_s = snapshot.now_s`.
    """
    by_name: dict[str, Workload] = {w.name: w for w in snapshot.workloads}
    dropped: set[str] = set()
    for decision in decisions:
        current = by_name[decision.workload]
        if isinstance(decision, Bind):
            placements = tuple(
                sorted(current.placements + decision.placements, key=lambda p: p.task_index)
            )
            started = current.started_at_s if current.placements else snapshot.now_s
            by_name[current.name] = replace(current, placements=placements, started_at_s=started)
        elif isinstance(decision, Evict):
            if decision.task_indices:
                gone = set(decision.task_indices)
                kept = tuple(p for p in current.placements if p.task_index not in gone)
                by_name[current.name] = replace(current, placements=kept)
            elif current.is_preemptible:
                by_name[current.name] = replace(current, placements=(), started_at_s=None)
            else:
                dropped.add(current.name)
        else:
            by_name[current.name] = replace(
                current, placements=_moved(current.placements, decision)
            )
    workloads = tuple(w for name, w in by_name.items() if name not in dropped)
    return replace(snapshot, workloads=workloads)


def _moved(placements: tuple[TaskPlacement, ...], move: Move) -> tuple[TaskPlacement, ...]:
    return tuple(move.target if p.task_index == move.target.task_index else p for p in placements)
