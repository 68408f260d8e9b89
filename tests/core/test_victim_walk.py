"""Evicting for one task node by node (`actions.victim_walk`): the victims are counted, not taken
out, until one of their nodes could take the task; only then are the victims counted there
evicted for real and the placer asked. It must choose what taking every victim out in turn
(`victims.evict_to_place`'s general path) chooses: the same evictions and the same work started,
wherever the general path's bound on victims taken out does not stop it first (the walk counts
further, which a test below shows).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from gpupool.core.actions import victim_walk, victims
from gpupool.core.candidates import cycle_typical
from gpupool.core.context import CycleContext
from gpupool.core.cycle import run_cycle
from gpupool.core.decisions import Bind, CycleResult, Evict
from gpupool.core.model import Node, Snapshot, Workload
from gpupool.core.placement import Placer
from gpupool.core.session import Session, Statement, WorkRecord, WorkState
from gpupool.corebuild import core_build

from .helpers import (
    check_decisions,
    interactive,
    node,
    project,
    pure_core_only,
    running,
    share,
    snapshot,
    train,
)
from .test_properties import snapshots
from .test_victims_restore import alpha_needs_the_node_of_beta_s_oldest

_RANDOM_CLUSTERS = settings(
    max_examples=150,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
"""150 random clusters per run (the same ones under CI)."""


def _general_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """One-task work takes its victims out in turn, from the same candidates (those on nodes
    that could take it, `victim_walk.Freeable`)."""
    monkeypatch.setattr(victims, "_evict_node_by_node", victims._evict_in_turn)


@pytest.fixture(params=["walk", "general path"])
def either_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test once as the cycle runs (the walk where it applies), once on the general
    path only: both must decide the same."""
    if request.param == "general path":
        if core_build() == "compiled":
            pytest.skip("the compiled core's walk cannot be swapped (the pure-Python run tests it)")
        _general_path_only(monkeypatch)
    return str(request.param)


def _chosen(result: CycleResult) -> tuple[list[tuple[str, str | None, str]], list[str]]:
    evictions = sorted(
        (d.workload, d.for_workload, d.cause.value)
        for d in result.decisions
        if isinstance(d, Evict)
    )
    started = sorted(d.workload for d in result.decisions if isinstance(d, Bind))
    return evictions, started


@pure_core_only
@_RANDOM_CLUSTERS
@given(snapshots())
def test_the_walk_chooses_what_the_general_path_chooses(s: Snapshot) -> None:
    walked = run_cycle(s)
    check_decisions(s, walked)
    with pytest.MonkeyPatch.context() as patch:
        _general_path_only(patch)
        general = run_cycle(s)
    assert _chosen(walked) == _chosen(general)


def _cluster_with_room_left_by_a_reclaim() -> Snapshot:
    # beta (quota 0) holds all 8 GPUs; alpha's demand (10 GPUs) leaves beta no fair share.
    # Reclaim evicts bbig (4 GPUs, the most recent) for a1, which leaves 3 GPUs of n1 idle: a2
    # then fits without a victim (a3 fits nowhere).
    return snapshot(
        [node("n1", 4), node("n2", 4)],
        [project("alpha", 8), project("beta", 0)],
        [
            running(train("bbig", "beta", 4), "n1", (0, 1, 2, 3), -300),
            *(running(train(f"b{i}", "beta"), "n2", (i,), -900) for i in range(4)),
            train("a1", "alpha"),
            train("a2", "alpha"),
            train("a3", "alpha", 8),
        ],
    )


@pytest.mark.usefixtures("either_path")
def test_work_that_fits_in_room_an_eviction_left_says_so() -> None:
    # Before: a2's reason read "starts on GPUs reclaimed from " (no names: nothing was).
    s = _cluster_with_room_left_by_a_reclaim()
    result = run_cycle(s)
    check_decisions(s, result)
    binds = {d.workload: d.reason for d in result.decisions if isinstance(d, Bind)}
    evicted = [d.workload for d in result.decisions if isinstance(d, Evict)]
    assert evicted == ["bbig"]
    assert binds["a1"] == "starts on GPUs reclaimed from bbig"
    assert binds["a2"] == "fits in capacity freed earlier in this cycle"


