"""Table tests of behaviours a careful scheduler has (issue 13), each beside its scenario file:

- a. a project at its fair share waits with its bigger job while one below its share gets the
  free GPU, and never evicts its own work of the same priority for it (scenario 13);
- b. inside a department at its limit, a higher-priority sibling reclaims from a sibling above its
  fair share once that one's min runtime is over (scenario 14);
- c. one reclaim takes victims from projects of several departments for a 4-GPU gang
  (scenario 15);
- d. consolidation moves fractional and GPU-memory work too: small jobs packed onto one device
  free a whole one (scenario 16);
- e. reclaim evicts only the victims the placement needs (scenario 17).

Rows use the drivers of test_guarantees.py: the outcome at the fixed point, with G1, G8 and G9
checked on every cycle. List order of `workloads` is submission order.
"""

from __future__ import annotations

from gpupool.core.model import Project, SchedulerSettings

from .helpers import inference, interactive, node, project, running, train
from .test_guarantees import FRAGMENTED, Case, case, check_case, params, run_case

# ============================================================================================
# a. At its fair share, a project waits; below it, a project is served
# ============================================================================================

AT_FAIR_SHARE = [
    case(
        "at-fair-share-waits-while-the-project-below-its-share-gets-the-free-gpu",
        [node("n1", 4)],
        [project("alpha", 2), project("beta", 2)],
        [
            running(train("a-1", "alpha"), "n1", (0,), -600),
            running(train("a-2", "alpha"), "n1", (1,), -300),
            running(train("b-1", "beta"), "n1", (2,), -300),
            train("a-big", "alpha", 2),
            train("b-2", "beta"),
        ],
        running=["a-1", "a-2", "b-1", "b-2"],
        first_cycle_bound=["b-2"],
        reasons={"a-big": FRAGMENTED},
        fair_share={"alpha": 2, "beta": 2},
    ),
    case(
        "two-idle-gpus-go-to-the-project-below-its-share-before-the-bigger-job",
        [node("n1", 4)],
        [project("alpha", 2), project("beta", 2)],
        [
            running(train("a-1", "alpha"), "n1", (0,), -600),
            running(train("a-2", "alpha"), "n1", (1,), -300),
            train("a-big", "alpha", 2),
            train("b-1", "beta"),
            train("b-2", "beta"),
        ],
        running=["a-1", "a-2", "b-1", "b-2"],
        first_cycle_bound=["b-1", "b-2"],
    ),
    case(
        "over-quota-at-its-fair-share-does-not-reclaim-for-its-bigger-job",
        [node("n1", 4)],
        [project("alpha", 1), project("beta", 1)],
        [
            running(train("a-1", "alpha"), "n1", (0,), -600),
            running(train("a-2", "alpha"), "n1", (1,), -300),
            running(train("b-1", "beta"), "n1", (2,), -300),
            train("a-big", "alpha", 2),
            train("b-2", "beta"),
        ],
        running=["a-1", "a-2", "b-1", "b-2"],
        fair_share={"alpha": 2, "beta": 2},
        reasons={"a-big": ("fair share",)},
    ),
    case(
        "never-evicts-its-own-work-of-the-same-priority-to-start-a-bigger-job",
        [node("n1", 4)],
        [project("alpha", 4)],
        [
            running(train("a-1", "alpha"), "n1", (0,), -600),
            running(train("a-2", "alpha"), "n1", (1,), -300),
            running(train("a-3", "alpha"), "n1", (2,), -100),
            train("a-big", "alpha", 2),
        ],
        running=["a-1", "a-2", "a-3"],
        reasons={"a-big": FRAGMENTED},
    ),
    case(
        # The contrast: a higher priority inside the project does preempt (G6).
        "a-higher-priority-job-of-its-own-does-preempt",
        [node("n1", 4)],
        [project("alpha", 4)],
        [
            running(train("a-1", "alpha"), "n1", (0,), -600),
            running(train("a-2", "alpha"), "n1", (1,), -300),
            running(train("a-3", "alpha"), "n1", (2,), -100),
            train("a-big", "alpha", 2, priority=90),
        ],
        running=["a-1", "a-2", "a-big"],
        evicted=["a-3"],
    ),
]


