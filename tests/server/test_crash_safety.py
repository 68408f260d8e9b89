"""Crash safety.

The main test kills the server (a `gpupool server` child process) with SIGKILL at random points
during bursts of submissions and scheduling, 20 times, on one SQLite data directory: after each
restart nothing acknowledged (answered 201) is lost and no task is started twice; at the end
everything submitted runs to completion and no process is left.

What "started twice" means is read from the simulated executor's journal (fsynced before each
call returns, so it is the truth about what ran): no launch id started twice, no two launches
of one task running at once, no device charged more than a whole GPU. See `crashlib`.

The in-process tests below pin down, on fake time, the cases the random test found or could
only hit by luck: a crash just before or after every executor call, a journal line cut short,
a task stopped before it ever started, a completing workload's devices, and a stop that races
a natural exit.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from crashlib import (
    Burst,
    LoopHarness,
    Submission,
    completed_more_than_once,
    journal_violations,
    names_of,
    overcommitted_devices,
    random_submission,
    read_journal,
)

from gpupool.clock import FakeClock
from gpupool.executors.base import Launch
from gpupool.executors.simulated import SimulatedExecutor, parse_simulated_nodes
from gpupool.server.process import ServerProcess

ROUNDS = 20
NODES = "4x8"
THREADS = 4
SUBMITS_PER_THREAD = 6
MAX_PAUSE_S = 0.25
"""Between one thread's submissions: a burst lasts about a second, so some kills cut it short."""
MAX_KILL_DELAY_S = 1.5
DRAIN_TIMEOUT_S = 60.0
PROJECTS = {"team-a": 8, "team-b": 16}
"""Quotas in GPUs of 32: team-a runs over its quota on idle GPUs, team-b reclaims them."""


def _server(data_dir: Path) -> ServerProcess:
    return ServerProcess(data_dir, simulated_nodes=NODES, cycle_interval_s=0.05)


def _client(server: ServerProcess) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"}, timeout=30
    )


def _assert_gone(pid: int | None) -> None:
    """The server ran in its own session: its process group must be empty now."""
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


def _stored(server: ServerProcess) -> dict[tuple[str, str], str]:
    """(project, name) -> status of every workload the server has."""
    with _client(server) as http:
        response = http.get("/api/v1/workloads", params={"limit": 10_000})
    assert response.status_code == 200, response.text
    page = response.json()
    assert page["total"] == len(page["items"]), "more workloads than one page"
    return {(item["project"], item["name"]): item["status"] for item in page["items"]}


def _queues(rng: random.Random, round_number: int) -> list[list[Submission]]:
    """Half the threads submit to team-a, half to team-b; names are unique for ever."""
    projects = sorted(PROJECTS)
    return [
        [
            random_submission(
                rng, projects[thread % len(projects)], f"r{round_number:02d}-t{thread}-{i:02d}"
            )
            for i in range(SUBMITS_PER_THREAD)
        ]
        for thread in range(THREADS)
    ]


def _check_journal(data_dir: Path, when: str) -> int:
    journal = read_journal(data_dir / "simulated.jsonl")
    violations = journal_violations(journal)
    assert not violations, f"{when}: the executor journal shows:\n" + "\n".join(violations[:20])
    return len(journal.runs)


def _kill_during_startup(data_dir: Path, delay_s: float) -> None:
    """Start a server and SIGKILL it after `delay_s`, whether or not it answers by then:
    a crash during migrations, node registration, recovery or the first cycles."""
    server = _server(data_dir)
    with contextlib.suppress(TimeoutError):
        server.start(timeout_s=delay_s)
    server.kill()
    _assert_gone(server.pid)


@pytest.fixture
def cleanup() -> Iterator[list[ServerProcess]]:
    """Servers to kill if the test fails half-way."""
    servers: list[ServerProcess] = []
    yield servers
    for server in servers:
        server.kill()


