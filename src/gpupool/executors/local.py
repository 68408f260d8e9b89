"""Real processes on this machine: one session and process group per task.

Every task runs under `gpupool.executors.shim`, which leads its process group, records its pid
before the command starts and its exit code after. The executor journals each launch before
spawning it, so a launch id is started at most once; after a server restart it finds its tasks
again by pid and process start time (`/proc/PID/stat`), or reads how they ended.

Stopping is SIGTERM to the group, the task's grace period, then SIGKILL; a task counts as
running (its devices busy) until every process of its group is gone. A watchdog compares each
task's GPU memory (from the GPU backend: NVML, or declared devices in tests) with its limit.

How a task is kept from the server and other tasks is the `Isolation` it is given
(`gpupool.executors.isolation`: bubblewrap as its project's account, or none); either way a
task gets only its declared environment, gpupool's variables and the server's `PATH` and
locale (`taskenv.inherited_environment`).

Rooms beside this one: `local_journal` (the record of each launch, and replaying the journal),
`local_process` (starting and signalling a task's processes), `local_watchdog` (which tasks use
too much GPU memory), `local_recovery` (finding tasks again after a restart).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from gpupool.clock import Clock
from gpupool.executors import local_journal, local_process, local_recovery, local_watchdog
from gpupool.executors.base import (
    DeviceInfo,
    Exit,
    Launch,
    NodeInventory,
    Stop,
    UsageSample,
    running_launches,
    unacknowledged_exits,
)
from gpupool.executors.gpus.declared import DeclaredBackend
from gpupool.executors.gpus.devices import GpuBackend
from gpupool.executors.isolation import Isolation, NoIsolation
from gpupool.executors.local_journal import CorruptJournalError, Run
from gpupool.executors.local_recovery import group_members as _group_members
from gpupool.executors.local_recovery import live_task_groups
from gpupool.executors.local_recovery import proc_stat as _proc_stat

__all__ = ["LocalExecutor", "live_task_groups", "local_node_name"]

_KILLED = 137


def local_node_name() -> str:
    """This machine's host name as a node name (lower case, letters, digits, '-')."""
    name = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-")
    return name or "local"


