"""Carrying the written decisions out: stop what should stop, then start what may start.

Stopping tasks are stopped (each stop sent once until its exit is collected); starting tasks
are started once nothing that is stopping still holds their devices or their task, then marked
`running`. A launch that cannot be built or that the executor refuses fails its workload
(`quarantine`), the others go on. Starts are idempotent by launch id, so repeating any of this
after a crash starts nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from sqlalchemy import Row, Table, select, update
from sqlalchemy import bindparam as _bind
from sqlalchemy.orm import Session, sessionmaker

from gpupool.api.schemas import TaskState
from gpupool.clock import Clock
from gpupool.core.lifecycle import TASK, TaskEvent
from gpupool.core.model import MILLI_PER_GPU
from gpupool.executors.base import Executor, Launch, Stop
from gpupool.server import exits, external, isolation, quarantine
from gpupool.server.db import TaskRow, WorkloadRow, physical_devices
from gpupool.server.dbfaults import is_outage
from gpupool.server.quarantine import describe
from gpupool.server.rowcheck import launch_problem
from gpupool.server.snapshot import SCHEDULED, gpu_request

TASKS = cast(Table, TaskRow.__table__)
(_STARTABLE,) = TASK.sources(TaskEvent.STARTED)
"""Starting: the one task state the executor's start moves on (to `_STARTED`)."""
_STARTED = TASK.target(TaskEvent.STARTED)


