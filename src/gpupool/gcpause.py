"""The garbage collector paused around one scheduling cycle, by the drivers that run cycles.

A cycle at 10,000 nodes allocates a few hundred thousand short-lived objects on top of a
snapshot of about as many long-lived ones; the collector's full passes then walk the whole
snapshot several times per cycle (about a fifth of the cycle's CPU time, measured with
`benchmarks/cycle.py --gc on|off`). Nothing the cycle makes outlives it in a reference cycle
(`tests/core/test_cycle_garbage.py`), so the collector is paused for the cycle and resumes
after it; reference counting frees the cycle's session when the cycle returns. (Until
2026-11-28 it did not: the placer and its policy view referred to each other, which kept each
cycle's whole session for the collector's next pass.) The core itself stays free of global
state: only drivers (the server loop, the simulator, the benchmark) pause the collector.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the collector for the `with` block; leave it as it was after (also on error)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
