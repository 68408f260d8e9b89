"""Placement policies by name: the registry, and the cycle's one placer scoring with whichever
policy the settings name (table tests on small clusters)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind
from gpupool.core.policies import canonical_name, policy_names, register
from gpupool.core.policies.base import Capacity, PlacementPolicy, PodShape, Scored

from .helpers import node, project, running, snapshot, step, train


@register("test-last-node")
class LastNodePolicy(PlacementPolicy):
    """A policy written in a test, as a user would add one: the highest-numbered node."""

    def score(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        free = state.free_parts(node)
        devices = tuple(d for d, room in enumerate(free) if room >= shape.gpu_milli)
        return -float(node), devices[: shape.gpu_count]


def test_every_policy_is_registered_under_its_name() -> None:
    names = policy_names()
    for name in (
        "binpack",
        "spread",
        "fgd",
        "default",
        "best-fit",
        "dot-product",
        "gpu-clustering",
        "gpu-packing",
        "random",
        "test-last-node",
    ):
        assert name in names
    assert canonical_name("pack") == "binpack"  # an alias, not listed as a name
    assert "pack" not in names


def test_an_unknown_name_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"no placement policy is called 'fdg'; choose one of: "):
        canonical_name("fdg")


def test_a_name_cannot_be_registered_twice() -> None:
    with pytest.raises(ValueError, match="two placement policies are called 'fgd'"):
        register("fgd")(LastNodePolicy)


@dataclass(frozen=True)
class Case:
    placement: str
    expected_node: str


# node a has 2 of its 4 devices taken, node b and c none: the classic policies differ, the
# fragmentation-aware ones see no fragment either way and keep the fuller node (the first
# candidate) on their tie
CASES = [
    Case("binpack", "a"),
    Case("pack", "a"),
    Case("spread", "b"),
    Case("fgd", "a"),
    Case("default", "a"),
    Case("best-fit", "a"),
    Case("test-last-node", "c"),
]


@pytest.mark.parametrize("c", CASES, ids=[c.placement for c in CASES])
def test_the_cycle_places_with_the_named_policy(c: Case) -> None:
    s = snapshot(
        [node("a", 4), node("b", 4), node("c", 4)],
        [project("p", 12)],
        [running(train("old", "p", 2), "a", [0, 1]), train("new", "p", 1)],
        placement=canonical_name(c.placement),
    )
    result = run_cycle(s)
    binds = [d for d in result.decisions if isinstance(d, Bind)]
    assert [(b.workload, b.placements[0].node) for b in binds] == [("new", c.expected_node)]


def test_fractions_share_a_device_under_every_policy_that_packs() -> None:
    """Two half-GPU tasks on an empty 2-node cluster: every policy but spread-like ones puts
    the second beside the first (no fragment left), and none splits a device badly."""
    for name in ("binpack", "fgd", "default", "best-fit"):
        s = snapshot(
            [node("a", 2), node("b", 2)],
            [project("p", 4)],
            [train("h1", "p", 0.5), train("h2", "p", 0.5)],
            placement=name,
        )
        after, _ = step(s)
        devices = {(p.node, p.devices) for w in after.workloads for p in w.placements}
        assert len(devices) == 1, (name, devices)


def test_a_random_tie_policy_is_deterministic_in_the_cycle() -> None:
    s = snapshot(
        [node(f"n{i}", 4) for i in range(6)],
        [project("p", 24)],
        [train(f"w{i}", "p", 1) for i in range(5)],
        placement="random",
    )
    first = run_cycle(s)
    assert first == run_cycle(s)
    nodes = {b.placements[0].node for b in first.decisions if isinstance(b, Bind)}
    assert len(nodes) > 1  # it does pick among the ties, unlike the first-fit policies