@params(AT_FAIR_SHARE)
def test_a_project_at_its_fair_share_waits(c: Case) -> None:
    check_case(c, run_case(c))


# ============================================================================================
# b. Inside a department at its limit, siblings reclaim from each other
# ============================================================================================


def _department(
    id: str, now_s: int, running_names: list[str], evicted: list[str], **kw: object
) -> Case:
    """Scenario 14: research (limit 4) is full of lowprio's work (min runtime 600 s, started at
    0); highprio, a higher priority inside research, asks for 2 GPUs; idle GPUs elsewhere."""
    return case(
        id,
        [node("n1", 8)],
        [
            project("research", 4, limit=4),
            project("lowprio", 0, parent="research", priority=0, min_runtime_s=600),
            project("highprio", 0, parent="research", priority=1),
            project("ops", 4),
        ],
        [
            *(running(train(f"low-{i}", "lowprio"), "n1", (i - 1,), 0) for i in range(1, 5)),
            running(train("ops-1", "ops", 2), "n1", (4, 5), 0),
            train("high-1", "highprio", 2),
        ],
        running=running_names,
        evicted=evicted,
        now_s=now_s,
        fair_share={"research": 4, "highprio": 2, "lowprio": 2},
        **kw,  # type: ignore[arg-type]
    )


DEPARTMENT_LIMIT = [
    _department(
        "higher-priority-sibling-reclaims-inside-a-department-at-its-limit",
        now_s=1000,
        running_names=["low-1", "low-2", "ops-1", "high-1"],
        evicted=["low-3", "low-4"],
    ),
    _department(
        "it-waits-while-the-siblings-work-is-inside-its-min-runtime",
        now_s=300,
        running_names=["low-1", "low-2", "low-3", "low-4", "ops-1"],
        evicted=[],
        reasons={"high-1": ("research is at its limit",)},
    ),
    case(
        "same-priority-sibling-below-its-fair-share-reclaims-inside-the-department",
        [node("n1", 8)],
        [project("D", 0, limit=4), project("p1", 0, parent="D"), project("p2", 0, parent="D")],
        [
            *(running(train(f"p1-{i}", "p1"), "n1", (i - 1,), 0) for i in range(1, 5)),
            train("p2-1", "p2"),
            train("p2-2", "p2"),
        ],
        running=["p1-1", "p1-2", "p2-1", "p2-2"],
        evicted=["p1-3", "p1-4"],
        now_s=100,
        fair_share={"p1": 2, "p2": 2},
    ),
    case(
        "a-sibling-at-its-fair-share-is-not-reclaimed-from",
        [node("n1", 8)],
        [project("D", 0, limit=4), project("p1", 0, parent="D"), project("p2", 0, parent="D")],
        [
            running(train("p1-1", "p1"), "n1", (0,), 0),
            running(train("p1-2", "p1"), "n1", (1,), 0),
            running(train("p2-1", "p2"), "n1", (2,), 0),
            running(train("p2-2", "p2"), "n1", (3,), 0),
            train("p2-3", "p2"),
        ],
        running=["p1-1", "p1-2", "p2-1", "p2-2"],
        now_s=100,
        reasons={"p2-3": ("D is at its limit",)},
    ),
    case(
        "a-project-at-its-own-limit-takes-nothing-from-others",
        [node("n1", 4)],
        [project("a", 2, limit=2), project("b", 0)],
        [
            running(train("a-1", "a"), "n1", (0,), 0),
            running(train("a-2", "a"), "n1", (1,), 0),
            running(train("b-1", "b"), "n1", (2,), 0),
            running(train("b-2", "b"), "n1", (3,), 0),
            train("a-3", "a"),
        ],
        running=["a-1", "a-2", "b-1", "b-2"],
        now_s=100,
        reasons={"a-3": ("project a is at its limit",)},
    ),
    case(
        # Evicting x would free a GPU but not lift D's limit: nothing is evicted while p1's
        # work is inside its min runtime.
        "work-outside-the-department-at-its-limit-is-not-taken",
        [node("n1", 4)],
        [
            project("D", 0, limit=2),
            project("p1", 0, parent="D", min_runtime_s=600),
            project("p2", 0, parent="D", priority=1),
            project("x", 0),
        ],
        [
            running(train("p1-1", "p1"), "n1", (0,), 0),
            running(train("p1-2", "p1"), "n1", (1,), 0),
            running(train("x-1", "x"), "n1", (2,), 0),
            running(train("x-2", "x"), "n1", (3,), 0),
            train("p2-1", "p2"),
        ],
        running=["p1-1", "p1-2", "x-1", "x-2"],
        now_s=100,
        fair_share={"D": 2, "x": 2, "p1": 1, "p2": 1},
        reasons={"p2-1": ("min runtime",)},
    ),
]