@pure_core_only
def test_the_walk_takes_out_only_victims_on_the_node_that_takes_the_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # beta's 1-GPU jobs on n1..n3 come first in victim order (most recent), then its 2-GPU job on
    # n4, which alpha's 2-GPU job needs. The walk counts b1..b3 and takes out only b4.
    s = alpha_needs_the_node_of_beta_s_oldest()
    removed: list[str] = []
    original = victims.Statement.remove

    def remove(statement: victims.Statement, work: victims.WorkRecord, task: int) -> object:
        removed.append(work.name)
        return original(statement, work, task)

    monkeypatch.setattr(victims.Statement, "remove", remove)
    result = run_cycle(s)
    check_decisions(s, result)
    assert _chosen(result) == ([("b4", "a", "reclaim")], ["a"])
    assert set(removed) == {"b4"}


@pytest.mark.parametrize(
    ("n1_gpus", "beta_share", "chosen"),
    [
        # beta holds 4 GPUs with a fair share of 2: two of them may be reclaimed. alpha's 2-GPU
        # job would need b2 and b3 on n2, but b1 (the most recent, on n1, which could take the
        # job with b4 out too) comes first in victim order and uses up one of the two: with b1
        # and b2 out beta is at its fair share, b3 may not be taken, and nothing is evicted.
        (2, 2000, ([], [])),
        # n1 has one GPU (b4 is not there), which could never hold alpha's job: b1 is passed
        # over (G10 would drop it anyway); beta holds 3 when b2 is justified and 2 when b3 is,
        # both above its fair share of 1, and alpha starts on n2.
        (1, 1000, ([("b2", "a", "reclaim"), ("b3", "a", "reclaim")], ["a"])),
    ],
)
@pytest.mark.usefixtures("either_path")
def test_a_victim_counted_out_lowers_its_project_for_the_next_justification(
    n1_gpus: int, beta_share: int, chosen: tuple[list[tuple[str, str, str]], list[str]]
) -> None:
    b4 = [running(train("b4", "beta"), "n1", (1,), -1200)] if n1_gpus == 2 else []
    s = snapshot(
        [node("n1", n1_gpus), node("n2", 2)],
        [project("alpha", 1), project("beta", 0)],
        [
            *b4,
            running(train("b3", "beta"), "n2", (1,), -900),
            running(train("b2", "beta"), "n2", (0,), -600),
            running(train("b1", "beta"), "n1", (0,), -300),
            train("a", "alpha", 2),
        ],
    )
    result = run_cycle(s)
    check_decisions(s, result)
    assert share(result, "beta").fair_share.gpu_milli == beta_share
    assert _chosen(result) == chosen


@pytest.mark.usefixtures("either_path")
def test_work_that_fits_already_starts_without_a_victim_to_take() -> None:
    # Found by the property test above. w2 (interactive: priority 100) preempts w0 for a tenth
    # of a GPU, which leaves 0.9 of that device idle; w3 (priority 90) fits there, although no
    # work of lower priority is left running to take. Before, it waited a cycle on the general
    # path (an attempt started by taking a victim out, and there was none).
    s = snapshot(
        [node("n0", 5)],
        [project("p0", 0.5)],
        [
            running(train("w0", "p0"), "n0", (0,)),
            running(train("w1", "p0", 4, priority=90), "n0", (1, 2, 3, 4)),
            interactive("w2", "p0", 0.1),
            train("w3", "p0", 0.1, priority=90),
        ],
    )
    result = run_cycle(s)
    check_decisions(s, result)
    binds = {d.workload: d.reason for d in result.decisions if isinstance(d, Bind)}
    assert _chosen(result) == ([("w0", "w2", "preempt")], ["w2", "w3"])
    assert binds["w3"] == "fits in capacity freed earlier in this cycle"


