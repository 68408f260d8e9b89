"""Helpers of the crash-safety test: bursts of submissions from threads, and the checks run on
the simulated executor's journal (`<data_dir>/simulated.jsonl`).

The journal is the executor's own durable record of what it did: every start, stop, exit and
acknowledgement, fsynced before the call returned. A run lasts from its start until its stop or
its natural end (`start + duration_s`), whichever comes first; an `exit` record marks a natural
end the executor has noticed.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
from sqlalchemy import func, select

from gpupool.api.schemas import ProjectIn, Role, WorkloadIn
from gpupool.clock import FakeClock
from gpupool.core.model import SchedulerSettings
from gpupool.executors.base import Executor, Exit, Launch, NodeInventory, Stop
from gpupool.executors.simulated import SimulatedExecutor, parse_simulated_nodes
from gpupool.server import migrate
from gpupool.server.auth import Principal
from gpupool.server.db import ProjectRow, TaskRow, WorkloadRow, make_engine, make_sessionmakers
from gpupool.server.metrics import ServerMetrics
from gpupool.server.scheduler import SchedulingLoop
from gpupool.server.services import projects, workloads

# -- the journal ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Run:
    """One launch as the journal tells it."""

    launch_id: str
    project: str
    workload: str
    task_index: int
    node: str
    devices: tuple[int, ...]
    gpu_milli: int
    start_s: float
    duration_s: float | None
    stop_s: float | None = None
    exited: bool = False
    """An `exit` record: the launch ended by itself (not stopped)."""
    acknowledged: bool = False

    @property
    def end_s(self) -> float:
        natural = math.inf if self.duration_s is None else self.start_s + self.duration_s
        return natural if self.stop_s is None else min(self.stop_s, natural)

    @property
    def task(self) -> tuple[str, str, int]:
        return (self.project, self.workload, self.task_index)


@dataclass(slots=True)
class Journal:
    runs: dict[str, Run] = field(default_factory=dict)
    starts: Counter[str] = field(default_factory=Counter)
    """How many `start` records each launch id has (more than one: started twice)."""
    problems: list[str] = field(default_factory=list)
    """Records that make no sense: unreadable lines, ops on launches never started."""


def read_journal(path: Path) -> Journal:
    """Parse the journal. A last line without its newline (a write cut by the kill) is ignored,
    as the executor ignores it; any other unreadable line is a problem."""
    journal = Journal()
    if not path.exists():
        return journal
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    # text ends with "\n" when the last write was whole: then the last element is "".
    for number, line in enumerate(lines[:-1], start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            journal.problems.append(f"line {number} is not JSON: {line[:200]!r}")
            continue
        _apply(journal, record, number)
    return journal


def _apply(journal: Journal, record: dict[str, Any], number: int) -> None:
    op = record.get("op")
    if op == "start":
        launch = record["launch"]
        launch_id = launch["launch_id"]
        journal.starts[launch_id] += 1
        if launch_id not in journal.runs:
            journal.runs[launch_id] = Run(
                launch_id=launch_id,
                project=launch["project"],
                workload=launch["workload"],
                task_index=launch["task_index"],
                node=launch["node"],
                devices=tuple(launch["devices"]),
                gpu_milli=launch["gpu_milli"],
                start_s=record["at"],
                duration_s=launch["duration_s"],
            )
        return
    run = journal.runs.get(record.get("id", ""))
    if run is None:
        journal.problems.append(f"line {number}: {op} of a launch never started: {record}")
        return
    if op == "stop":
        if run.stop_s is not None or run.exited:
            journal.problems.append(f"line {number}: launch {run.launch_id} ended twice")
        run.stop_s = record["at"]
    elif op == "exit":
        if run.stop_s is not None or run.exited:
            journal.problems.append(f"line {number}: launch {run.launch_id} ended twice")
        run.exited = True
    elif op == "ack":
        run.acknowledged = True
    else:
        journal.problems.append(f"line {number}: unknown op {op!r}")


def started_twice(journal: Journal) -> list[str]:
    return [
        f"launch {launch_id} has {count} start records"
        for launch_id, count in sorted(journal.starts.items())
        if count > 1
    ]


def overlapping_task_runs(journal: Journal) -> list[str]:
    """Two launches of the same task (project, workload, task index) running at once."""
    by_task: dict[tuple[str, str, int], list[Run]] = defaultdict(list)
    for run in journal.runs.values():
        by_task[run.task].append(run)
    found = []
    for task, runs in sorted(by_task.items()):
        runs.sort(key=lambda r: r.start_s)
        for before, after in itertools.pairwise(runs):
            if after.start_s < before.end_s:
                found.append(
                    f"task {task}: launch {after.launch_id} started at {after.start_s:.3f} while "
                    f"{before.launch_id} (started {before.start_s:.3f}) ran until "
                    f"{before.end_s:.3f}"
                )
    return found


def overcommitted_devices(journal: Journal, limit_milli: int = 1000) -> list[str]:
    """Moments where the launches on one device were charged more than a whole device."""
    events: dict[tuple[str, int], list[tuple[float, int, str]]] = defaultdict(list)
    for run in journal.runs.values():
        for device in run.devices:
            # At equal times an end (-milli) sorts before a start (+milli): intervals are
            # half-open, a device freed at t may be taken again at t.
            events[(run.node, device)].append((run.start_s, run.gpu_milli, run.launch_id))
            events[(run.node, device)].append((run.end_s, -run.gpu_milli, run.launch_id))
    found = []
    for (node, device), items in sorted(events.items()):
        items.sort(key=lambda e: (e[0], e[1]))
        held = 0
        running: set[str] = set()
        for at_s, milli, launch_id in items:
            held += milli
            if milli > 0:
                running.add(launch_id)
            else:
                running.discard(launch_id)
            if held > limit_milli:
                found.append(
                    f"{node} device {device} held {held} milli-GPU at {at_s:.3f}: {sorted(running)}"
                )
                break
    return found


def completed_more_than_once(journal: Journal) -> list[str]:
    """A task that ended by itself (completed) in two launches: it was run again after it had
    completed. Not in `journal_violations`: the service does this today when a stop (suspend,
    eviction) races a natural exit; see test_crash_safety's test of that."""
    natural: Counter[tuple[str, str, int]] = Counter(
        run.task for run in journal.runs.values() if run.exited
    )
    return [f"task {task} completed {count} times" for task, count in natural.items() if count > 1]