@params(DEPARTMENT_LIMIT)
def test_reclaim_inside_a_department_at_its_limit(c: Case) -> None:
    check_case(c, run_case(c))


# ============================================================================================
# c. One reclaim, victims in several departments
# ============================================================================================


def departments(ml_infra_quota: float = 4) -> list[Project]:
    """vision/detection and nlp/translation without quota; ml-infra/platform with one."""
    return [
        project("vision", 0),
        project("nlp", 0),
        project("ml-infra", ml_infra_quota),
        project("detection", 0, parent="vision"),
        project("translation", 0, parent="nlp"),
        project("platform", ml_infra_quota, parent="ml-infra"),
    ]


GANG_ACROSS_DEPARTMENTS = [
    case(
        "a-gang-of-4-takes-victims-from-two-departments-in-one-cycle",
        [node("n1", 4), node("n2", 4)],
        departments(6),
        [
            running(train("det-1", "detection"), "n1", (0,), -600),
            running(train("det-2", "detection"), "n1", (1,), -400),
            running(train("det-3", "detection"), "n1", (2,), -200),
            running(train("tr-1", "translation"), "n1", (3,), -500),
            running(train("tr-2", "translation"), "n2", (0,), -300),
            running(train("tr-3", "translation"), "n2", (1,), -100),
            running(inference("serve", "platform", 2), "n2", (2, 3), -900),
            train("ddp", "platform", tasks=4),
        ],
        running=["det-1", "tr-1", "serve", "ddp"],
        evicted=["det-2", "det-3", "tr-2", "tr-3"],
        first_cycle_bound=["ddp"],
        fair_share={"vision": 1, "nlp": 1, "platform": 6},
    ),
    case(
        # Victim order is det-4, det-3, det-2, tr-4, tr-3, ...; det-2 is passed over, since
        # evicting it would take vision below its fair share of 2.
        "victims-in-victim-order-skipping-those-that-would-go-below-their-share",
        [node("n1", 4), node("n2", 4)],
        departments(),
        [
            *(
                running(train(f"det-{i}", "detection"), "n1", (i - 1,), -100 + 10 * i)
                for i in range(1, 5)
            ),
            *(
                running(train(f"tr-{i}", "translation"), "n2", (i - 1,), -200 + 10 * i)
                for i in range(1, 5)
            ),
            train("ddp", "platform", tasks=4),
        ],
        running=["det-1", "det-2", "tr-1", "tr-2", "ddp"],
        evicted=["det-3", "det-4", "tr-3", "tr-4"],
        first_cycle_bound=["ddp"],
        fair_share={"vision": 2, "nlp": 2, "platform": 4},
    ),
    case(
        "one-4-gpu-task-takes-a-whole-node-from-two-departments",
        [node("n1", 4)],
        departments(),
        [
            running(train("det-1", "detection"), "n1", (0,), -600),
            running(train("det-2", "detection"), "n1", (1,), -500),
            running(train("tr-1", "translation"), "n1", (2,), -400),
            running(train("tr-2", "translation"), "n1", (3,), -300),
            train("big", "platform", 4),
        ],
        running=["big"],
        evicted=["det-1", "det-2", "tr-1", "tr-2"],
    ),
    case(
        "no-victims-when-even-all-of-them-would-not-make-the-gang-fit",
        [node("n1", 2), node("n2", 2)],
        departments(),
        [
            running(train("det-1", "detection"), "n1", (0,), -600),
            running(train("det-2", "detection"), "n1", (1,), -500),
            running(train("tr-1", "translation"), "n2", (0,), -400),
            running(train("tr-2", "translation"), "n2", (1,), -300),
            train("big", "platform", 4),
        ],
        running=["det-1", "det-2", "tr-1", "tr-2"],
        reasons={"big": ("largest node has 2",)},
    ),
]


