"""The packing policies and the fragmentation measure on hand-checked cases, and the score
cache against a brute-force packer."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.core.packing import (
    BestFitPolicy,
    FgdPolicy,
    Packer,
    PackingState,
    PackNode,
    PlacementPolicy,
    PodShape,
    PolicyName,
    TypicalShape,
    make_policy,
    node_fragmentation_milli,
    typical_shapes,
)

EXAMPLES = int(os.environ.get("GPUPOOL_PROPERTY_EXAMPLES", "200"))

WHOLE = PodShape(cpu_milli=4000, memory_mib=1024, gpu_count=1, gpu_milli=1000)
FRACTION_300 = PodShape(cpu_milli=2000, memory_mib=1024, gpu_count=1, gpu_milli=300)


def first(count: int) -> int:
    return 0


def node(
    name: str, gpus: int, cpu: int = 64000, memory: int = 262144, model: str = "A"
) -> PackNode:
    return PackNode(name, cpu, memory, gpus, model)


# --- the fragmentation measure -------------------------------------------------------------

HALF_HALF = (TypicalShape(WHOLE, 0.5), TypicalShape(FRACTION_300, 0.5))


@pytest.mark.parametrize(
    ("case", "model", "cpu_free", "devices", "typical", "memory_free", "expected"),
    [
        # whole GPU: 1 device has room -> fragments are the other two (500 + 200);
        # 300 milli: two devices have room -> only the 200 is a fragment. 0.5*700 + 0.5*200.
        ("both shapes fit", "A", 64000, (1000, 500, 200), HALF_HALF, None, 450.0),
        ("no free GPU", "A", 64000, (0, 0), HALF_HALF, None, 0.0),
        # too little CPU for the whole-GPU shape (4000): all 1700 free is a fragment for it.
        ("cpu too small for one", "A", 3000, (1000, 500, 200), HALF_HALF, None, 950.0),
        ("cpu too small for both", "A", 1000, (1000, 500, 200), HALF_HALF, None, 1700.0),
        # no device with a whole GPU free: the whole-GPU shape sees everything as fragment.
        ("no whole device", "A", 64000, (900, 500), HALF_HALF, None, 0.5 * 1400 + 0.0),
        ("memory ignored by default", "A", 64000, (1000,), HALF_HALF, None, 0.0),
        ("memory counted when given", "A", 64000, (1000,), HALF_HALF, 512, 1000.0),
        (
            "wrong model",
            "B",
            64000,
            (1000,),
            (TypicalShape(PodShape(0, 0, 1, 1000, ("A",)), 1.0),),
            None,
            1000.0,
        ),
        (
            "shape without GPU sees all free as fragment",
            "A",
            64000,
            (1000, 400),
            (TypicalShape(PodShape(1000, 0, 0, 0), 1.0),),
            None,
            1400.0,
        ),
        (
            "multi-GPU shape needs enough whole devices",
            "A",
            64000,
            (1000, 1000, 1000, 600),
            (TypicalShape(PodShape(0, 0, 4, 1000), 1.0),),
            None,
            3600.0,
        ),
    ],
)
def test_node_fragmentation(
    case: str,
    model: str,
    cpu_free: int,
    devices: tuple[int, ...],
    typical: tuple[TypicalShape, ...],
    memory_free: int | None,
    expected: float,
) -> None:
    assert node_fragmentation_milli(model, cpu_free, devices, typical, memory_free) == (
        pytest.approx(expected)
    ), case


def test_typical_shapes_weights_and_coverage() -> None:
    shapes = [WHOLE] * 6 + [FRACTION_300] * 3 + [PodShape(0, 0, 8, 1000)]
    every = typical_shapes(shapes)
    assert [(t.shape, t.weight) for t in every] == [
        (WHOLE, pytest.approx(0.6)),
        (FRACTION_300, pytest.approx(0.3)),
        (PodShape(0, 0, 8, 1000), pytest.approx(0.1)),
    ]
    # 90% coverage keeps the first two, renormalised to sum to 1.
    top = typical_shapes(shapes, coverage=0.9)
    assert [t.shape for t in top] == [WHOLE, FRACTION_300]
    assert sum(t.weight for t in top) == pytest.approx(1.0)
    assert top[0].weight == pytest.approx(6 / 9)


# --- policies: which node and devices --------------------------------------------------------


def place_once(
    policy_name: PolicyName,
    nodes: list[PackNode],
    before: list[tuple[int, tuple[int, ...], PodShape]],
    pod: PodShape,
    typical: tuple[TypicalShape, ...],
) -> tuple[str, tuple[int, ...]] | None:
    """Put the `before` pods exactly where given, then let the policy place `pod`."""
    state = PackingState(nodes)
    for index, devices, shape in before:
        state.assign(index, devices, shape)
    packer = Packer(state, make_policy(policy_name, nodes, typical, first), first)
    placed = packer.place(pod)
    return None if placed is None else (nodes[placed.node].name, placed.devices)


ONLY_600 = (TypicalShape(PodShape(0, 0, 1, 600), 1.0),)
ONLY_WHOLE = (TypicalShape(WHOLE, 1.0),)
POD_300 = PodShape(1000, 1024, 1, 300)
SHARE_700 = PodShape(0, 0, 1, 700)


@pytest.mark.parametrize(
    ("case", "policy", "nodes", "before", "pod", "typical", "expected"),
    [
        (
            # a: one empty device; b: a device with 300 free. Best fit takes the tighter b.
            "best-fit: the fuller node",
            PolicyName.BEST_FIT,
            [node("a", 1), node("b", 1)],
            [(1, (0,), SHARE_700)],
            POD_300,
            ONLY_600,
            ("b", (0,)),
        ),
        (
            # b's 300 free is already a fragment for the 600 shape: filling it costs nothing
            # (-300), while 300 on a leaves 700, still usable (+0).
            "fgd: fills an existing fragment",
            PolicyName.FGD,
            [node("a", 1), node("b", 1)],
            [(1, (0,), SHARE_700)],
            POD_300,
            ONLY_600,
            ("b", (0,)),
        ),
        (
            # a: empty; b: 700 free. Putting 300 on b leaves 400, a fragment for the 600
            # shape (+400); on a it leaves 700, still usable (+0). Best fit would pick b.
            "fgd: keeps room the target workload can use",
            PolicyName.FGD,
            [node("a", 1), node("b", 1)],
            [(1, (0,), PodShape(0, 0, 1, 300))],
            POD_300,
            ONLY_600,
            ("a", (0,)),
        ),
        (
            "best-fit: the same case, the tighter device",
            PolicyName.BEST_FIT,
            [node("a", 1), node("b", 1)],
            [(1, (0,), PodShape(0, 0, 1, 300))],
            POD_300,
            ONLY_600,
            ("b", (0,)),
        ),
        (
            # within one node FGD chooses the device: 300 on the device with 300 free closes
            # a fragment for the whole-GPU shape (-300); on the empty one it opens one (+700).
            "fgd: the device that closes a fragment",
            PolicyName.FGD,
            [node("a", 2)],
            [(0, (1,), SHARE_700)],
            POD_300,
            ONLY_WHOLE,
            ("a", (1,)),
        ),
        (
            "gpu-packing: a shared device before an empty node",
            PolicyName.GPU_PACKING,
            [node("a", 2), node("b", 2)],
            [(1, (1,), PodShape(0, 0, 1, 500))],
            POD_300,
            ONLY_WHOLE,
            ("b", (1,)),
        ),
        (
            # tags are job sizes (Gandiva): a holds a 2-GPU pod, c a sharing pod; a new
            # sharing pod joins c rather than the fuller a or the empty b.
            "gpu-clustering: the node holding the same kind of pod",
            PolicyName.GPU_CLUSTERING,
            [node("a", 4), node("b", 2), node("c", 2)],
            [(0, (0, 1), PodShape(0, 0, 2, 1000)), (2, (0,), PodShape(0, 0, 1, 500))],
            POD_300,
            ONLY_WHOLE,
            ("c", (0,)),
        ),
        (
            # b has GPUs but little CPU left per GPU; a is CPU-rich. A CPU-only pod changes
            # no FGD fragment on either node (ties), but on b it strands GPU that b's CPU
            # could have fed: our default sends it to a.
            "default: CPU-only work goes where it strands no GPU",
            PolicyName.DEFAULT,
            [node("b", 4, cpu=20000), node("a", 1, cpu=96000)],
            [],
            PodShape(8000, 1024, 0, 0),
            (TypicalShape(PodShape(4000, 1024, 1, 1000), 1.0),),
            ("a", ()),
        ),
        (
            "nothing fits: dropped",
            PolicyName.FGD,
            [node("a", 1, cpu=1000)],
            [],
            PodShape(2000, 0, 1, 300),
            ONLY_WHOLE,
            None,
        ),
        (
            "gpu model filter",
            PolicyName.BEST_FIT,
            [node("a", 1, model="T4"), node("b", 1, model="V100")],
            [],
            PodShape(0, 0, 1, 1000, ("V100",)),
            ONLY_WHOLE,
            ("b", (0,)),
        ),
        (
            "memory must fit",
            PolicyName.BEST_FIT,
            [node("a", 1, memory=512), node("b", 1, memory=4096)],
            [],
            PodShape(0, 1024, 1, 1000),
            ONLY_WHOLE,
            ("b", (0,)),
        ),
        (
            "multi-GPU pods take whole devices",
            PolicyName.FGD,
            [node("a", 4)],
            [(0, (0,), SHARE_700)],
            PodShape(0, 0, 2, 1000),
            ONLY_WHOLE,
            ("a", (1, 2)),
        ),
    ],
)
def test_policy_choice(
    case: str,
    policy: PolicyName,
    nodes: list[PackNode],
    before: list[tuple[int, tuple[int, ...], PodShape]],
    pod: PodShape,
    typical: tuple[TypicalShape, ...],
    expected: tuple[str, tuple[int, ...]] | None,
) -> None:
    assert place_once(policy, nodes, before, pod, typical) == expected, case


def test_random_policy_uses_the_drivers_pick() -> None:
    nodes = [node("a", 2), node("b", 2)]
    picks: list[int] = []

    def last(count: int) -> int:
        picks.append(count)
        return count - 1

    state = PackingState(nodes)
    packer = Packer(state, make_policy(PolicyName.RANDOM, nodes, ONLY_WHOLE, last), last)
    placed = packer.place(WHOLE)
    assert placed is not None
    assert (placed.node, placed.devices) == (1, (1,))
    assert picks == [2, 2]  # one pick among the two tied nodes, one among the two devices


# --- the cache is exact ----------------------------------------------------------------------


class BruteForce:
    """Scores every node for every pod: what `Packer` must reproduce with its cache."""

    def __init__(self, state: PackingState, policy: PlacementPolicy) -> None:
        self.state = state
        self.policy = policy

    def place(self, shape: PodShape) -> tuple[int, tuple[int, ...]] | None:
        best: tuple[float, int, tuple[int, ...]] | None = None
        for index in range(len(self.state.nodes)):
            scored = self.policy.evaluate(self.state, index, shape)
            if scored is not None and (best is None or scored[0] < best[0]):
                best = (scored[0], index, scored[1])
        if best is None:
            return None
        self.state.assign(best[1], best[2], shape)
        return best[1], best[2]


SHAPES = st.builds(
    lambda cpu, mem, kind, milli: (
        PodShape(cpu, mem, 0, 0)
        if kind == 0
        else PodShape(cpu, mem, 1, milli)
        if kind == 1
        else PodShape(cpu, mem, kind, 1000)
    ),
    st.sampled_from([0, 1000, 4000, 16000]),
    st.sampled_from([0, 1024, 8192]),
    st.sampled_from([0, 1, 1, 2, 4]),
    st.sampled_from([100, 250, 500, 700, 1000]),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=6),
    pods=st.lists(SHAPES, min_size=1, max_size=40),
    policy=st.sampled_from(
        [
            PolicyName.BEST_FIT,
            PolicyName.DOT_PRODUCT,
            PolicyName.GPU_PACKING,
            PolicyName.GPU_CLUSTERING,
            PolicyName.FGD,
            PolicyName.DEFAULT,
        ]
    ),
)
def test_cached_packer_matches_brute_force(
    gpus: list[int], pods: list[PodShape], policy: PolicyName
) -> None:
    nodes = [node(f"n{i}", g, cpu=8000 * g, memory=32768 * g) for i, g in enumerate(gpus)]
    typical = typical_shapes([p for p in pods if p.gpu_count] or [WHOLE])
    cached_state, brute_state = PackingState(nodes), PackingState(nodes)
    cached = Packer(cached_state, make_policy(policy, nodes, typical, first), first)
    brute = BruteForce(brute_state, make_policy(policy, nodes, typical, first))
    for pod in pods:
        placed = cached.place(pod)
        assert (None if placed is None else (placed.node, placed.devices)) == brute.place(pod)
    # The invariants hold on the way: no device over-committed, no CPU or memory negative.
    for i, spec in enumerate(nodes):
        assert all(0 <= free <= 1000 for free in cached_state.device_free[i])
        assert 0 <= cached_state.cpu_free[i] <= spec.cpu_milli
        assert 0 <= cached_state.memory_free[i] <= spec.memory_mib
    used = sum(1000 * len(f) - sum(f) for f in cached_state.device_free)
    assert used == cached_state.allocated_gpu_milli


def test_fgd_memo_keys_on_memory_when_it_counts() -> None:
    policy = FgdPolicy((TypicalShape(PodShape(0, 4096, 1, 1000), 1.0),), count_memory=True)
    assert policy.fragmentation("A", 1000, 8192, (1000,)) == 0.0
    assert policy.fragmentation("A", 1000, 1024, (1000,)) == 1000.0


def test_best_fit_normalises_by_the_largest_node() -> None:
    nodes = [node("small", 1, cpu=8000), node("big", 8, cpu=96000)]
    policy = BestFitPolicy(nodes)
    state = PackingState(nodes)
    small = policy.evaluate(state, 0, WHOLE)
    big = policy.evaluate(state, 1, WHOLE)
    assert small is not None and big is not None
    assert small[0] < big[0]  # lower is better: the small node is left emptier of nothing
