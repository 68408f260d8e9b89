"""Where bin-pack puts a fraction that needs an empty device: on the first node the capacity
index offers among those with the fewest empty devices (the least recently changed first), as
it does with whole GPUs, after every candidate's shared devices were tried.

One cycle each. n0 and n1 run one whole-GPU job each and have one empty device left; the job on
n1 comes first in the snapshot, so n1 entered the one-empty-device bucket first and is offered
before n0; n2 is empty.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind
from gpupool.core.model import Workload

from .helpers import node, project, running, snapshot, train

GIB = 1024


@dataclass(frozen=True)
class Row:
    name: str
    pending: Workload
    shared_on_n2: float | None
    """A fraction already running on n2's device 0."""
    n1_memory_mib: int
    expected_node: str


ROWS = [
    Row("first-offered-of-the-fewest-empty", train("w", "a", 0.5), None, 80 * GIB, "n1"),
    Row("a-shared-device-with-room-first", train("w", "a", 0.5), 0.5, 80 * GIB, "n2"),
    Row("a-shared-device-without-room-is-passed", train("w", "a", 0.5), 0.75, 80 * GIB, "n1"),
    Row(
        "the-first-offered-refuses-its-memory",
        train("w", "a", None, gpu_memory_mib=100 * GIB),
        None,
        80 * GIB,
        "n0",
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_a_fraction_opens_an_empty_device_on_the_first_node_offered(row: Row) -> None:
    nodes = [
        node("n0", 2, gpu_memory_mib=141 * GIB),
        node("n1", 2, gpu_memory_mib=row.n1_memory_mib),
        node("n2", 2, gpu_memory_mib=141 * GIB),
    ]
    work = [
        running(train("on-n1", "b"), "n1", (0,), -60),
        running(train("on-n0", "b"), "n0", (0,), -60),
    ]
    if row.shared_on_n2 is not None:
        work.append(running(train("shared", "b", row.shared_on_n2), "n2", (0,), -60))
    result = run_cycle(snapshot(nodes, [project("a", 4), project("b", 4)], [*work, row.pending]))
    [bind] = [d for d in result.decisions if isinstance(d, Bind)]
    assert [t.node for t in bind.placements] == [row.expected_node]
