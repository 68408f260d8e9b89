"""Kubernetes taints and tolerations, and work that may not be moved (`Workload.movable`).

A node whose NoSchedule / NoExecute taints a workload does not all tolerate is no candidate for
its new tasks, in every action; PreferNoSchedule keeps nothing away. Work already on a tainted
node stays and is counted. A workload that is not movable is never moved, by consolidation or
by the node-level spread / pack of dynamic fractions; evicting it stays allowed.

Rows use the table machinery of `test_guarantees.py`: the run goes to a fixed point (G1, G8 and
G9 checked on every cycle) and the row says exactly what runs and what was evicted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Move
from gpupool.core.model import Taint, TaintEffect, Toleration, TolerationOperator

from .helpers import (
    CORDONED,
    NOT_READY,
    find,
    interactive,
    moves,
    node,
    project,
    running,
    share,
    snapshot,
    train,
)
from .test_guarantees import Case, case, check_case, run_case

NO_SCHEDULE = TaintEffect.NO_SCHEDULE
PREFER = TaintEffect.PREFER_NO_SCHEDULE
NO_EXECUTE = TaintEffect.NO_EXECUTE
EXISTS = TolerationOperator.EXISTS
EQUAL = TolerationOperator.EQUAL

GPU_TAINT = Taint("nvidia.com/gpu", None, NO_SCHEDULE)
DEDICATED_ML = Taint("dedicated", "ml", NO_EXECUTE)
TOLERATE_GPU = Toleration("nvidia.com/gpu", EXISTS)
TOLERATE_ML = Toleration("dedicated", EQUAL, "ml")
TOLERATE_ALL = Toleration(operator=EXISTS)


# ============================================================================================
# Matching: Toleration.tolerates, Node.admits
# ============================================================================================


@dataclass(frozen=True)
class Match:
    id: str
    toleration: Toleration
    taint: Taint
    tolerates: bool


MATCHES = [
    Match("exists-empty-key-any-taint", TOLERATE_ALL, DEDICATED_ML, True),
    Match("exists-empty-key-any-effect", TOLERATE_ALL, Taint("x", "y", PREFER), True),
    Match("exists-empty-key-empty-string", Toleration("", EXISTS), GPU_TAINT, True),
    Match(
        "exists-empty-key-other-effect",
        Toleration(operator=EXISTS, effect=NO_SCHEDULE),
        DEDICATED_ML,
        False,
    ),
    Match("exists-key-any-value", Toleration("dedicated", EXISTS), DEDICATED_ML, True),
    Match("exists-key-ignores-value", Toleration("dedicated", EXISTS, "infra"), DEDICATED_ML, True),
    Match("exists-other-key", Toleration("dedicated", EXISTS), GPU_TAINT, False),
    Match("equal-same-value", TOLERATE_ML, DEDICATED_ML, True),
    Match("equal-value-mismatch", Toleration("dedicated", EQUAL, "infra"), DEDICATED_ML, False),
    Match("equal-no-value-vs-value", Toleration("dedicated"), DEDICATED_ML, False),
    Match("equal-value-vs-no-value", Toleration("nvidia.com/gpu", EQUAL, "x"), GPU_TAINT, False),
    Match("equal-none-equals-empty", Toleration("nvidia.com/gpu", EQUAL, ""), GPU_TAINT, True),
    Match(
        "equal-empty-equals-none",
        Toleration("nvidia.com/gpu"),
        Taint("nvidia.com/gpu", "", NO_SCHEDULE),
        True,
    ),
    Match("equal-other-key", Toleration("other", EQUAL, "ml"), DEDICATED_ML, False),
    Match("effect-none-matches-no-execute", TOLERATE_ML, DEDICATED_ML, True),
    Match(
        "effect-same",
        Toleration("dedicated", EQUAL, "ml", NO_EXECUTE),
        DEDICATED_ML,
        True,
    ),
    Match(
        "effect-mismatch",
        Toleration("dedicated", EQUAL, "ml", NO_SCHEDULE),
        DEDICATED_ML,
        False,
    ),
    Match(
        "effect-no-schedule-not-prefer",
        Toleration("nvidia.com/gpu", EXISTS, effect=NO_SCHEDULE),
        Taint("nvidia.com/gpu", None, PREFER),
        False,
    ),
    # Kubernetes' ToleratesTaint: an empty key with Equal matches any key of that value.
    Match("equal-empty-key-same-value", Toleration(None, EQUAL, "ml"), DEDICATED_ML, True),
    Match("equal-empty-key-other-value", Toleration(None, EQUAL, "x"), DEDICATED_ML, False),
]


@pytest.mark.parametrize("m", [pytest.param(m, id=m.id) for m in MATCHES])
def test_toleration_matching(m: Match) -> None:
    assert m.toleration.tolerates(m.taint) is m.tolerates


@dataclass(frozen=True)
class Admit:
    id: str
    taints: tuple[Taint, ...]
    tolerations: tuple[Toleration, ...]
    admits: bool


ADMITS = [
    Admit("no-taints", (), (), True),
    Admit("cordoned", (CORDONED,), (), False),
    Admit("not-ready", (NOT_READY,), (TOLERATE_GPU,), False),
    Admit("no-execute", (DEDICATED_ML,), (), False),
    Admit("prefer-no-schedule-keeps-nothing-away", (Taint("spot", None, PREFER),), (), True),
    Admit("every-taint-tolerated", (GPU_TAINT, DEDICATED_ML), (TOLERATE_GPU, TOLERATE_ML), True),
    Admit("one-of-two-tolerated", (GPU_TAINT, DEDICATED_ML), (TOLERATE_GPU,), False),
    Admit("tolerate-everything", (CORDONED, NOT_READY, DEDICATED_ML), (TOLERATE_ALL,), True),
]


@pytest.mark.parametrize("a", [pytest.param(a, id=a.id) for a in ADMITS])
def test_node_admits(a: Admit) -> None:
    n = node("n1", taints=a.taints)
    assert n.admits(a.tolerations) is a.admits
    assert bool(n.untolerated_taints(a.tolerations)) is not a.admits


# ============================================================================================
# Scheduling with taints
# ============================================================================================

UNTOLERATED = ("taints it does not tolerate",)

TAINT_CASES: list[Case] = [
    case(
        "cordoned-node-avoided",
        [node("n1", 4, taints=[CORDONED]), node("n2", 4)],
        [project("team", 4)],
        [train("w", "team", 2)],
        running=["w"],
        nodes_of={"w": ("n2",)},
    ),
    case(
        "not-ready-node-avoided",
        [node("n1", 4, taints=[NOT_READY]), node("n2", 4)],
        [project("team", 4)],
        [train("w", "team", 2)],
        running=["w"],
        nodes_of={"w": ("n2",)},
    ),
    case(
        "no-execute-node-avoided",
        [node("n1", 4, taints=[DEDICATED_ML]), node("n2", 4)],
        [project("team", 4)],
        [train("w", "team", 2)],
        running=["w"],
        nodes_of={"w": ("n2",)},
    ),
    case(
        "every-node-cordoned-waits-with-the-taint-reason",
        [node("n1", 4, taints=[CORDONED]), node("n2", 4, taints=[CORDONED, GPU_TAINT])],
        [project("team", 4)],
        [train("w", "team", 1)],
        running=[],
        reasons={
            "w": (
                "no node admits it: 2 nodes have taints it does not tolerate "
                "(node.kubernetes.io/unschedulable, nvidia.com/gpu)",
            )
        },
    ),
    case(
        "tolerated-taint-accepted",
        [node("n1", 4, taints=[GPU_TAINT, DEDICATED_ML])],
        [project("team", 4)],
        [
            train("w", "team", 2, tolerations=[TOLERATE_GPU, TOLERATE_ML]),
            train("everything", "team", 1, tolerations=[TOLERATE_ALL]),
        ],
        running=["w", "everything"],
    ),
    case(
        "value-mismatch-not-tolerated",
        [node("n1", 4, taints=[DEDICATED_ML])],
        [project("team", 4)],
        [train("w", "team", 1, tolerations=[Toleration("dedicated", EQUAL, "infra")])],
        running=[],
        reasons={"w": ("no node admits it: 1 node has taints it does not tolerate (dedicated)",)},
    ),
    case(
        "prefer-no-schedule-does-not-exclude",
        [node("n1", 4, taints=[Taint("spot", "true", PREFER)])],
        [project("team", 4)],
        [train("w", "team", 4)],
        running=["w"],
    ),
    case(
        "selector-and-taints-leave-no-node",
        [
            node("a1", 4, gpu_model="A100"),
            node("h1", 4, gpu_model="H100", taints=[GPU_TAINT]),
        ],
        [project("team", 8)],
        [train("w", "team", 1, node_selector=[("gpu_model", ["H100"])])],
        running=[],
        reasons={
            "w": (
                "no node admits it: the 1 node matching its node selector (gpu_model in [H100])"
                " has taints it does not tolerate (nvidia.com/gpu)",
            )
        },
    ),
    case(
        "gang-that-only-fits-with-a-tainted-node-waits",
        [node("n1", 4, taints=[CORDONED]), node("n2", 4)],
        [project("team", 8)],
        [train("gang", "team", 4, tasks=2)],
        running=[],
        reasons={
            "gang": (
                "largest free block on one node is 4 (1 node has taints it does not tolerate:"
                " node.kubernetes.io/unschedulable)",
            )
        },
    ),
    case(
        "gang-spans-a-tolerated-tainted-node",
        [node("n1", 4, taints=[GPU_TAINT]), node("n2", 4)],
        [project("team", 8)],
        [train("gang", "team", 4, tasks=2, tolerations=[TOLERATE_GPU])],
        running=["gang"],
    ),
    case(
        "fractions-avoid-tainted-nodes",
        # The shared device on n1 is the fraction's first choice, but n1 is cordoned.
        [node("n1", 2, taints=[CORDONED]), node("n2", 2)],
        [project("team", 4)],
        [
            running(interactive("there", "team", 0.5), "n1", (0,)),
            interactive("f", "team", 0.25),
        ],
        running=["there", "f"],
        nodes_of={"there": ("n1",), "f": ("n2",)},
    ),
    case(
        "fraction-tolerating-the-taint-shares-the-device",
        [node("n1", 2, taints=[CORDONED]), node("n2", 2)],
        [project("team", 4)],
        [
            running(interactive("there", "team", 0.5), "n1", (0,)),
            interactive("f", "team", 0.25, tolerations=[TOLERATE_ALL]),
        ],
        running=["there", "f"],
        same_device=(("there", "f"),),
    ),
    case(
        "elastic-tasks-avoid-tainted-nodes",
        [node("n1", 2, taints=[CORDONED]), node("n2", 2)],
        [project("team", 4)],
        [train("e", "team", 1, tasks=4, min_available=1)],
        running=["e"],
        tasks_running={"e": 2},
        tasks_per_node={"n2": 2},
    ),
    case(
        "work-on-a-node-that-became-tainted-stays-and-is-counted",
        [node("n1", 4, taints=[CORDONED]), node("n2", 4)],
        [project("a", 4), project("b", 4)],
        [
            running(train("old", "a", 4), "n1", (0, 1, 2, 3), started_at_s=-600),
            train("b-1", "b", 4),
            train("b-2", "b", 4),
            train("a-2", "a", 4),
        ],
        running=["old", "b-1"],
        nodes_of={"old": ("n1",), "b-1": ("n2",)},
        reasons={
            "b-2": ("1 node has taints it does not tolerate: node.kubernetes.io/unschedulable",),
        },
    ),
    case(
        "reclaim-does-not-place-on-a-tainted-node",
        # b is over its quota on n2 and n1 is cordoned: a reclaims on n2, where it may go.
        [node("n1", 2, taints=[CORDONED]), node("n2", 2)],
        [project("a", 2), project("b", 0)],
        [
            running(train("b-1", "b", 2), "n2", (0, 1), started_at_s=-600),
            train("a-1", "a", 2),
        ],
        running=["a-1"],
        evicted=["b-1"],
        nodes_of={"a-1": ("n2",)},
    ),
    case(
        "preempt-does-not-place-on-a-tainted-node",
        [node("n1", 2, taints=[CORDONED]), node("n2", 2)],
        [project("team", 2)],
        [
            running(train("low", "team", 2, priority=10), "n2", (0, 1), started_at_s=-600),
            train("high", "team", 2, priority=90),
        ],
        running=["high"],
        evicted=["low"],
        nodes_of={"high": ("n2",)},
    ),
    case(
        "consolidation-frees-only-a-node-the-pending-work-may-use",
        # Moving `a` off n1 would make room for `c` there, but n1 is cordoned: `b` moves from
        # n2 to n3 instead.
        [node("n1", 2, taints=[CORDONED]), node("n2", 2), node("n3", 2)],
        [project("team", 6)],
        [
            running(train("a", "team", 1, tolerations=[TOLERATE_ALL]), "n1", (0,)),
            running(train("b", "team", 1), "n2", (0,)),
            running(interactive("x", "team", 1), "n3", (0,)),
            train("c", "team", 2),
        ],
        running=["a", "b", "x", "c"],
        consolidations=(("b", "n3"),),
        nodes_of={"a": ("n1",), "b": ("n3",), "c": ("n2",)},
    ),
    case(
        "consolidation-looks-past-tainted-nodes",
        # The 8 roomiest nodes are cordoned; room is made on the first node `c` may use.
        [
            *(node(f"cordoned-{i}", 2, taints=[CORDONED]) for i in range(8)),
            node("n1", 2),
            node("n2", 2),
        ],
        [project("team", 20)],
        [
            running(train("b", "team", 1), "n1", (0,)),
            running(interactive("x", "team", 1), "n2", (0,)),
            train("c", "team", 2),
        ],
        running=["b", "x", "c"],
        consolidations=(("b", "n2"),),
        nodes_of={"c": ("n1",)},
    ),
    case(
        "same-shape-other-tolerations-is-not-answered-from-the-failure-cache",
        [node("n1", 2, taints=[GPU_TAINT])],
        [project("team", 2)],
        [
            interactive("plain", "team", 0.5),
            interactive("tolerant", "team", 0.5, tolerations=[TOLERATE_GPU]),
        ],
        running=["tolerant"],
    ),
    case(
        "consolidation-movers-avoid-tainted-nodes",
        # `b` could make room on n2 by moving to n1, but n1 is cordoned and `b` does not
        # tolerate it: nothing moves.
        [node("n1", 2, taints=[CORDONED]), node("n2", 2)],
        [project("team", 4)],
        [
            running(interactive("x", "team", 1), "n1", (0,)),
            running(train("b", "team", 1), "n2", (0,)),
            train("c", "team", 2, tolerations=[TOLERATE_ALL]),
        ],
        running=["x", "b"],
    ),
]


@pytest.mark.parametrize("c", [pytest.param(c, id=c.id) for c in TAINT_CASES])
def test_taints(c: Case) -> None:
    check_case(c, run_case(c))


def test_running_work_on_a_tainted_node_is_counted_never_evicted() -> None:
    """Its GPUs count in its project's holding and stay unavailable to others."""
    c = next(c for c in TAINT_CASES if c.id.startswith("work-on-a-node-that-became-tainted"))
    fp = run_case(c)
    assert fp.decisions and not any(d.workload == "old" for d in fp.decisions)
    assert share(fp.result, "a").holding.gpu_milli == 4000
    assert share(fp.result, "b").holding.gpu_milli == 4000