@params(GANG_ACROSS_DEPARTMENTS)
def test_one_reclaim_takes_victims_across_departments(c: Case) -> None:
    check_case(c, run_case(c))


# ============================================================================================
# d. Consolidation moves fractional and GPU-memory work too
# ============================================================================================

CONSOLIDATE_FRACTIONS = [
    case(
        "small-jobs-packed-onto-one-device-free-a-whole-gpu",
        [node("n1", 2)],
        [project("team", 2)],
        [
            running(interactive("notebook", "team", 0.5), "n1", (0,), -900),
            running(train("quarter", "team", 0.25), "n1", (1,), -600),
            running(train("mem-20g", "team", gpu_memory_mib=20480), "n1", (1,), -300),
            train("trainer", "team", 1),
        ],
        running=["notebook", "quarter", "mem-20g", "trainer"],
        consolidations=(("quarter", "n1"), ("mem-20g", "n1")),
        devices={
            "quarter": (("n1", 0),),
            "mem-20g": (("n1", 0),),
            "trainer": (("n1", 1),),
        },
        first_cycle_bound=["trainer"],
    ),
    case(
        # Both devices have half free; b started last, so b is the one that moves.
        "a-fraction-that-fits-on-no-device-makes-room-by-moving-another",
        [node("n1", 2)],
        [project("team", 2)],
        [
            running(train("a", "team", 0.5), "n1", (0,), -600),
            running(train("b", "team", 0.5), "n1", (1,), -300),
            train("c", "team", 0.75),
        ],
        running=["a", "b", "c"],
        consolidations=(("b", "n1"),),
        devices={"a": (("n1", 0),), "b": (("n1", 0),), "c": (("n1", 1),)},
    ),
    case(
        "a-gpu-memory-request-makes-room-the-same-way",
        [node("n1", 2)],
        [project("team", 2)],
        [
            running(train("a", "team", 0.5), "n1", (0,), -600),
            running(train("b", "team", 0.5), "n1", (1,), -300),
            train("m", "team", gpu_memory_mib=61440),
        ],
        running=["a", "b", "m"],
        consolidations=(("b", "n1"),),
        devices={"m": (("n1", 1),)},
    ),
    case(
        "fractions-move-across-nodes",
        [node("n1", 1), node("n2", 1)],
        [project("team", 2)],
        [
            running(train("a", "team", 0.5), "n1", (0,), -600),
            running(train("b", "team", 0.5), "n2", (0,), -300),
            train("whole", "team", 1),
        ],
        running=["a", "b", "whole"],
        consolidations=(("b", "n1"),),
        nodes_of={"whole": ("n2",)},
    ),
    case(
        "non-preemptible-fractions-are-not-moved",
        [node("n1", 2)],
        [project("team", 2)],
        [
            running(interactive("nb-a", "team", 0.5), "n1", (0,), -600),
            running(interactive("nb-b", "team", 0.5), "n1", (1,), -300),
            train("trainer", "team", 1),
        ],
        running=["nb-a", "nb-b"],
        reasons={"trainer": ("none is entirely free",)},
    ),
    case(
        "nothing-moves-when-the-movers-fit-nowhere-else",
        [node("n1", 2)],
        [project("team", 2)],
        [
            running(train("a", "team", 0.6), "n1", (0,), -600),
            running(train("b", "team", 0.6), "n1", (1,), -300),
            train("c", "team", 0.5),
        ],
        running=["a", "b"],
    ),
    case(
        "no-more-moves-than-the-bound",
        # Five tenth-GPU jobs would have to move: the bound is 4 moves per attempt.
        [node("n1", 2)],
        [project("team", 2)],
        [
            running(interactive("nb", "team", 0.5), "n1", (0,), -900),
            *(running(train(f"t-{i}", "team", 0.1), "n1", (1,), -100 * i) for i in range(1, 6)),
            train("trainer", "team", 1),
        ],
        running=["nb", *(f"t-{i}" for i in range(1, 6))],
    ),
]


