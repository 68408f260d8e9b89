"""One cycle's decisions stay exactly as they were while the cycle is made faster.

`data/cycle_digests.json` holds, per (nodes, seed, placement), sha256 digests of the canonical
repr of `run_cycle`'s decisions (in order) and of its pending reasons, on the synthetic snapshots
of `benchmarks/cycle_bench/workload.build_snapshot`. They were generated from the code before the
performance work of issue 13 (item 4), and regenerated once since, for an intended change of
behaviour (2026-11-27: reclaim does not try again, in the same cycle, a shape that needs at least
what a failed attempt of the project needed, `tests/core/test_reclaim_budget.py`; and for
`binpack` only, the same day: a fraction that no shared device takes opens an empty device on
the first node offered, as whole GPUs do, not the lowest-numbered of 16 candidates,
`tests/core/test_fraction_on_empty_device.py`); and once more that day: work started in room
an earlier eviction of the cycle left says so ("fits in capacity freed earlier in this cycle";
it read "starts on GPUs reclaimed from " with no names), and eviction for one task walks the
victims node by node (`tests/core/test_victim_walk.py`: the same evictions and the same work
started; the session's buckets see fewer changes, so a few tasks go to another, equal node:
8 of the 701 decisions at 200 nodes, seed 0, binpack, 11 of 232 at 50 nodes, seed 1); and
once more: a one-task shape whose walk found no node with the devices for it is not tried
again with less CPU or memory in the cycle (`tests/core/test_reclaim_budget.py`), so the
budget reaches other work (6 of the 12 cases: one more reclaim at 50 nodes, seed 0, default,
and preempt's attempts after it shift); and once more: a one-task walk passes over the victims
on nodes that could not take the task even with every candidate out, so they no longer lower
their project's holding for the next victim's justification (`tests/core/test_victim_walk.py`;
3 of the 12 cases: 50 nodes seed 0 `default` and `fgd`, 200 nodes seed 0 `default`, other
victims, fewer of them: 53 -> 47, 53 -> 51, 79 -> 73 evictions). A speed-up that changes one is
wrong.
Regenerate only for an intended change of behaviour:

    PYTHONPATH=src python tests/core/test_cycle_decisions_stable.py --write
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from cycle_bench.workload import build_snapshot

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import CycleResult
from gpupool.core.model import Snapshot

DATA = Path(__file__).resolve().parent / "data" / "cycle_digests.json"
NODES = (50, 200)
SEEDS = (0, 1)
PLACEMENTS = ("binpack", "default", "fgd")

_snapshots: dict[tuple[int, int], Snapshot] = {}


def _snapshot(nodes: int, seed: int) -> Snapshot:
    key = (nodes, seed)
    if key not in _snapshots:
        _snapshots[key] = build_snapshot(nodes, seed)
    return _snapshots[key]


def _key(nodes: int, seed: int, placement: str) -> str:
    return f"{nodes}/{seed}/{placement}"


def digests(nodes: int, seed: int, placement: str) -> dict[str, object]:
    snapshot = _snapshot(nodes, seed)
    snapshot = dataclasses.replace(
        snapshot, settings=dataclasses.replace(snapshot.settings, placement=placement)
    )
    result: CycleResult = run_cycle(snapshot)
    decisions = "\n".join(repr(d) for d in result.decisions)
    reasons = "\n".join(f"{k}: {v}" for k, v in sorted(result.pending_reasons.items()))
    return {
        "decisions": len(result.decisions),
        "decisions_sha256": hashlib.sha256(decisions.encode()).hexdigest(),
        "pending": len(result.pending_reasons),
        "pending_reasons_sha256": hashlib.sha256(reasons.encode()).hexdigest(),
    }


CASES = [(n, s, p) for n in NODES for s in SEEDS for p in PLACEMENTS]


@pytest.mark.parametrize(("nodes", "seed", "placement"), CASES)
def test_cycle_decisions_match_recorded_digests(nodes: int, seed: int, placement: str) -> None:
    recorded = json.loads(DATA.read_text())[_key(nodes, seed, placement)]
    assert digests(nodes, seed, placement) == recorded


if __name__ == "__main__" and "--write" in sys.argv:
    DATA.write_text(
        json.dumps({_key(n, s, p): digests(n, s, p) for n, s, p in CASES}, indent=2) + "\n"
    )
