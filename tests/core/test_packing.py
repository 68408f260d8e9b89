"""The packing policies and the fragmentation measure on hand-checked cases, and the score
cache against a brute-force packer."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.core.packing import (
    DevicePlan,
    FgdPolicy,
    Packer,
    PackingState,
    PackNode,
    PlacementPolicy,
    PodShape,
    PolicyName,
    TypicalShape,
    artifact_typical_shapes,
    fgd_fragmentation_milli,
    fgd_node_score,
    make_policy,
    node_fragmentation_milli,
    typical_shapes,
)
from gpupool.core.policies.best_fit import BestFitPolicy
from gpupool.core.policies.default import plan_step

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


# --- FGD as the artifact runs it -------------------------------------------------------------


def test_artifact_typical_shapes_count_every_pod_and_cut_at_the_popularity() -> None:
    cpu_only = PodShape(8000, 4096, 0, 0)
    whole = PodShape(4000, 1024, 1, 1000)
    whole_more_memory = PodShape(4000, 8192, 1, 1000)  # the same shape once memory is left out
    share = PodShape(2000, 1024, 1, 500)
    rare = PodShape(2000, 1024, 8, 1000)
    shapes = [whole] * 50 + [whole_more_memory] * 10 + [cpu_only] * 25 + [share] * 14 + [rare]
    typical = artifact_typical_shapes(shapes)
    # 60 whole (memory merged), 25 CPU-only, 14 shares: 99 of 100 pods, past 95%; the rare
    # 8-GPU shape is cut and the rest renormalised.
    assert [(t.shape, t.weight) for t in typical] == [
        (PodShape(4000, 0, 1, 1000), pytest.approx(60 / 99)),
        (PodShape(8000, 0, 0, 0), pytest.approx(25 / 99)),
        (PodShape(2000, 0, 1, 500), pytest.approx(14 / 99)),
    ]
    assert len(artifact_typical_shapes(shapes, popularity_pct=100)) == 4


def test_artifact_typical_shapes_break_equal_counts_by_larger_cpu_first() -> None:
    small, large = PodShape(1000, 0, 1, 1000), PodShape(9000, 0, 1, 1000)
    typical = artifact_typical_shapes([small, large])
    assert [t.shape for t in typical] == [large, small]


@pytest.mark.parametrize(
    ("before", "after", "score"),
    [(1000.0, 1000.0, 50), (0.0, 1000.0, 26), (1000.0, 0.0, 73), (0.0, 1e7, 0), (1e7, 0.0, 100)],
)
def test_fgd_node_score_is_the_truncated_sigmoid(before: float, after: float, score: int) -> None:
    assert fgd_node_score(before, after) == score


def test_fgd_fragmentation_matches_the_measure_and_is_bit_equal_on_equal_states() -> None:
    typical = (*HALF_HALF, TypicalShape(PodShape(1000, 0, 0, 0), 0.0))
    for cpu, devices in [(64000, (1000, 500, 200)), (3000, (1000, 500, 200)), (1000, (0, 300))]:
        assert fgd_fragmentation_milli("A", cpu, devices, typical) == pytest.approx(
            node_fragmentation_milli("A", cpu, devices, typical)
        )
    # A CPU-only pod on a node whose shapes all lack GPU anyway changes nothing: exactly 50.
    before = fgd_fragmentation_milli("A", 9000, (100, 100), HALF_HALF)
    after = fgd_fragmentation_milli("A", 1000, (100, 100), HALF_HALF)
    assert fgd_node_score(before, after) == 50


def test_fgd_sharing_pod_takes_the_first_device_with_the_best_integer_score() -> None:
    # Devices with 1000 and 990 free, a target workload of whole GPUs: 100 on the 990 device
    # shrinks a fragment (990 -> 890: score 52), on the whole one it leaves no whole device
    # (fragment 990 -> 1890: score 28).
    nodes = [node("a", 2)]
    state = PackingState(nodes)
    state.assign(0, (1,), PodShape(0, 0, 1, 10))
    policy = FgdPolicy(ONLY_WHOLE)
    scored = policy.evaluate(state, 0, PodShape(0, 0, 1, 100))
    assert scored is not None and scored[1] == (1,)
    # Equal integer scores: the lower-numbered device, as the artifact's loop keeps the first.
    state = PackingState([node("b", 2)])
    scored = policy.evaluate(state, 0, PodShape(0, 0, 1, 100))
    assert scored is not None and scored[1] == (0,)


def test_packer_breaks_ties_by_the_node_priority() -> None:
    nodes = [node("a", 1), node("b", 1), node("c", 1)]
    state = PackingState(nodes)
    packer = Packer(state, make_policy(PolicyName.FGD, nodes, ONLY_WHOLE, first), first, (2, 0, 1))
    placed = [packer.place(WHOLE) for _ in range(3)]
    assert [p.node for p in placed if p is not None] == [1, 2, 0]


def test_packer_lets_pick_choose_among_ties_of_equal_rank() -> None:
    nodes = [node("a", 1), node("b", 1), node("c", 1)]
    picks: list[int] = []

    def last(count: int) -> int:
        picks.append(count)
        return count - 1

    state = PackingState(nodes)
    packer = Packer(state, make_policy(PolicyName.FGD, nodes, ONLY_WHOLE, last), last, (1, 0, 0))
    placed = [packer.place(WHOLE) for _ in range(3)]
    assert [p.node for p in placed if p is not None] == [2, 1, 0]
    assert picks == [2]  # only the first placement had two nodes of the best rank


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, -1.0, -2.0, 5.0]), st.integers(0, 5)), min_size=1))
def test_the_tie_walk_in_priority_order_finds_the_ties_of_the_first_rank(
    nodes: list[tuple[float, int]],
) -> None:
    """`Packer` reads the ties from the nodes in priority order: the same nodes, in the same
    order, as filtering every node's score, then the lowest rank among the ties."""
    scores = [score for score, _ in nodes]
    rank = [r for _, r in nodes]
    best = min(scores)
    ties = [i for i, s in enumerate(scores) if s == best]
    first = min(rank[i] for i in ties)
    expected = [i for i in ties if rank[i] == first]
    order = sorted(range(len(nodes)), key=rank.__getitem__)
    assert Packer._first_rank_ties(scores, best, rank, order) == expected