@params(CONSOLIDATE_FRACTIONS)
def test_consolidation_moves_fractions(c: Case) -> None:
    assert SchedulerSettings().max_moves_per_consolidation == 4
    check_case(c, run_case(c))


# ============================================================================================
# e. Reclaim evicts only the victims the placement needs
# ============================================================================================

SMALLEST_VICTIM_SET = [
    case(
        # b-new is first in victim order but evicting it frees no 2-GPU block.
        "only-the-victim-that-frees-the-block",
        [node("n1", 2), node("n2", 2)],
        [project("owner", 2), project("keeper", 1), project("borrower", 0)],
        [
            running(train("k-1", "keeper"), "n1", (1,), -900),
            running(train("b-new", "borrower"), "n1", (0,), -60),
            running(train("b-pair", "borrower", 2), "n2", (0, 1), -600),
            train("o-pair", "owner", 2),
        ],
        running=["k-1", "b-new", "o-pair"],
        evicted=["b-pair"],
    ),
    case(
        "only-the-fractions-on-the-device-that-frees",
        [node("n1", 2)],
        [project("owner", 1), project("keeper", 0.5), project("borrower", 0)],
        [
            running(train("k-1", "keeper", 0.5), "n1", (0,), -900),
            running(train("v-1", "borrower", 0.5), "n1", (0,), -10),
            running(train("v-2", "borrower", 0.25), "n1", (1,), -20),
            running(train("v-3", "borrower", 0.25), "n1", (1,), -30),
            train("o-1", "owner", 1),
        ],
        running=["k-1", "v-1", "o-1"],
        evicted=["v-2", "v-3"],
    ),
    case(
        "an-elastic-victim-loses-only-the-tasks-needed",
        [node("n1", 4)],
        [project("owner", 1), project("borrower", 0)],
        [
            running(
                train("sweep", "borrower", tasks=4, min_available=2),
                [("n1", (0,)), ("n1", (1,)), ("n1", (2,)), ("n1", (3,))],
                started_at_s=-600,
            ),
            train("o-1", "owner"),
        ],
        running=["sweep", "o-1"],
        evicted=["sweep"],
        partial_evictions=["sweep"],
        tasks_running={"sweep": 3},
    ),
    case(
        "victims-of-two-projects-none-extra",
        [node("n1", 2), node("n2", 2)],
        [project("owner", 2), project("keeper", 1), project("b1", 0), project("b2", 0)],
        [
            running(train("k-1", "keeper"), "n1", (1,), -900),
            running(train("b1-new", "b1"), "n1", (0,), -10),
            running(train("b2-1", "b2"), "n2", (0,), -20),
            train("o-pair", "owner", 2),
        ],
        running=["k-1", "b1-new", "o-pair"],
        evicted=["b2-1"],
    ),
]


@params(SMALLEST_VICTIM_SET)
def test_reclaim_evicts_the_smallest_set_of_victims(c: Case) -> None:
    check_case(c, run_case(c))