@pytest.mark.slow
def test_sigkill_loses_nothing_acknowledged_and_starts_nothing_twice(
    tmp_path: Path, cleanup: list[ServerProcess]
) -> None:
    rng = random.Random(20_240_611)
    data_dir = tmp_path / "server"
    server = _server(data_dir).start()
    cleanup.append(server)
    with _client(server) as http:
        for name, quota in PROJECTS.items():
            response = http.post("/api/v1/projects", json={"name": name, "quota": {"gpu": quota}})
            assert response.status_code == 201, response.text

    acknowledged: list[Submission] = []
    unexpected: list[str] = []
    mid_burst = 0
    for round_number in range(ROUNDS):
        queues = _queues(rng, round_number)
        burst = Burst(server.url, server.admin_token, queues, round_number, MAX_PAUSE_S)
        burst.start()
        time.sleep(rng.uniform(0, MAX_KILL_DELAY_S))
        server.kill()
        _assert_gone(server.pid)
        result = burst.join()
        acknowledged.extend(result.acknowledged)
        unexpected.extend(result.unexpected)
        mid_burst += bool(result.unanswered)
        _check_journal(data_dir, f"after kill {round_number + 1}")

        if round_number % 7 == 3:
            _kill_during_startup(data_dir, rng.uniform(0.5, 2.5))
            _check_journal(data_dir, f"after a kill during startup in round {round_number + 1}")

        server = _server(data_dir).start()
        cleanup.append(server)
        stored = _stored(server)
        lost = names_of(acknowledged) - set(stored)
        assert not lost, f"after restart {round_number + 1}: acknowledged but lost: {sorted(lost)}"

    assert not unexpected, "answers other than 201 to valid submissions:\n" + "\n".join(unexpected)
    assert len(acknowledged) >= ROUNDS, "too few submissions were acknowledged to test anything"

    # The last server finishes everything: nothing is stuck after 20 crashes.
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        stored = _stored(server)
        unfinished = {key: status for key, status in stored.items() if status != "completed"}
        if not unfinished:
            break
        assert time.monotonic() < deadline, (
            f"{len(unfinished)} of {len(stored)} workloads not completed after "
            f"{DRAIN_TIMEOUT_S} s: {Counter(unfinished.values())}, e.g. "
            f"{sorted(unfinished.items())[:5]}"
        )
        time.sleep(0.2)
    assert names_of(acknowledged) <= set(stored)
    with _client(server) as http:
        response = http.get("/api/v1/events", params={"limit": 10_000})
    assert response.status_code == 200, response.text
    kinds = Counter(event["kind"] for event in response.json())

    server.stop()
    _assert_gone(server.pid)
    runs = _check_journal(data_dir, "at the end")
    journal = read_journal(data_dir / "simulated.jsonl")
    reruns = len(completed_more_than_once(journal))
    unacknowledged = [run.launch_id for run in journal.runs.values() if not run.acknowledged]
    assert not unacknowledged, f"launches whose end was never acknowledged: {unacknowledged[:5]}"
    log = (data_dir / "server.log").read_text(errors="replace")
    assert "Traceback" not in log and "scheduling loop:" not in log, log[-4000:]
    print(
        f"\n{len(acknowledged)} acknowledged of {len(stored)} stored workloads, {runs} launches, "
        f"{mid_burst} of {ROUNDS} kills cut a burst short; events {dict(kinds)}; "
        f"{reruns} tasks completed, then ran again"
    )


# -- the executor's journal after a write cut short by a crash -----------------------------------


def _launch(launch_id: str, task_index: int) -> Launch:
    return Launch(
        launch_id=launch_id,
        project="p",
        workload="w",
        task_index=task_index,
        node="sim-1",
        devices=(task_index,),
        gpu_milli=1000,
        gpu_memory_mib=81920,
        duration_s=100.0,
    )


def test_journal_cut_short_by_a_crash_loses_no_later_record(tmp_path: Path) -> None:
    """A crash in the middle of a journal write leaves a line without its newline. What the next
    executor appends must not be glued to that line and lost: that launch would be unknown after
    one more restart, and started a second time."""
    path = tmp_path / "simulated.jsonl"
    nodes = parse_simulated_nodes("1x8")
    clock = FakeClock()
    executor = SimulatedExecutor(nodes, clock, path)
    executor.start([_launch("first", 0)])
    executor.close()
    with path.open("a", encoding="utf-8") as file:
        file.write('{"op": "start", "at": 1.0, "launch": {"launch_')  # the cut write

    executor = SimulatedExecutor(nodes, clock, path)
    executor.start([_launch("second", 1)])
    executor.close()

    executor = SimulatedExecutor(nodes, clock, path)
    assert executor.known(["first", "second"]) == {"first", "second"}
    executor.close()
    journal = read_journal(path)
    assert not journal_violations(journal)
    assert sorted(journal.runs) == ["first", "second"]


# -- the scheduling loop in-process: the cases the random test found, pinned down ----------------


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[LoopHarness]:
    harness = LoopHarness(tmp_path, "1x2")
    harness.project("a", 2)
    yield harness
    harness.close()


def test_a_completing_workload_keeps_its_devices_until_its_last_task_ends(
    harness: LoopHarness,
) -> None:
    """An elastic workload whose first task completed is `completing` while its other task still
    runs: that task's device must not be started on by anything else meanwhile."""
    harness.submit("a", "first", gpu=1, duration_s=5)
    harness.loop.run_once()
    harness.submit("a", "elastic", gpu=1, tasks=2, min_available=1, duration_s=10)
    harness.loop.run_once()
    assert harness.task_states("a", "elastic") == ["running"]
    harness.clock.advance(5)  # "first" ends; the elastic workload grows onto its device
    harness.loop.run_once()
    assert harness.task_states("a", "elastic") == ["running", "running"]
    harness.clock.advance(5)  # the first elastic task ends; the second runs until t=15
    harness.loop.run_once()
    assert harness.status("a", "elastic") == "completing"

    harness.submit("a", "whole-node", gpu=2, duration_s=1)
    harness.loop.run_once()
    assert not overcommitted_devices(harness.journal())
    assert harness.task_states("a", "whole-node") in ([], ["starting"])
    harness.clock.advance(5)
    harness.loop.run_once()
    harness.loop.run_once()
    assert harness.status("a", "elastic") == "completed"
    assert harness.task_states("a", "whole-node") == ["running"]
    assert not journal_violations(harness.journal())