@_RANDOM_CLUSTERS
@given(snapshots())
def test_room_for_a_gang_is_never_denied_where_it_fits(s: Snapshot) -> None:
    # `fits_now` skips the placer where the capacity indexes show room for fewer tasks than the
    # gang has: that count must be an upper bound, or work that fits would wait.
    session = Session(s)
    pending = [w.spec for w in session.works if w.state is WorkState.PENDING]
    ctx = CycleContext(session, Placer(session, cycle_typical(pending, 81920)))
    for work in session.works:
        gang, _extras = ctx.tasks_to_start(work)
        if not gang:
            continue
        statement = Statement(session)
        fits = victims._place_within_policy(ctx, statement, work, gang)
        statement.rollback()
        if fits:
            assert victims._room_for(session, work.spec, len(gang)), work.name


def _room_for_gang(nodes: list[Node], held: list[Workload], gpu: float, tasks: int) -> bool:
    """`victims._room_for` of a pending gang of alpha's while beta's work `held` runs."""
    s = snapshot(
        nodes,
        [project("alpha", 8), project("beta", 0)],
        [*held, train("gang", "alpha", gpu, tasks=tasks)],
    )
    session = Session(s)
    return victims._room_for(session, session.works[-1].spec, tasks)


@pytest.mark.parametrize(
    ("free_gpus", "tasks", "gpus_per_task", "room"),
    [
        ((4, 4), 2, 4, True),  # a task on each node
        ((8,), 2, 4, True),  # two on one node
        ((3, 3, 3), 2, 4, False),  # 9 GPUs idle, none holds 4
        ((7, 3), 2, 4, False),  # 10 idle, one 4-GPU task fits
        ((1, 1, 1), 3, 1, True),
    ],
)
def test_room_for_a_gang_counts_tasks_per_node(
    free_gpus: tuple[int, ...], tasks: int, gpus_per_task: int, room: bool
) -> None:
    held = [
        running(train(f"b{i}", "beta", 8 - free), f"n{i}", tuple(range(8 - free)))
        for i, free in enumerate(free_gpus)
        if free < 8
    ]
    nodes = [node(f"n{i}", 8) for i in range(len(free_gpus))]
    assert _room_for_gang(nodes, held, gpus_per_task, tasks) is room


@pytest.mark.parametrize(
    ("used", "tasks", "room"),
    [
        ((0.5, 0.5), 2, True),  # half of each device free: a task on each
        ((0.5, 0.5), 3, False),
        ((0.5, 0.0), 3, True),  # an empty device holds two halves, the shared one a third
        ((0.6, 0.6), 1, False),  # 0.4 free on each: not half a device
    ],
)
def test_room_for_a_gang_of_fractions_counts_tasks_per_device(
    used: tuple[float, ...], tasks: int, room: bool
) -> None:
    held = [
        running(train(f"b{d}", "beta", share), "n0", (d,)) for d, share in enumerate(used) if share
    ]
    assert _room_for_gang([node("n0", len(used))], held, 0.5, tasks) is room


@pytest.mark.parametrize(
    ("limit", "held", "pending", "local"),
    [
        (None, 2, train("w", "alpha", 2), True),  # no limit
        (8, 2, train("w", "alpha", 2), True),  # a limit it stays within
        (8, 6, train("w", "alpha", 2), True),  # exactly at it once placed
        (8, 7, train("w", "alpha", 2), False),  # evicting its own work could make room
        (8, 2, train("w", "alpha", gpu=None, gpu_memory_mib=40960), False),  # charge unknown
        (8, 2, train("w", "alpha", 1, tasks=2), False),  # a gang
    ],
)
def test_work_under_a_limit_it_stays_within_is_walked(
    limit: float | None, held: int, pending: Workload, local: bool
) -> None:
    s = snapshot(
        [node("n1", 8)],
        [project("alpha", 4, limit=limit)],
        [running(train("r", "alpha", held), "n1", tuple(range(held))), pending],
    )
    session = Session(s)
    ctx = CycleContext(session, Placer(session, cycle_typical([pending], 81920)))
    work = session.works[1]
    gang, _extras = ctx.tasks_to_start(work)
    assert victims.is_local(ctx, work, gang) is local