def journal_violations(journal: Journal) -> list[str]:
    """Unreadable records, a launch started twice, two launches of one task at once, a device
    charged more than a whole GPU."""
    return [
        *journal.problems,
        *started_twice(journal),
        *overlapping_task_runs(journal),
        *overcommitted_devices(journal),
    ]


# -- bursts of submissions -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Submission:
    project: str
    name: str
    body: dict[str, Any]


def random_submission(rng: random.Random, project: str, name: str) -> Submission:
    """A short train workload: 1 to 3 tasks of 2, 1, 0.5 or 0.25 GPU, 0.2 to 1.5 s each."""
    tasks = rng.choice((1, 1, 2, 3))
    body: dict[str, Any] = {
        "name": name,
        "project": project,
        "gpu": rng.choice((1, 1, 2, 0.5, 0.5, 0.25)),
        "tasks": tasks,
        "duration_s": round(rng.uniform(0.2, 1.5), 3),
        "grace_period_s": 0,
    }
    if tasks > 1 and rng.random() < 0.3:
        body["min_available"] = tasks - 1
    return Submission(project, name, body)


@dataclass(slots=True)
class BurstResult:
    acknowledged: list[Submission] = field(default_factory=list)
    """Submissions answered 201: the server promised to keep them."""
    unanswered: list[Submission] = field(default_factory=list)
    """The connection failed (the server was killed), and the rest of that thread's queue,
    never sent: may or may not be stored."""
    unexpected: list[str] = field(default_factory=list)
    """Any other answer: a server bug."""