class Launches:
    """The executor side of the loop: what it was told to stop, and the launches it refused.

    Only the scheduling loop's thread calls this."""

    def __init__(
        self,
        writer: sessionmaker[Session],
        executor: Executor,
        clock: Clock,
        announce: Callable[[str], None],
    ) -> None:
        self._writer = writer
        self._executor = executor
        self._clock = clock
        self._announce = announce
        self._stops_sent: set[str] = set()
        self._start_failures: dict[str, tuple[int, float]] = {}

    def forget_stops(self) -> None:
        """Send every stop again (on taking over: another replica may have sent them)."""
        self._stops_sent.clear()

    def collect_exits(self) -> None:
        """Write down the executor's exits (`exits.collect`); their stops are done."""
        self._stops_sent.difference_update(exits.collect(self._writer, self._executor, self._clock))

    def dispatch(self) -> None:
        """Stop what should stop, then start what may start."""
        stopping = self._stopping()
        stops = [
            Stop(launch_id, grace, reason or "stopped")
            for launch_id, _, _, _, _, _, reason, grace in stopping
            if launch_id not in self._stops_sent
        ]
        unstarted = exits.end_unstarted(
            self._writer, self._executor, self._clock, [stop.launch_id for stop in stops]
        )
        stops = [stop for stop in stops if stop.launch_id not in unstarted]
        if stops:
            self._executor.stop(stops)
            self._stops_sent.update(stop.launch_id for stop in stops)
            self.collect_exits()
        if stops or unstarted:
            stopping = self._stopping()
        busy_devices = {
            (node, device)
            for _, _, _, node, devices, burst, _, _ in stopping
            for device in physical_devices(devices, burst)
        }
        busy_tasks = {(workload_id, index) for _, workload_id, index, *_ in stopping}
        self._start_ready(busy_devices, busy_tasks)

    def _stopping(
        self,
    ) -> Sequence[Row[str, int, int, str, list[int], int | None, str | None, int]]:
        """Tasks asked to stop and not gone yet, with their workload's grace period."""
        with self._writer() as session, session.begin():
            return session.execute(
                select(
                    TaskRow.launch_id,
                    TaskRow.workload_id,
                    TaskRow.task_index,
                    TaskRow.node,
                    TaskRow.devices,
                    TaskRow.burst_device,
                    TaskRow.reason,
                    WorkloadRow.grace_period_s,
                )
                .join(WorkloadRow, WorkloadRow.id == TaskRow.workload_id)
                .where(TaskRow.state == TaskState.STOPPING.value)
            ).all()

    def _start_ready(
        self, busy_devices: set[tuple[str, int]], busy_tasks: set[tuple[int, int]]
    ) -> None:
        with self._writer() as session, session.begin():
            rows, problems = isolation.starting_rows(session)
            # Running tasks of workloads the snapshot leaves out (none should be: a safety net):
            # the core did not see their devices, so it may have bound others there; those
            # wait, as for stopping tasks.
            unseen = session.execute(
                select(TaskRow.node, TaskRow.devices, TaskRow.burst_device)
                .join(WorkloadRow, WorkloadRow.id == TaskRow.workload_id)
                .where(
                    TaskRow.state == TaskState.RUNNING.value,
                    WorkloadRow.status.not_in(SCHEDULED),
                )
            ).all()
        held = {
            (node, index)
            for node, indices, burst in unseen
            for index in physical_devices(indices, burst)
        }
        # Starting tasks of workloads the snapshot left out go first, and the devices they
        # take are held for the others.
        rows = sorted(rows, key=lambda row: row[1].status in SCHEDULED)
        launches: list[Launch] = []
        workload_of: dict[str, int] = {}
        for task, workload, project, device_memory_mib in rows:
            if (workload.id, task.task_index) in busy_tasks:
                continue
            devices = physical_devices(task.devices, task.burst_device)
            if any((task.node, d) in busy_devices for d in devices):
                continue
            if any((task.node, d) in held for d in devices):
                continue
            if workload.status not in SCHEDULED:
                held.update((task.node, d) for d in devices)
            try:
                problem = launch_problem(workload.command, workload.env, workload.working_dir)
                launch = None if problem else _launch(task, workload, project, device_memory_mib)
            except Exception as error:
                problem, launch = describe(error), None
            if launch is None:
                problems[workload.id] = f"task {task.task_index} cannot be started: {problem}"
                continue
            workload_of[launch.launch_id] = workload.id
            launches.append(launch)
        if launches:
            try:
                self._executor.start(launches)
            except Exception as error:
                if is_outage(error):
                    raise
                launches, given_up = isolation.start_apart(
                    self._executor, launches, self._start_failures, self._clock.now_s()
                )
                problems.update({workload_of[launch]: why for launch, why in given_up.items()})
        now = self._clock.now_s()
        if problems:
            quarantine.fail_each(self._writer, problems, now, self._announce)
        if not launches:
            return
        started = [{"launch": launch.launch_id, "now": now} for launch in launches]
        with self._writer.begin() as session:
            session.connection().execute(
                update(TASKS)
                .where(TASKS.c.launch_id == _bind("launch"))
                .where(TASKS.c.state == _STARTABLE.value)
                .values(state=_STARTED.value, started_at=_bind("now")),
                started,
            )


def _launch(task: TaskRow, workload: WorkloadRow, project: str, device_memory_mib: int) -> Launch:
    request = gpu_request(workload.gpu_kind, workload.gpu_amount, workload.gpu_limit_milli)
    per_device_milli = min(MILLI_PER_GPU, request.milli_on(device_memory_mib))
    return Launch(
        launch_id=task.launch_id,
        project=project,
        workload=workload.name,
        task_index=task.task_index,
        node=task.node,
        devices=physical_devices(task.devices, task.burst_device),
        gpu_milli=per_device_milli,
        gpu_memory_mib=request.memory_mib_on(device_memory_mib),
        command=tuple(workload.command),
        env=tuple(sorted(workload.env.items())),
        grace_period_s=workload.grace_period_s,
        duration_s=workload.duration_s,
        burst_memory_mib=(
            request.limit_milli * device_memory_mib // MILLI_PER_GPU
            if request.is_burstable and request.limit_milli is not None
            else None
        ),
        working_dir=workload.working_dir,
        image=workload.image,
        world_size=workload.tasks,
        cpu_milli=workload.cpu_milli,
        memory_mib=workload.memory_mib,
        external_ref=(
            external.ref_pod(workload.pods[task.task_index])
            if workload.pods is not None and task.task_index < len(workload.pods)
            else None
        ),
        workload_type=workload.type,
    )