@pure_core_only
def test_the_walk_counts_past_the_victims_an_attempt_may_take_out() -> None:
    # Bound: 2 victims per attempt. Each one-GPU node holds two halves of beta's: a recent one
    # and an old one. beta's three most recent victims free no device; the fourth, the old half
    # on n1, frees n1 together with the first. Taking each out in turn stops after two;
    # counting goes on to the fourth and takes out the two on n1.
    s = snapshot(
        [node(f"n{i}", 1) for i in range(1, 4)],
        [project("alpha", 1), project("beta", 0)],
        [
            *(running(train(f"b{i}", "beta", 0.5), f"n{i}", (0,), -100 * i) for i in range(1, 4)),
            *(
                running(train(f"old{i}", "beta", 0.5), f"n{i}", (0,), -9000 - i)
                for i in range(1, 4)
            ),
            train("a1", "alpha"),
        ],
    )
    s = replace(s, settings=replace(s.settings, max_victims_per_attempt=2))
    result = run_cycle(s)
    check_decisions(s, result)
    assert sorted(d.workload for d in result.decisions if isinstance(d, Evict)) == ["b1", "old1"]
    assert [d.workload for d in result.decisions if isinstance(d, Bind)] == ["a1"]
    with pytest.MonkeyPatch.context() as patch:
        _general_path_only(patch)
        assert run_cycle(s).decisions == ()  # the bound: a1 waits


@pure_core_only
def test_victims_on_nodes_that_could_not_take_the_task_are_passed_over() -> None:
    # beta's three most recent victims are halves of devices shared with gamma (in quota, not
    # victims): even with every victim out, those nodes hold no whole GPU, so the walk passes
    # them over, uncounted, and with one victim per attempt takes the whole GPU on n4.
    s = snapshot(
        [node(f"n{i}", 1) for i in range(1, 5)],
        [project("alpha", 2.5), project("beta", 0), project("gamma", 1.5)],
        [
            *(running(train(f"g{i}", "gamma", 0.5), f"n{i}", (0,), -50) for i in range(1, 4)),
            *(running(train(f"b{i}", "beta", 0.5), f"n{i}", (0,), -100 * i) for i in range(1, 4)),
            running(train("b-whole", "beta"), "n4", (0,), -9000),
            train("a1", "alpha"),
        ],
    )
    s = replace(
        s, settings=replace(s.settings, max_victims_per_attempt=1, max_reclaim_attempts_per_cycle=1)
    )
    counted: list[str] = []
    count = victim_walk.VirtualVictims.count

    def counting(
        self: victim_walk.VirtualVictims, unit: object, victim: WorkRecord, *rest: Any
    ) -> list[int]:
        counted.append(victim.name)
        return count(self, unit, victim, *rest)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(victim_walk.VirtualVictims, "count", counting)
        result = run_cycle(s)
    check_decisions(s, result)
    assert counted == ["b-whole"]
    assert [d.workload for d in result.decisions if isinstance(d, Evict)] == ["b-whole"]
    assert [d.workload for d in result.decisions if isinstance(d, Bind)] == ["a1"]


def _deep_victim(nodes: int) -> Snapshot:
    """One-GPU nodes, each with two halves of beta's: a recent one and an old one. The recent
    halves come first in victim order and free no device; the first device freed is n0's,
    `nodes` + 1 victims in (its recent and its old half). alpha waits with one GPU in its
    quota."""
    return snapshot(
        [node(f"n{i}", 1) for i in range(nodes)],
        [project("alpha", 1), project("beta", 0)],
        [
            *(
                running(train(f"b{i}", "beta", 0.5), f"n{i}", (0,), -100 * (i + 1))
                for i in range(nodes)
            ),
            *(
                running(train(f"old{i}", "beta", 0.5), f"n{i}", (0,), -90_000 - i)
                for i in range(nodes)
            ),
            train("a1", "alpha"),
        ],
    )