def test_packer_priority_leaves_the_random_policy_random() -> None:
    nodes = [node("a", 1), node("b", 1)]
    picks: list[int] = []

    def last(count: int) -> int:
        picks.append(count)
        return count - 1

    state = PackingState(nodes)
    policy = make_policy(PolicyName.RANDOM, nodes, ONLY_WHOLE, last)
    placed = Packer(state, policy, last, (0, 1)).place(WHOLE)
    assert placed is not None and placed.node == 1
    assert picks[0] == 2


def test_packer_priority_needs_one_rank_per_node() -> None:
    nodes = [node("a", 1)]
    with pytest.raises(ValueError, match="one per node"):
        Packer(
            PackingState(nodes), make_policy(PolicyName.FGD, nodes, ONLY_WHOLE, first), first, ()
        )


# --- our default: planned device fills -------------------------------------------------------


def test_device_plan_is_the_best_fit_decreasing_packing_of_the_shares() -> None:
    typical = (
        TypicalShape(PodShape(0, 0, 1, 470), 0.4),
        TypicalShape(PodShape(0, 0, 1, 650), 0.2),
        TypicalShape(PodShape(0, 0, 1, 320), 0.2),
        TypicalShape(WHOLE, 0.2),
    )
    plan = DevicePlan.of(typical, pods=10)
    # 4 x 470, 2 x 650, 2 x 320 -> 650 + 320 twice, 470 + 470 twice
    steps = {(650, 320), (320, 650), (470, 470)}
    assert plan.completes == frozenset(plan_step(used, share) for used, share in steps)
    assert plan.continues == frozenset(plan_step(0, share) for share in (320, 650, 470))
    assert plan.rank(free=350, share=320) == 0  # 650 + 320 completes a planned device
    assert plan.rank(free=1000, share=470) == 1  # a new device starts one
    assert plan.rank(free=530, share=320) == 2  # 470 + 320 is in no plan
    assert DevicePlan.of((TypicalShape(WHOLE, 1.0),)).completes == frozenset()


