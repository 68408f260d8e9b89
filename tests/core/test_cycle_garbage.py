"""A scheduling cycle leaves nothing in a reference cycle: reference counting frees it all.

The drivers pause the collector for a cycle (`gpupool.gcpause`). Anything the cycle builds that
sits in a reference cycle outlives it until the collector's next pass, and takes with it
whatever it refers to: a placement policy's view holding a bound method of the placer held the
whole session (every workload's record, every placement) until then, so each cycle's teardown
was paid by the collector after the cycle, unmeasured, and memory grew with every cycle the
collector stayed paused. This runs cycles with the collector paused on the synthetic
trace-shaped clusters of `benchmarks/cycle.py` (limits, departments, dynamic fractions, gangs),
under every registered placement policy, each cycle's decisions applied before the next, and
asks the collector what it finds unreachable after each: nothing.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import types
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from cycle_bench.measure import apply_decisions
from cycle_bench.workload import build_snapshot

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import CycleResult
from gpupool.core.model import Snapshot
from gpupool.core.policies import policy_names


def _ours(thing: object) -> str | None:
    """The qualified name of `thing`'s type, or of `thing` for a function, when it is the
    core's; None for other things (builtins, and what other tests' threads, a server's say,
    leave in the same process while the cycle runs: the core starts no thread)."""
    if isinstance(thing, types.FunctionType):
        module, name = thing.__module__, thing.__qualname__
    else:
        module, name = type(thing).__module__, type(thing).__qualname__
    return f"{module}.{name}" if module.startswith("gpupool.core") else None


def _cyclic_garbage(snapshot: Snapshot) -> tuple[CycleResult, Counter[str]]:
    """Run one cycle with the collector paused; the core's objects only the collector could
    then free, by type (any reference cycle the core makes holds one of them)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        result = run_cycle(snapshot)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found = Counter(name for name in map(_ours, gc.garbage) if name is not None)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    return result, found


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("placement", policy_names())
def test_a_cycle_leaves_no_reference_cycles(placement: str, seed: int) -> None:
    snapshot = build_snapshot(40, seed)
    snapshot = dataclasses.replace(
        snapshot, settings=dataclasses.replace(snapshot.settings, placement=placement)
    )
    for cycle in range(3):
        result, garbage = _cyclic_garbage(snapshot)
        assert not garbage, (
            f"cycle {cycle} under {placement!r} left objects only the collector frees "
            f"(most common first): {garbage.most_common(8)}"
        )
        assert result.decisions or cycle > 0, "the first cycle decides something"
        snapshot = dataclasses.replace(
            apply_decisions(snapshot, result.decisions), now_s=snapshot.now_s + 30
        )