class Burst:
    """Threads that submit their queues concurrently, with short random pauses, until the queue
    is empty or the server stops answering."""

    def __init__(
        self,
        url: str,
        token: str,
        queues: Sequence[Sequence[Submission]],
        seed: int,
        max_pause_s: float = 0.05,
    ) -> None:
        self._url = url
        self._token = token
        self._queues = queues
        self._seed = seed
        self._max_pause_s = max_pause_s
        self._lock = threading.Lock()
        self.result = BurstResult()
        self._threads = [
            threading.Thread(target=self._submit, args=(i, queue), daemon=True)
            for i, queue in enumerate(queues)
        ]

    def start(self) -> Burst:
        for thread in self._threads:
            thread.start()
        return self

    def join(self, timeout_s: float = 30.0) -> BurstResult:
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise AssertionError(f"a submitting thread did not finish in {timeout_s} s")
        return self.result

    def _submit(self, number: int, queue: Sequence[Submission]) -> None:
        rng = random.Random(self._seed * 1000 + number)
        headers = {"Authorization": f"Bearer {self._token}"}
        with httpx.Client(base_url=self._url, headers=headers, timeout=20.0) as http:
            for index, submission in enumerate(queue):
                try:
                    response = http.post("/api/v1/workloads", json=submission.body)
                except httpx.TransportError:
                    with self._lock:
                        self.result.unanswered.extend(queue[index:])
                    return
                with self._lock:
                    if response.status_code == 201:
                        self.result.acknowledged.append(submission)
                    else:
                        self.result.unexpected.append(
                            f"{submission.project}/{submission.name}: "
                            f"{response.status_code} {response.text[:300]}"
                        )
                time.sleep(rng.uniform(0, self._max_pause_s))


def names_of(submissions: Iterable[Submission]) -> set[tuple[str, str]]:
    return {(s.project, s.name) for s in submissions}


# -- the scheduling loop in-process, on fake time ------------------------------------------------

ADMIN = Principal(1, "admin", Role.ADMIN, frozenset())


class SimulatedCrashError(BaseException):
    """Raised by `CrashingExecutor` where a SIGKILL would have stopped the server. Not an
    `Exception`: nothing in the server may handle it (the loop's fallbacks that go on after
    one workload's error would otherwise "survive" a SIGKILL)."""


class CrashingExecutor:
    """A simulated executor that "crashes" the server (raises `SimulatedCrashError`) just
    before or just after some of the calls that change it, chosen by `rng` with `probability`
    per call: the points where the loop's database writes and the executor's journal can
    disagree."""

    def __init__(self, inner: SimulatedExecutor, rng: random.Random, probability: float) -> None:
        self.inner = inner
        self.name = inner.name
        self._rng = rng
        self._probability = probability

    def __getattr__(self, name: str) -> Any:
        """Whatever else the executor interface has: the inner executor's, without crashes."""
        return getattr(self.inner, name)

    def _maybe_crash(self, where: str) -> None:
        if self._rng.random() < self._probability / 2:
            raise SimulatedCrashError(where)

    def inventory(self) -> Sequence[NodeInventory]:
        return self.inner.inventory()

    def start(self, launches: Sequence[Launch]) -> None:
        self._maybe_crash("before start")
        self.inner.start(launches)
        self._maybe_crash("after start")

    def stop(self, stops: Sequence[Stop]) -> None:
        self._maybe_crash("before stop")
        self.inner.stop(stops)
        self._maybe_crash("after stop")

    def alive(self) -> set[str]:
        return self.inner.alive()

    def known(self, launch_ids: Sequence[str]) -> set[str]:
        return self.inner.known(launch_ids)

    def exits(self) -> Sequence[Exit]:
        return self.inner.exits()

    def acknowledge(self, launch_ids: Sequence[str]) -> None:
        self._maybe_crash("before acknowledge")
        self.inner.acknowledge(launch_ids)
        self._maybe_crash("after acknowledge")

    def read_log(self, launch_id: str, offset: int, limit: int) -> tuple[bytes, bool]:
        return self.inner.read_log(launch_id, offset, limit)

    def log_size(self, launch_id: str) -> tuple[int, bool]:
        return self.inner.log_size(launch_id)

    def close(self) -> None:
        self.inner.close()


