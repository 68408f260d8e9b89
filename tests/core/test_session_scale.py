"""What keeps a cycle cheap, checked against the plain computation it replaces: the
fragmentation memo keyed by which shapes fit."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from cycle_bench.workload import build_snapshot

from gpupool.core.candidates import cycle_typical
from gpupool.core.model import Snapshot
from gpupool.core.policies.base import TypicalShape
from gpupool.core.policies.default import DefaultPolicy
from gpupool.core.policies.fgd import FgdPolicy


def _typical(s: Snapshot) -> tuple[TypicalShape, ...]:
    pending = [w for w in s.workloads if not w.placements]
    return cycle_typical(pending, max(n.gpu_memory_mib for n in s.nodes))


@pytest.mark.parametrize("policy_class", [FgdPolicy, DefaultPolicy])
def test_fragmentation_memo_answers_as_a_fresh_measure(policy_class: type[FgdPolicy]) -> None:
    """The memo is keyed by which shapes' CPU and memory fit, not by the amounts: every answer
    equals that of a policy with an empty memo, over free amounts on both sides of the cuts."""
    typical = _typical(build_snapshot(40, 0))
    policy = policy_class(typical)
    cpus = sorted({t.shape.cpu_milli for t in typical})
    memories = sorted({t.shape.memory_mib for t in typical})
    rng = random.Random(7)
    fills = [0, 160, 230, 320, 470, 650, 810, 1000]
    for _ in range(600):
        cpu = rng.choice(cpus) + rng.choice((-1, 0, 1, 500, -500))
        memory = rng.choice(memories) + rng.choice((-1, 0, 1, 4096))
        free = [1000 - rng.choice(fills) for _ in range(8)]
        model = rng.choice((None, "A100"))
        expected = policy_class(typical).fragmentation(model, cpu, memory, free)
        assert policy.fragmentation(model, cpu, memory, free) == expected