class LocalExecutor:
    """Runs launches as processes on this machine, on the devices of `gpus`."""

    def __init__(
        self,
        data_dir: Path,
        gpus: GpuBackend,
        clock: Clock,
        node_name: str | None = None,
        watchdog_interval_s: float = 2.0,
        sample_interval_s: float = 5.0,
        python: str = sys.executable,
        report: Callable[[str], None] | None = None,
        isolation: Isolation | None = None,
    ) -> None:
        self.name = "local"
        self.isolation: Isolation = isolation or NoIsolation()
        self._gpus = gpus
        self._clock = clock
        self._node = node_name or local_node_name()
        self._python = python
        self._watchdog_interval_s = watchdog_interval_s
        self._last_watchdog_s = 0.0
        self._sample_interval_s = sample_interval_s
        self._last_sample_s = 0.0
        self._samples: list[UsageSample] = []
        self.state_dir = data_dir / "local"
        self.logs_dir = data_dir / "logs"
        self.checkpoints_dir = data_dir / "checkpoints"
        for directory in (self.state_dir, self.logs_dir, self.checkpoints_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._runs: dict[str, Run] = {}
        self._journal_path = self.state_dir / "journal.jsonl"
        self._report = report or _stderr
        corrupt = self._replay_or_set_aside()
        self._journal: IO[str] | None = self._journal_path.open("a", encoding="utf-8")
        self._adopt(corrupt)

    # -- the Executor protocol -----------------------------------------------------------------

    def inventory(self) -> Sequence[NodeInventory]:
        devices = tuple(
            DeviceInfo(index=d.index, memory_mib=d.memory_mib, model=d.model, uuid=d.uuid)
            for d in self._gpus.devices()
        )
        cpus = os.cpu_count() or 1
        memory_mib = _memory_mib()
        return (NodeInventory(self._node, devices, cpu_milli=cpus * 1000, memory_mib=memory_mib),)

    def start(self, launches: Sequence[Launch]) -> None:
        with self._lock:
            for launch in launches:
                if launch.launch_id in self._runs:
                    continue
                now = self._clock.now_s()
                port = self._master_port(launch)
                record = {"op": "start", "at": now, "launch": launch.to_json()}
                if port is not None:
                    record["master_port"] = port
                self._append(record)
                run = Run(launch, now, log_path=self.logs_dir / f"{launch.launch_id}.log")
                run.master_port = port
                self._runs[launch.launch_id] = run
                self._spawn(run)

    def stop(self, stops: Sequence[Stop]) -> None:
        with self._lock:
            now = self._clock.now_s()
            for stop in stops:
                run = self._runs.get(stop.launch_id)
                if run is None or run.ended is not None or run.kill_at_s is not None:
                    continue
                self._append(
                    {"op": "stop", "at": now, "id": stop.launch_id, "grace": stop.grace_period_s}
                )
                local_process.terminate(run, now, stop.grace_period_s, stop.reason)

    def alive(self) -> set[str]:
        with self._lock:
            self._poll()
            return running_launches(self._runs)

    def known(self, launch_ids: Sequence[str]) -> set[str]:
        with self._lock:
            return {launch_id for launch_id in launch_ids if launch_id in self._runs}

    def exits(self) -> Sequence[Exit]:
        with self._lock:
            self._poll()
            return unacknowledged_exits(self._runs)

    def acknowledge(self, launch_ids: Sequence[str]) -> None:
        with self._lock:
            for launch_id in launch_ids:
                run = self._runs.get(launch_id)
                if run is not None and run.ended is not None and not run.acknowledged:
                    run.acknowledged = True
                    self._append({"op": "ack", "id": launch_id})
                    for suffix in ("pid", "exit"):
                        (self.state_dir / f"{launch_id}.{suffix}").unlink(missing_ok=True)

    def read_log(self, launch_id: str, offset: int, limit: int) -> tuple[bytes, bool]:
        with self._lock:
            run = self._runs.get(launch_id)
            if run is None:
                return b"", False
            ended = run.ended is not None
            path = run.log_path
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                return handle.read(limit), ended
        except FileNotFoundError:
            return b"", ended

    def log_size(self, launch_id: str) -> tuple[int, bool]:
        # `ended` is set, and the "task ended" line written, under the lock once every process
        # of the task's group is gone: read it first, and the size after it is final.
        with self._lock:
            run = self._runs.get(launch_id)
            if run is None:
                return 0, False
            ended = run.ended is not None
            path = run.log_path
        try:
            return path.stat().st_size, ended
        except FileNotFoundError:
            return 0, ended

    def close(self) -> None:
        """Leave running tasks alone (a restarted server adopts them); `stop_all` ends them."""
        with self._lock:
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            self._gpus.close()

    def usage_samples(self) -> Sequence[UsageSample]:
        with self._lock:
            now = self._clock.now_s()
            if now - self._last_sample_s >= self._sample_interval_s:
                self._last_sample_s = now
                self._samples.extend(
                    UsageSample(now, self._node, d.index, d.utilization_percent, d.memory_used_mib)
                    for d in self._gpus.sample()
                )
            taken, self._samples = self._samples, []
            return taken

    def stop_all(self, timeout_s: float = 30.0) -> None:
        """Stop every task now (SIGTERM, then SIGKILL after its grace, at most `timeout_s`)
        and wait until their processes are gone: what `gpupool down` promises."""
        import time

        with self._lock:
            now = self._clock.now_s()
            for run in self._runs.values():
                if run.ended is None and run.kill_at_s is None:
                    grace = min(run.launch.grace_period_s, int(timeout_s))
                    local_process.terminate(run, now, grace, "the server is shutting down")
        deadline = time.monotonic() + timeout_s + 5
        while time.monotonic() < deadline:
            with self._lock:
                self._poll()
                running = [r for r in self._runs.values() if r.ended is None]
                if not running:
                    return
                if time.monotonic() > deadline - 5:
                    for run in running:
                        local_process.kill_group(run)
            time.sleep(0.05)

    # -- internals ------------------------------------------------------------------------------

    def _master_port(self, launch: Launch) -> int | None:
        """The gang's port: that of a live task of the same workload, else a free one (a gang
        started again after a preemption gets a new one, as its old tasks are gone)."""
        if launch.world_size <= 1:
            return None
        for run in self._runs.values():
            other = run.launch
            if (
                run.ended is None
                and run.master_port is not None
                and (other.project, other.workload) == (launch.project, launch.workload)
            ):
                return run.master_port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    def _spawn(self, run: Run) -> None:
        launch = run.launch
        checkpoint_dir = self.checkpoints_dir / launch.project / launch.workload
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        report_dir = self._gpus.report_dir if isinstance(self._gpus, DeclaredBackend) else None
        with run.log_path.open("ab") as log:
            try:
                process = local_process.popen_task(
                    launch,
                    log,
                    python=self._python,
                    state_dir=self.state_dir,
                    checkpoint_dir=checkpoint_dir,
                    isolation=self.isolation,
                    gpus=self._gpus,
                    report_dir=report_dir,
                    master_port=run.master_port,
                )
            except (OSError, ValueError, TypeError) as error:
                # Not started, never will be (a NUL byte in the command, a missing program, a
                # working directory outside the task roots): the task ends as a failure with
                # the reason, not as a stop to retry.
                log.write(f"gpupool: cannot start the task: {error}\n".encode())
                self._end(run, 127, f"cannot start: {error}", stopped=False)
                return
        run.process = process
        run.pid = process.pid
        stat = _proc_stat(process.pid)
        run.start_ticks = stat[1] if stat else None
        self._append(
            {"op": "pid", "id": launch.launch_id, "pid": run.pid, "ticks": run.start_ticks}
        )

    def _poll(self) -> None:
        now = self._clock.now_s()
        live = [run for run in self._runs.values() if run.ended is None]
        if not live:
            return
        members = _group_members({run.pid for run in live if run.pid is not None})
        for run in live:
            if run.pid is None:
                self._find_pid(run)
                if run.pid is None:
                    continue
            if run.kill_at_s is not None and now >= run.kill_at_s:
                local_process.kill_group(run)
            if local_process.shim_alive(run) or members.get(run.pid):
                continue
            self._finish(run)
        if now - self._last_watchdog_s >= self._watchdog_interval_s:
            self._last_watchdog_s = now
            self._watchdog(members)

    def _find_pid(self, run: Run) -> None:
        """A launch journaled but whose pid was not (the server died while spawning it)."""
        pid_file = self.state_dir / f"{run.launch.launch_id}.pid"
        try:
            run.pid = int(pid_file.read_text())
        except (OSError, ValueError):
            self._end(
                run,
                _KILLED,
                "did not start: the server stopped while starting it",
                stopped=True,
            )
            return
        stat = _proc_stat(run.pid)
        run.start_ticks = stat[1] if stat else None

    def _finish(self, run: Run) -> None:
        exit_file = self.state_dir / f"{run.launch.launch_id}.exit"
        try:
            record = json.loads(exit_file.read_text())
            code = int(record["exit_code"])
        except (OSError, ValueError, KeyError, TypeError):
            code = _KILLED
        if run.evict_reason is not None:
            self._end(run, code, run.evict_reason, stopped=run.evict_requeues)
        elif run.stop_reason is not None:
            how = "killed after its grace period" if code == _KILLED else f"exit code {code}"
            self._end(run, code, f"stopped ({how}): {run.stop_reason}", stopped=True)
        elif code == 0:
            self._end(run, 0, "completed", stopped=False)
        else:
            self._end(run, code, f"exited with code {code}", stopped=False)

    def _end(self, run: Run, code: int, reason: str, stopped: bool) -> None:
        now = self._clock.now_s()
        run.ended = Exit(run.launch.launch_id, code, now, reason, stopped)
        if run.process is not None:
            run.process.poll()
        self._append(
            {
                "op": "end",
                "id": run.launch.launch_id,
                "code": code,
                "at": now,
                "reason": reason,
                "stopped": stopped,
            }
        )
        with run.log_path.open("a", encoding="utf-8") as log:
            log.write(f"gpupool: task ended: {reason}\n")

    def _watchdog(self, members: dict[int, list[int]]) -> None:
        """Evict tasks whose processes use more GPU memory than they were given
        (`local_watchdog.evictions` says which, and why)."""
        usage = self._gpus.process_memory()
        if not usage:
            return
        capacity = {d.index: d.memory_mib for d in self._gpus.devices()}
        now = self._clock.now_s()
        for eviction in local_watchdog.evictions(self._runs.values(), usage, members, capacity):
            run = eviction.run
            run.evict_reason = eviction.reason
            if eviction.requeues:
                run.evict_requeues = True
            local_process.terminate(run, now, eviction.grace_s, eviction.reason)

    def _append(self, record: dict[str, Any]) -> None:
        if self._journal is None:
            return
        self._journal.write(json.dumps(record) + "\n")
        self._journal.flush()
        os.fsync(self._journal.fileno())

    def _replay_or_set_aside(self) -> str | None:
        """Replay the journal; if it is corrupt, move it aside (`journal.corrupt-TIME`) and
        start from nothing (`_adopt` finds the tasks again). Returns what happened, or None."""
        try:
            self._runs = local_journal.replay(self._journal_path, self.logs_dir)
        except CorruptJournalError as error:
            self._runs.clear()
            aside = local_recovery.set_aside(self._journal_path, self._clock.now_s())
            return f"the journal {self._journal_path} is corrupt ({error}); moved it to {aside}"
        return None

    def _adopt(self, corrupt: str | None) -> None:
        """Tasks the journal does not name, found by their pid and exit files and processes
        (`local_recovery`): running ones adopted, ended ones reported; never started again."""
        found = local_recovery.find(self.state_dir, self._node, set(self._runs))
        now = self._clock.now_s()
        for item in found:
            launch = item.launch
            run = Run(launch, now, log_path=self.logs_dir / f"{launch.launch_id}.log")
            run.master_port = item.master_port
            self._runs[launch.launch_id] = run
            record: dict[str, Any] = {"op": "start", "at": now, "launch": launch.to_json()}
            if item.master_port is not None:
                record["master_port"] = item.master_port
            self._append(record)
            ending = item.ending()
            if ending is not None:
                self._end(run, *ending)
            elif item.pid is not None:
                stat = _proc_stat(item.pid)
                run.pid, run.start_ticks = item.pid, stat[1] if stat else None
                self._append(
                    {"op": "pid", "id": launch.launch_id, "pid": run.pid, "ticks": run.start_ticks}
                )
        message = local_recovery.summary(found, corrupt, self.state_dir)
        if message is not None:
            self._report(f"gpupool: local executor: {message}")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _memory_mib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None
