"""`submit --dry-run` in-process on fake time: the same core as the loop decides, nothing is
stored, the caller sees other projects' victims only as a count."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select
from test_scheduler_loop import ADMIN, Harness

from gpupool.api.schemas import DryRunOut, Role, WorkloadIn
from gpupool.core.model import SchedulerSettings
from gpupool.server.auth import Principal
from gpupool.server.db import WorkloadRow
from gpupool.server.errors import ApiError
from gpupool.server.services.dry_run import dry_run

RITA = Principal(2, "rita", Role.RESEARCHER, frozenset({"b"}))


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    harness = Harness(tmp_path, nodes="1x4")
    harness.project("a", 0)
    harness.project("b", 4)
    return harness


def ask(harness: Harness, who: Principal = ADMIN, **fields: object) -> DryRunOut:
    body = WorkloadIn.model_validate({"command": ["true"], **fields})
    with harness.reader() as session:
        return dry_run(session, body, who, harness.clock.now_s(), SchedulerSettings())


def stored(harness: Harness) -> int:
    with harness.reader() as session:
        return session.scalar(select(func.count()).select_from(WorkloadRow)) or 0


def test_it_says_where_it_would_start_and_stores_nothing(harness: Harness) -> None:
    answer = ask(harness, name="job", project="b", gpu=2)
    assert answer.would_start and answer.preempts == 0
    assert [(p.node, len(p.devices)) for p in answer.placements] == [("sim-1", 2)]
    assert answer.reason.startswith("would start now on sim-1 (GPU ")
    assert stored(harness) == 0


def test_it_says_why_it_would_wait(harness: Harness) -> None:
    harness.submit("b", "holder", gpu=4)  # within b's quota: nothing to reclaim for a
    harness.loop.run_once()
    answer = ask(harness, name="job", project="a", gpu=1)
    assert not answer.would_start and answer.placements == []
    assert answer.reason.startswith("would wait: ")
    assert "GPU" in answer.reason


def test_reclaim_victims_are_named_only_to_who_may_see_them(harness: Harness) -> None:
    harness.submit("a", "borrower", gpu=4)
    harness.loop.run_once()
    assert harness.status("borrower") == "running"
    for who, named in [(ADMIN, ["a/borrower"]), (RITA, [])]:
        answer = ask(harness, who, name="owner", project="b", gpu=2)
        assert answer.would_start and answer.preempts == 1
        assert answer.preempts_visible == named
        assert ("a/borrower" in answer.reason) is bool(named)
    harness.loop.run_once()
    assert harness.status("borrower") == "running"  # a dry run changes nothing


@pytest.mark.parametrize(
    ("who", "fields", "status", "words"),
    [
        (RITA, {"name": "job", "project": "a", "gpu": 1}, 403, "rita"),
        (ADMIN, {"name": "job", "project": "nope", "gpu": 1}, 422, "does not exist"),
        (ADMIN, {"name": "taken", "project": "b", "gpu": 1}, 409, "already has a workload"),
        (
            ADMIN,
            {"name": "gang", "project": "b", "gpu": 1, "tasks": 5, "min_available": 5},
            422,
            "can hold at most 4 such tasks",
        ),
        (ADMIN, {"name": "big", "project": "b", "gpu": 5}, 422, "the largest node"),
    ],
)
def test_it_refuses_what_a_submission_would_refuse(
    harness: Harness, who: Principal, fields: dict[str, object], status: int, words: str
) -> None:
    harness.submit("b", "taken", gpu=1)
    with pytest.raises(ApiError) as raised:
        ask(harness, who, **fields)
    assert raised.value.status == status and words in raised.value.detail