class LoopHarness:
    """A database, a journaled simulated executor and a `SchedulingLoop` without its thread:
    each `run_once` is one step, time moves only when told. `restart()` drops the loop and
    executor as a SIGKILL would (nothing of theirs runs) and builds new ones on the same files.

    With `crash_rng`, the executor is a `CrashingExecutor` and `step()` restarts after each
    crash, as the server's supervisor would."""

    def __init__(
        self,
        tmp: Path,
        nodes: str,
        crash_rng: random.Random | None = None,
        crash_probability: float = 0.0,
    ) -> None:
        self.tmp = tmp
        self.nodes = nodes
        self.clock = FakeClock()
        self.engine = make_engine(f"sqlite:///{tmp / 'gpupool.db'}")
        migrate.upgrade(self.engine)
        self.writer, self.reader = make_sessionmakers(self.engine)
        self.journal_path = tmp / "simulated.jsonl"
        self._crash_rng = crash_rng
        self._crash_probability = crash_probability
        self.crashes: Counter[str] = Counter()
        self.executor, self.loop = self._new_loop()

    def _new_loop(self) -> tuple[Executor, SchedulingLoop]:
        simulated = SimulatedExecutor(
            parse_simulated_nodes(self.nodes), self.clock, self.journal_path
        )
        executor: Executor = simulated
        if self._crash_rng is not None:
            crashing = CrashingExecutor(simulated, self._crash_rng, self._crash_probability)
            executor = cast(Executor, crashing)
        loop = SchedulingLoop(
            self.writer, executor, self.clock, SchedulerSettings(), ServerMetrics()
        )
        loop.register_nodes(executor.inventory())
        loop.recover()
        return executor, loop

    def restart(self) -> None:
        self.executor.close()
        self.executor, self.loop = self._new_loop()

    def step(self) -> None:
        """One iteration of the loop; after a crash in it, a restart."""
        try:
            self.loop.run_once()
        except SimulatedCrashError as crash:
            self.crashes[str(crash)] += 1
            self.restart()

    def close(self) -> None:
        self.executor.close()
        self.engine.dispose()

    def project(self, name: str, quota_gpu: int) -> None:
        body = ProjectIn.model_validate({"name": name, "quota": {"gpu": quota_gpu}})
        with self.writer.begin() as session:
            projects.create(session, body, self.clock.now_s(), {}, "admin")

    def submit(self, project: str, name: str, **fields: object) -> None:
        body = WorkloadIn.model_validate({"name": name, "project": project, **fields})
        with self.writer.begin() as session:
            workloads.submit(session, body, ADMIN, self.clock.now_s())

    def delete(self, project: str, name: str) -> None:
        with self.writer.begin() as session:
            row = workloads.get_row(session, project, name, ADMIN)
            workloads.delete(session, row, ADMIN, self.clock.now_s())

    def suspend(self, project: str, name: str) -> None:
        with self.writer.begin() as session:
            row = workloads.get_row(session, project, name, ADMIN)
            workloads.suspend(session, row, ADMIN, self.clock.now_s())

    def resume(self, project: str, name: str) -> None:
        with self.writer.begin() as session:
            row = workloads.get_row(session, project, name, ADMIN)
            workloads.resume(session, row, ADMIN, self.clock.now_s())

    def status(self, project: str, name: str) -> str | None:
        """The workload's status; None once it is gone (deleted)."""
        with self.reader() as session:
            row = session.execute(
                select(WorkloadRow.status)
                .join(ProjectRow, ProjectRow.id == WorkloadRow.project_id)
                .where(ProjectRow.name == project, WorkloadRow.name == name)
            ).scalar_one_or_none()
            return row

    def live_tasks(self) -> int:
        """Task rows not done, over all workloads."""
        with self.reader() as session:
            count = session.scalar(
                select(func.count()).select_from(TaskRow).where(TaskRow.state != "done")
            )
            return int(count or 0)

    def task_states(self, project: str, name: str) -> list[str]:
        """The states of the workload's task rows, oldest first."""
        with self.reader() as session:
            row = workloads.get_row(session, project, name, ADMIN)
            return list(
                session.scalars(
                    select(TaskRow.state).where(TaskRow.workload_id == row.id).order_by(TaskRow.id)
                )
            )

    def journal(self) -> Journal:
        return read_journal(self.journal_path)
