"""What keeps a cycle cheap, checked against the plain computation it replaces: the bin-pack
search that skips nodes that cannot win, and the fragmentation memo keyed by which shapes fit."""

from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from cycle_workload import build_snapshot

from gpupool.core.candidates import cycle_typical
from gpupool.core.model import GpuRequestKind, Snapshot
from gpupool.core.placement import Placer
from gpupool.core.policies.base import TypicalShape
from gpupool.core.policies.default import DefaultPolicy
from gpupool.core.policies.fgd import FgdPolicy
from gpupool.core.session import Session, Statement


def _typical(s: Snapshot) -> tuple[TypicalShape, ...]:
    pending = [w for w in s.workloads if not w.placements]
    return cycle_typical(pending, max(n.gpu_memory_mib for n in s.nodes))


def _fraction_queue(s: Snapshot) -> list[int]:
    return [
        i
        for i, w in enumerate(s.workloads)
        if not w.placements and w.gpu.kind is GpuRequestKind.FRACTION
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("placement", ["binpack", "spread"])
def test_binpack_search_that_skips_empty_devices_finds_what_the_full_search_finds(
    seed: int, placement: str
) -> None:
    """The placer stops before the nodes with an empty device once a shared device scored
    below the policy's bound; a placer without the bound scores every candidate. Both place
    the same fractions one after the other, each on its own session."""
    base = build_snapshot(60, seed)
    s = dataclasses.replace(base, settings=dataclasses.replace(base.settings, placement=placement))
    bounded_session, full_session = Session(s), Session(s)
    bounded = Placer(bounded_session, _typical(s))
    full = Placer(full_session, _typical(s))
    assert bounded.policy.shared_score_bound is not None
    full.policy.shared_score_bound = None
    bounded_statement, full_statement = Statement(bounded_session), Statement(full_session)
    placed = 0
    for index in _fraction_queue(s):
        spec = s.workloads[index]
        found = bounded.find(spec, 0)
        assert found == full.find(spec, 0)
        if found is not None:
            placed += 1
            bounded_statement.place(bounded_session.works[index], found)
            full_statement.place(full_session.works[index], found)
    assert placed > 20  # enough fractions placed for the state to move


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