def test_a_task_stopped_before_it_ever_started_does_not_stay_stopping(
    harness: LoopHarness,
) -> None:
    """Killed after a bind was written but before it was dispatched: the task is `starting`
    and the executor never heard of it. Suspended then, it must end (there is nothing to stop),
    not stay `stopping` for ever, holding its device and keeping its workload out of the
    snapshot so that it never runs again."""
    harness.submit("a", "job", gpu=1, duration_s=10)
    harness.loop.collect_exits()
    harness.loop.cycle()  # the bind is written; the crash comes before dispatch
    assert harness.task_states("a", "job") == ["starting"]
    harness.restart()
    harness.suspend("a", "job")
    harness.loop.run_once()
    harness.loop.run_once()
    assert harness.task_states("a", "job") == ["done"]
    assert harness.status("a", "job") == "suspended"

    harness.resume("a", "job")
    harness.loop.run_once()
    assert harness.status("a", "job") == "running"
    harness.clock.advance(10)
    harness.loop.run_once()
    assert harness.status("a", "job") == "completed"
    journal = harness.journal()
    assert len(journal.runs) == 1
    assert not journal_violations(journal)


# -- crashes at the points where database and executor can disagree -----------------------------


@pytest.mark.parametrize("seed", range(12))
def test_crashes_around_every_executor_call_start_nothing_twice(tmp_path: Path, seed: int) -> None:
    """In-process and on fake time: the loop "crashes" just before or after a third of its
    starts, stops and acknowledgements, and restarts, while workloads are submitted, reclaimed,
    suspended, resumed and deleted. Every workload still ends as it should, nothing is left
    running, and the journal shows nothing started twice."""
    rng = random.Random(seed)
    harness = LoopHarness(
        tmp_path, "2x4", crash_rng=random.Random(1000 + seed), crash_probability=0.3
    )
    try:
        harness.project("a", 2)
        harness.project("b", 6)
        submitted: list[tuple[str, str]] = []
        deleted: set[tuple[str, str]] = set()
        suspended: list[tuple[str, str]] = []
        for step in range(40):
            if step < 24 and step % 2 == 0:
                key = ("a" if step < 12 else "b", f"w{step}")
                harness.submit(
                    *key,
                    gpu=rng.choice((1, 1, 2, 0.5)),
                    tasks=rng.choice((1, 2)),
                    duration_s=rng.choice((1.0, 2.0, 4.0)),
                    grace_period_s=0,
                )
                submitted.append(key)
            if step in (7, 15, 21):
                key = rng.choice(submitted)
                if harness.status(*key) in ("pending", "running"):
                    harness.suspend(*key)
                    suspended.append(key)
            if step in (11, 25):
                for key in suspended:
                    if harness.status(*key) == "suspended":
                        harness.resume(*key)
                suspended.clear()
            if step in (9, 19):
                key = rng.choice(submitted)
                if key not in deleted:
                    harness.delete(*key)
                    deleted.add(key)
            harness.step()
            harness.clock.advance(0.5)
        for key in suspended:
            if harness.status(*key) == "suspended":
                harness.resume(*key)
        for _ in range(200):
            statuses = {key: harness.status(*key) for key in submitted}
            if all(statuses[key] == (None if key in deleted else "completed") for key in statuses):
                break
            harness.step()
            harness.clock.advance(0.5)
        assert statuses == {key: None if key in deleted else "completed" for key in submitted}
        assert harness.live_tasks() == 0
        assert sum(harness.crashes.values()) >= 3, harness.crashes
        assert not journal_violations(harness.journal())
    finally:
        harness.close()


def test_a_workload_suspended_as_it_completes_is_not_run_again(harness: LoopHarness) -> None:
    """The tasks exit by themselves (code 0) just before a suspend is acted on: the executor
    reports a natural exit for tasks the database has as stopping. That result must not be
    thrown away: the workload did complete, and resuming it must not run it again from scratch.
    (The same race, and the same loss, with an eviction instead of a suspend, and made wide by
    a crash between writing an eviction and stopping its tasks: they complete while the server
    is down.)"""
    harness.submit("a", "job", gpu=1, tasks=2, duration_s=2)
    harness.loop.run_once()
    assert harness.task_states("a", "job") == ["running", "running"]
    harness.clock.advance(2)  # both tasks have ended by themselves; the loop has not looked yet
    harness.suspend("a", "job")
    harness.loop.run_once()
    if harness.status("a", "job") == "suspended":
        harness.resume("a", "job")
    for _ in range(3):
        harness.loop.run_once()
        harness.clock.advance(2)
    assert harness.status("a", "job") == "completed"
    assert not completed_more_than_once(harness.journal())