def test_device_plan_steps_name_the_share_not_only_the_total() -> None:
    typical = (
        TypicalShape(PodShape(0, 0, 1, 770), 0.2),
        TypicalShape(PodShape(0, 0, 1, 650), 0.1),
        TypicalShape(PodShape(0, 0, 1, 350), 0.1),
        TypicalShape(PodShape(0, 0, 1, 230), 0.2),
        TypicalShape(PodShape(0, 0, 1, 220), 0.4),
    )
    plan = DevicePlan.of(typical, pods=10)
    # 770 + 230 twice, 650 + 350, 4 x 220. A 230 next to a 650 reaches 880, the total of
    # 4 x 220, and a 650 is part of a planned device: by totals alone that step completes one.
    assert plan.rank(free=350, share=230) == 2
    assert plan.rank(free=350, share=350) == 0
    assert plan.rank(free=340, share=220) == 0  # 3 x 220 + 220
    assert plan.rank(free=560, share=220) == 1  # 2 x 220 + 220
    assert plan.rank(free=1000, share=230) == 1
    assert plan.rank(free=230, share=230) == 0  # 770 + 230
    assert plan.rank(free=780, share=230) == 2  # 220 + 230 is in no plan


def test_default_follows_the_plan_where_fgd_looks_one_pod_ahead() -> None:
    typical = (
        TypicalShape(PodShape(0, 0, 1, 470), 0.4),
        TypicalShape(PodShape(0, 0, 1, 650), 0.2),
        TypicalShape(PodShape(0, 0, 1, 320), 0.2),
        TypicalShape(PodShape(0, 0, 1, 1000), 0.2),
    )
    nodes = [node("a", 1), node("b", 1)]
    before: list[tuple[int, tuple[int, ...], PodShape]] = [(0, (0,), PodShape(0, 0, 1, 470))]
    pod = PodShape(0, 0, 1, 320)
    # FGD: 320 next to the 470 leaves 210 (fragment 212 -> 210), on the empty b it leaves 680,
    # a fragment for the whole GPU (0 -> 136): a. The plan pairs 470 with 470 and 320 with 650,
    # so 470 + 320 is off plan and a 320 starts a device on b.
    assert place_once(PolicyName.FGD, nodes, before, pod, typical) == ("a", (0,))
    assert place_once(PolicyName.DEFAULT, nodes, before, pod, typical) == ("b", (0,))


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.sampled_from([PolicyName.FGD, PolicyName.DEFAULT]),
    st.lists(
        st.tuples(
            st.integers(0, 2),  # node
            st.sampled_from(
                [
                    PodShape(1000, 512, 1, 250),
                    PodShape(0, 0, 1, 500),
                    WHOLE,
                    PodShape(63500, 0, 0, 0),  # CPU alone: the node's devices stay as they are
                    PodShape(0, 262000, 0, 0),  # memory alone
                ]
            ),
        ),
        max_size=12,
    ),
    st.sampled_from([PodShape(500, 256, 1, 300), PodShape(2000, 0, 2, 1000), WHOLE]),
)
def test_a_policy_scores_a_node_changed_in_place_as_a_fresh_one_does(
    name: PolicyName, pods: list[tuple[int, PodShape]], asked: PodShape
) -> None:
    # FGD keeps the state each node was last scored in with its measure (`FgdPolicy._before`);
    # the packing state changes a node's free parts in place (the same list), so a policy that
    # kept the list rather than its values, or skipped the CPU or memory, would score a stale
    # node.
    typical = (
        TypicalShape(PodShape(1000, 512, 1, 250), 0.5),
        TypicalShape(PodShape(0, 0, 1, 500), 0.3),
        TypicalShape(WHOLE, 0.2),
    )
    nodes = [node(f"n{i}", 4) for i in range(3)]
    state = PackingState(nodes)
    kept = make_policy(name, nodes, typical, lambda _: 0)
    for target, pod in pods:
        for n in range(len(nodes)):
            fresh = make_policy(name, nodes, typical, lambda _: 0)
            assert kept.evaluate(state, n, asked) == fresh.evaluate(state, n, asked)
        fits = kept.evaluate(state, target, pod)
        if fits is not None:
            state.assign(target, fits[1], pod)