# ============================================================================================
# Work that may not be moved
# ============================================================================================

PINNED = [
    # A non-movable dynamic fraction on a burst device: nothing new lands on that device.
    running(
        interactive("pod", "team", 0.5, gpu_limit=1.0, movable=False),
        "n1",
        (0,),
        burst_device=1,
    ),
]

MOVABLE_CASES: list[Case] = [
    case(
        "consolidation-does-not-move-a-non-movable-workload",
        [node("n1", 2), node("n2", 2)],
        [project("team", 4)],
        [
            running(train("a", "team", 1, movable=False), "n1", (0,)),
            running(interactive("b", "team", 1), "n2", (0,)),
            train("c", "team", 2),
        ],
        running=["a", "b"],
    ),
    case(
        "consolidation-moves-the-movable-one",
        [node("n1", 2), node("n2", 2), node("n3", 2)],
        [project("team", 6)],
        [
            running(train("a", "team", 1, movable=False), "n1", (0,)),
            running(train("m", "team", 1), "n2", (0,)),
            running(interactive("x", "team", 1), "n3", (0,)),
            train("c", "team", 2),
        ],
        running=["a", "m", "x", "c"],
        consolidations=(("m", "n3"),),
        nodes_of={"a": ("n1",), "c": ("n2",)},
    ),
    case(
        "a-non-movable-workload-may-still-be-preempted",
        [node("n1", 2)],
        [project("team", 2)],
        [
            running(train("low", "team", 2, priority=10, movable=False), "n1", (0, 1)),
            train("high", "team", 2, priority=90),
        ],
        running=["high"],
        evicted=["low"],
    ),
    case(
        "a-non-movable-workload-may-still-be-reclaimed",
        [node("n1", 2)],
        [project("a", 2), project("b", 0)],
        [
            running(train("b-1", "b", 2, movable=False), "n1", (0, 1), started_at_s=-600),
            train("a-1", "a", 2),
        ],
        running=["a-1"],
        evicted=["b-1"],
    ),
    case(
        "non-movable-dynamic-fractions-are-not-spread",
        [node("n1", 2)],
        [project("team", 2)],
        [
            interactive("nb-1", "team", 0.5, gpu_limit=1.0, movable=False),
            interactive("nb-2", "team", 0.5, gpu_limit=1.0, movable=False),
        ],
        running=["nb-1", "nb-2"],
        same_physical=(("nb-1", "nb-2"),),
    ),
    case(
        "a-movable-fraction-spreads-away-from-a-non-movable-one",
        [node("n1", 2)],
        [project("team", 2)],
        [
            running(interactive("pod", "team", 0.5, gpu_limit=1.0, movable=False), "n1", (0,)),
            running(interactive("mine", "team", 0.5, gpu_limit=1.0), "n1", (0,)),
        ],
        running=["pod", "mine"],
        same_device=(("pod", "mine"),),
        different_physical=(("pod", "mine"),),
    ),
    case(
        "a-non-movable-burst-device-is-kept-from-whole-gpus",
        [node("n1", 2)],
        [project("team", 2)],
        [*PINNED, train("trainer", "team", 1)],
        running=["pod"],
    ),
    case(
        "a-non-movable-burst-device-is-kept-from-fractions",
        [node("n1", 2)],
        [project("team", 2)],
        [
            *PINNED,
            running(interactive("full", "team", 0.5), "n1", (0,)),
            interactive("f", "team", 0.25),
        ],
        running=["pod", "full"],
    ),
    case(
        "a-burst-device-on-a-node-the-task-no-longer-tolerates-is-kept",
        # `mine` bursts on device 1 of n1, then n1 is cordoned: packing it back would be a
        # restart on a cordoned node, so the device stays its own, even for work that
        # tolerates the taint.
        [node("n1", 2, taints=[CORDONED])],
        [project("team", 2)],
        [
            running(interactive("mine", "team", 0.5, gpu_limit=1.0), "n1", (0,), burst_device=1),
            train("trainer", "team", 1, tolerations=[TOLERATE_ALL]),
        ],
        running=["mine"],
    ),
    case(
        "fractions-on-a-node-they-no-longer-tolerate-are-not-spread",
        [node("n1", 2, taints=[CORDONED])],
        [project("team", 2)],
        [
            running(interactive("nb-1", "team", 0.5, gpu_limit=1.0), "n1", (0,)),
            running(interactive("nb-2", "team", 0.5, gpu_limit=1.0), "n1", (0,)),
        ],
        running=["nb-1", "nb-2"],
        same_physical=(("nb-1", "nb-2"),),
    ),
    case(
        "a-pinned-device-frees-up-when-its-task-is-evicted",
        # The trainer needs device 1, which the pod bursts on: the pod is preempted (it may
        # be, though it may not be moved), and later comes back as a new placement.
        [node("n1", 2)],
        [project("team", 2)],
        [
            replace(PINNED[0], priority=10, preemptible=True, started_at_s=-600),
            train("trainer", "team", 1, priority=90),
        ],
        running=["trainer", "pod"],
        evicted=["pod"],
    ),
]


