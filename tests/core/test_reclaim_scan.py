"""Reclaim's scan for victims stops asking about a project once its work is turned down.

During one attempt the victims' projects only lose holdings (victims go out, or are counted
out), so a project whose work is not justified once stays so until the attempt ends: its
later units are passed over unasked, and the scan stops once every project it could take from
is turned down. Before, each attempt asked about every unit of the victim list: in a settled
cluster (nothing to start, nothing to evict) 64 attempts a cycle each walked hundreds of
victims for nothing, most of such a cycle's time.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import assume, given

from gpupool.core.actions import reclaim
from gpupool.core.actions.victims import Attempt, VictimUnit, evict_to_place
from gpupool.core.context import CycleContext
from gpupool.core.cycle import run_cycle
from gpupool.core.model import Snapshot
from gpupool.core.policies import canonical_name
from gpupool.core.records import WorkRecord, WorkState

from .helpers import check_decisions, node, project, pure_core_only, running, snapshot, train
from .test_properties import snapshots
from .test_victim_walk import _RANDOM_CLUSTERS


def _beta_one_gpu_over_its_share() -> Snapshot:
    # alpha and beta have 8 GPUs of quota each. beta holds 9 (8 on n1, its oldest on n2), alpha
    # 7 on n2. alpha's new job must run on n2: the first victim (the most recent, on n1) takes
    # beta down to its share, and no other victim of beta is justified after it.
    return snapshot(
        [node("n1", 8), node("n2", 8, labels=[("pool", "alpha")])],
        [project("alpha", 8), project("beta", 8)],
        [
            running(train("b-old", "beta"), "n2", (0,), -9000),
            *(running(train(f"b{i}", "beta"), "n1", (i,), -100 * (i + 1)) for i in range(8)),
            *(running(train(f"a{i}", "alpha"), "n2", (i + 1,), -500) for i in range(7)),
            train("a-new", "alpha", node_selector=[("pool", ["alpha"])]),
        ],
    )


@pure_core_only
def test_a_turned_down_project_is_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    original = reclaim._justify

    def counting(ctx: CycleContext, victim_project: int, *rest: object) -> object:
        asked.append(victim_project)
        return original(ctx, victim_project, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(reclaim, "_justify", counting)
    s = _beta_one_gpu_over_its_share()
    result = run_cycle(s)
    check_decisions(s, result)
    assert result.decisions == ()
    assert "a-new" in result.pending_reasons
    # Two passes (fair share, then quota), each: b7 justified and counted out, b6 turned down,
    # the seven units after it not asked. Before: all nine asked in each pass.
    assert len(asked) == 4


def test_the_scan_ends_once_every_eligible_project_is_turned_down() -> None:
    s = _beta_one_gpu_over_its_share()
    units = [
        VictimUnit(_record(w.name, p), (), (0, 0, i, 0))
        for i, (w, p) in enumerate(
            (w, 1 if w.project == "beta" else 0) for w in s.workloads if w.placements
        )
    ]
    turned_down: set[int] = set()
    scan = reclaim._while_any_left(units, {0, 1}, turned_down)
    assert next(scan).work.project == 1  # b-old, first in this list
    turned_down.add(1)
    assert next(scan).work.project == 1  # still asked about: alpha is not turned down
    turned_down.add(0)
    assert list(scan) == []


def _record(name: str, project: int) -> WorkRecord:
    record = WorkRecord(0, train(name, "p"), project, 1000)
    record.state = WorkState.RUNNING
    return record


class _Forgetful(set[int]):
    """A `turned_down` that never keeps a project: every unit is asked about, as before."""

    def add(self, element: int) -> None:
        pass


@pure_core_only
@_RANDOM_CLUSTERS
@given(snapshots())
def test_passing_over_turned_down_projects_decides_the_same(s: Snapshot) -> None:
    # `random` chooses by a pick that advances with every node it is asked about, and asking
    # about every unit asks it more often: its later choices then differ by design.
    assume(canonical_name(s.settings.placement) != "random")
    shortened = run_cycle(s)
    check_decisions(s, shortened)

    def asking_every_unit(*args: Any) -> bool:
        # `evict_to_place(ctx, work, gang, candidates, justify, cause, attempt)`, with an
        # attempt on the same count budget and the same `Freeable` that forgets every project
        # turned down. (Without the `Freeable` it would also count victims on nodes that could
        # never take the task, which changes what later victims are justified by.)
        call, given = args[:6], args[6] if len(args) > 6 else None
        forgetful = Attempt() if given is None else Attempt(given.counts, given.freeable)
        forgetful.turned_down = _Forgetful()
        started = cast(bool, cast(Any, evict_to_place)(*call, forgetful))
        if given is not None:
            given.short_of_devices = forgetful.short_of_devices
            given.bounded = forgetful.bounded
        return started

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reclaim, "evict_to_place", asking_every_unit)
        full = run_cycle(s)
    assert shortened == full