@pytest.mark.parametrize(
    ("attempts", "started"),
    [
        (64, True),  # budget 8 x 2 x 64: the attempt counts all 21
        (1, False),  # budget 8 x 2 x 1: the walk stops at 16, a1 waits (bounded)
    ],
)
def test_one_attempt_counts_as_deep_as_the_cycle_s_count_budget(
    attempts: int, started: bool
) -> None:
    # Two victims per attempt, so 16 counted per attempt was the old bound: the first device
    # freed is the 21st victim in victim order.
    s = _deep_victim(20)
    s = replace(
        s,
        settings=replace(
            s.settings, max_victims_per_attempt=2, max_reclaim_attempts_per_cycle=attempts
        ),
    )
    result = run_cycle(s)
    check_decisions(s, result)
    evicted = [d.workload for d in result.decisions if isinstance(d, Evict)]
    bound = [d.workload for d in result.decisions if isinstance(d, Bind)]
    if started:
        assert (sorted(evicted), bound) == (["b0", "old0"], ["a1"])
    else:
        assert (evicted, bound) == ([], [])
        assert "reclaim is bounded per cycle" in result.pending_reasons["a1"]


def test_the_count_budget_is_shared_by_the_attempts_of_an_action() -> None:
    # Two one-GPU workloads of alpha; with 2 attempts of two victims the action may count 32:
    # the first attempt counts 21 and starts a1 on n0; the second has 11 left and stops,
    # bounded (it needs 20: b1 to b19, then old1).
    s = _deep_victim(20)
    s = replace(
        s,
        projects=tuple(
            replace(p, quota=replace(p.quota, gpu_milli=2000)) if p.name == "alpha" else p
            for p in s.projects
        ),
        workloads=(*s.workloads, replace(train("a2", "alpha"), submit_seq=99)),
        settings=replace(s.settings, max_victims_per_attempt=2, max_reclaim_attempts_per_cycle=2),
    )
    result = run_cycle(s)
    check_decisions(s, result)
    assert [d.workload for d in result.decisions if isinstance(d, Bind)] == ["a1"]
    assert "reclaim is bounded per cycle" in result.pending_reasons["a2"]


@pytest.mark.usefixtures("either_path")
def test_the_rest_of_an_elastic_gang_never_goes_without_its_surplus_tasks() -> None:
    # Found by `benchmarks/cycle.py --settled` at 10,000 nodes: an elastic gang (4 tasks, at
    # least 3) lost tasks 0-2 and kept task 3 alone (G9). Its surplus task 3 comes first in
    # victim order and is counted on n2, which it does not free (x holds n2's other device);
    # the rest (tasks 0-2) frees n1, so the walk took out only the units with a task on n1.
    # The rest of a gang takes the gang's counted surplus tasks with it.
    w = replace(train("w", "beta", 1, tasks=4), min_available=3)
    s = snapshot(
        [node("n1", 2), node("n2", 2), node("n3", 1)],
        [project("alpha", 2), project("beta", 0)],
        [
            running(w, [("n1", (0,)), ("n1", (1,)), ("n3", (0,)), ("n2", (0,))], -100),
            running(train("x", "beta"), "n2", (1,), -900),
            train("a", "alpha", 2),
        ],
    )
    result = run_cycle(s)
    check_decisions(s, result)
    evicted = [(d.workload, d.task_indices) for d in result.decisions if isinstance(d, Evict)]
    assert evicted == [("w", ())]
    assert [d.workload for d in result.decisions if isinstance(d, Bind)] == ["a"]