@pytest.mark.parametrize("c", [pytest.param(c, id=c.id) for c in MOVABLE_CASES])
def test_movable(c: Case) -> None:
    fp = run_case(c)
    check_case(c, fp)
    fixed = {w.name for w in c.workloads if not w.movable}
    assert not [m for m in moves(fp.decisions) if m.workload in fixed]


def test_node_level_emits_no_move_for_a_non_movable_workload_whose_device_is_claimed() -> None:
    """A non-movable fraction that bursts on device 1 (it arrived so): the whole-GPU trainer is
    not put on device 1, so no PACK is needed; without the pin it would be (the movable twin)."""
    nodes = [node("n1", 2)]
    projects = [project("team", 2)]
    for movable in (False, True):
        pod = replace(PINNED[0], movable=movable)
        result = run_cycle(snapshot(nodes, projects, [pod, train("trainer", "team", 1)]))
        pod_moves = [d for d in result.decisions if isinstance(d, Move) and d.workload == "pod"]
        if movable:
            assert [m.target.burst_device for m in pod_moves] == [None]
        else:
            assert pod_moves == []
            assert "trainer" in result.pending_reasons


def test_a_non_movable_dynamic_fraction_gets_no_burst_device_at_bind_time() -> None:
    """Binding a pod onto an idle device to burst would leave it there for good (it cannot be
    packed back): it is bound to the device it is charged to."""
    s = snapshot(
        [node("n1", 2)],
        [project("team", 2)],
        [
            running(interactive("first", "team", 0.5, gpu_limit=1.0), "n1", (0,)),
            interactive("pod", "team", 0.5, gpu_limit=1.0, movable=False),
        ],
    )
    result = run_cycle(s)
    assert [d.workload for d in result.decisions] == ["pod", "first"]  # Bind, then spread
    bind = result.decisions[0]
    assert not isinstance(bind, Move)
    assert [p.burst_device for p in bind.placements] == [None]
    assert find(s, "pod").movable is False
