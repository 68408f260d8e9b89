"""Declared nodes whose tasks "run" for their `duration_s` or until stopped: the whole service
flow without processes, for demos, load tests and tests.

With a journal file, what was started survives the server being killed: every start, stop, exit
and acknowledgement is appended (and fsynced) before the call returns, and a new executor on the
same journal carries on where the old one stopped. That is how the crash tests prove that no
launch is started twice.

Utilization is a model, deterministic so that tests and demos can check what the history shows:
a running task keeps each of its devices busy at its charge there (`gpu_milli`) times its
workload's utilization, which the workload may set with the environment variable
`GPUPOOL_SIM_UTILIZATION` (percent, 0 to 100) and which otherwise defaults by type as in
`gpupool simulate` (train 100%, inference 50%, interactive 20%). A device's utilization is the
sum over its tasks, at most 100%; its memory used is the sum of their memory requests. Every
device of every node is sampled (an idle one at 0%), at most every `sample_interval_s`.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.clock import Clock
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
from gpupool.units import parse_memory_mib

__all__ = [
    "DEFAULT_UTILIZATION_PERCENT",
    "SIM_UTILIZATION_ENV",
    "SimulatedExecutor",
    "parse_simulated_nodes",
]

SIM_UTILIZATION_ENV = "GPUPOOL_SIM_UTILIZATION"
"""A workload's simulated utilization in percent of what it holds (0 to 100)."""
DEFAULT_UTILIZATION_PERCENT = {"train": 100, "interactive": 20, "inference": 50}
"""By workload type when the variable is not given; the same as `gpupool simulate`'s defaults
(`gpupool.sim.workload.DEFAULT_UTIL_PERMILLE`, which a test keeps equal)."""

_GROUP = re.compile(r"^(\d+)x(\d+)(?::([0-9.]+[A-Za-z]*))?(?::([\w.-]+))?$")


def parse_simulated_nodes(text: str, prefix: str = "sim") -> tuple[NodeInventory, ...]:
    """`"500x8"` is 500 nodes of 8 devices of 80 GiB; `"2x4:40G:A100,1x8"` mixes groups.

    Each group is `NODESxGPUS[:MEMORY][:MODEL]`; nodes are named `sim-1`, `sim-2`, ...
    """
    nodes: list[NodeInventory] = []
    for group in (g.strip() for g in text.split(",")):
        match = _GROUP.match(group)
        if not match:
            raise ValueError(
                f"simulated nodes {group!r} not understood: write NODESxGPUS[:MEMORY][:MODEL], "
                "like 4x8 or 2x4:40G:A100, several separated by commas"
            )
        count, gpus = int(match[1]), int(match[2])
        if count < 1 or count > 100_000 or gpus > 64:
            raise ValueError(f"simulated nodes {group!r}: 1 to 100000 nodes of 0 to 64 GPUs")
        memory_mib = parse_memory_mib(match[3]) if match[3] else 81920
        model = match[4] or "simulated"
        for _ in range(count):
            name = f"{prefix}-{len(nodes) + 1}"
            devices = tuple(
                DeviceInfo(index=i, memory_mib=memory_mib, model=model, uuid=f"{name}-gpu{i}")
                for i in range(gpus)
            )
            nodes.append(NodeInventory(name=name, devices=devices))
    return tuple(nodes)


@dataclass(slots=True)
class _Run:
    launch: Launch
    started_at_s: float
    ended: Exit | None = None
    acknowledged: bool = False
    log: list[str] = field(default_factory=list)
    utilization_permille: int = 1000


def utilization_permille(launch: Launch) -> tuple[int, str | None]:
    """The launch's simulated utilization (per mille) and, for a value that is not a percent,
    the log line that says so (the default is used then)."""
    default = DEFAULT_UTILIZATION_PERCENT.get(launch.workload_type, 100) * 10
    text = dict(launch.env).get(SIM_UTILIZATION_ENV)
    if text is None:
        return default, None
    try:
        percent = float(text)
    except ValueError:
        percent = math.nan
    if not (math.isfinite(percent) and 0 <= percent <= 100):
        return default, (
            f"{SIM_UTILIZATION_ENV}={text!r} is not a percent from 0 to 100 (like 40); "
            f"using the default for {launch.workload_type} work, {default // 10}%"
        )
    return round(percent * 10), None


class SimulatedExecutor:
    """An executor of declared nodes. Thread-safe; time comes from `clock`."""

    def __init__(
        self,
        nodes: Sequence[NodeInventory],
        clock: Clock,
        journal_path: Path | None = None,
        name: str = "simulated",
        sample_interval_s: float = 5.0,
    ) -> None:
        self.name = name
        self._nodes = tuple(nodes)
        self._clock = clock
        self._sample_interval_s = sample_interval_s
        self._last_sample_s = -math.inf
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}
        self._journal_path = journal_path
        self._journal: Any = None
        if journal_path is not None:
            self._replay(journal_path)
            self._journal = journal_path.open("a", encoding="utf-8")

    def inventory(self) -> Sequence[NodeInventory]:
        return self._nodes

    def start(self, launches: Sequence[Launch]) -> None:
        with self._lock:
            now = self._clock.now_s()
            new = [launch for launch in launches if launch.launch_id not in self._runs]
            self._append([{"op": "start", "at": now, "launch": x.to_json()} for x in new])
            for launch in new:
                self._started(launch, now)

    def stop(self, stops: Sequence[Stop]) -> None:
        with self._lock:
            now = self._clock.now_s()
            todo = [s for s in stops if (run := self._runs.get(s.launch_id)) and not run.ended]
            self._append(
                [{"op": "stop", "at": now, "id": s.launch_id, "reason": s.reason} for s in todo]
            )
            for stop in todo:
                self._stopped(stop.launch_id, now, stop.reason)

    def alive(self) -> set[str]:
        with self._lock:
            self._finish_due()
            return running_launches(self._runs)

    def known(self, launch_ids: Sequence[str]) -> set[str]:
        with self._lock:
            return {launch_id for launch_id in launch_ids if launch_id in self._runs}

    def exits(self) -> Sequence[Exit]:
        with self._lock:
            self._finish_due()
            return unacknowledged_exits(self._runs)

    def acknowledge(self, launch_ids: Sequence[str]) -> None:
        with self._lock:
            todo = [i for i in launch_ids if (run := self._runs.get(i)) and not run.acknowledged]
            self._append([{"op": "ack", "id": launch_id} for launch_id in todo])
            for launch_id in todo:
                self._runs[launch_id].acknowledged = True

    def read_log(self, launch_id: str, offset: int, limit: int) -> tuple[bytes, bool]:
        with self._lock:
            self._finish_due()
            run = self._runs.get(launch_id)
            if run is None:
                return b"", False
            data = "".join(run.log).encode()
            return data[offset : offset + limit], run.ended is not None

    def log_size(self, launch_id: str) -> tuple[int, bool]:
        with self._lock:
            self._finish_due()
            run = self._runs.get(launch_id)
            if run is None:
                return 0, False
            return len("".join(run.log).encode()), run.ended is not None

    def usage_samples(self) -> Sequence[UsageSample]:
        """Every device, from the model in the module's docstring; none between two samplings
        less than `sample_interval_s` apart."""
        with self._lock:
            now = self._clock.now_s()
            if now - self._last_sample_s < self._sample_interval_s:
                return ()
            self._last_sample_s = now
            self._finish_due()
            busy: dict[tuple[str, int], int] = {}
            memory: dict[tuple[str, int], int] = {}
            for run in self._runs.values():
                if run.ended is not None:
                    continue
                launch = run.launch
                for device in launch.devices:
                    key = (launch.node, device)
                    busy[key] = busy.get(key, 0) + launch.gpu_milli * run.utilization_permille
                    memory[key] = memory.get(key, 0) + launch.gpu_memory_mib
            return [
                UsageSample(
                    now,
                    node.name,
                    d.index,
                    min(100, busy.get((node.name, d.index), 0) // 10_000),
                    min(d.memory_mib, memory.get((node.name, d.index), 0)),
                )
                for node in self._nodes
                for d in node.devices
            ]

    def stop_all(self, timeout_s: float) -> None:
        self.stop(
            [
                Stop(launch_id, 0, "the server is shutting down")
                for launch_id, run in self._runs.items()
                if run.ended is None
            ]
        )

    def close(self) -> None:
        with self._lock:
            if self._journal is not None:
                self._journal.close()
                self._journal = None

    def _started(self, launch: Launch, now: float) -> None:
        permille, problem = utilization_permille(launch)
        run = _Run(launch, now, utilization_permille=permille)
        where = ",".join(str(d) for d in launch.devices)
        run.log.append(
            f"[{now:.3f}] simulated task {launch.workload}/{launch.task_index} started on "
            f"{launch.node} devices {where}\n"
        )
        if problem is not None:
            run.log.append(f"[{now:.3f}] {problem}\n")
        self._runs[launch.launch_id] = run

    def _stopped(self, launch_id: str, now: float, reason: str) -> None:
        run = self._runs[launch_id]
        run.ended = Exit(launch_id, 143, now, f"stopped: {reason}", stopped=True)
        run.log.append(f"[{now:.3f}] stopped (SIGTERM): {reason}\n")

    def _finish_due(self) -> None:
        now = self._clock.now_s()
        due = [
            run
            for run in self._runs.values()
            if run.ended is None
            and run.launch.duration_s is not None
            and run.started_at_s + run.launch.duration_s <= now
        ]
        self._append([{"op": "exit", "at": now, "id": run.launch.launch_id} for run in due])
        for run in due:
            self._exited(run, run.started_at_s + (run.launch.duration_s or 0.0))

    @staticmethod
    def _exited(run: _Run, at_s: float) -> None:
        run.ended = Exit(run.launch.launch_id, 0, at_s, "completed", stopped=False)
        run.log.append(f"[{at_s:.3f}] finished: exit code 0\n")

    def _append(self, records: list[dict[str, Any]]) -> None:
        if self._journal is None or not records:
            return
        self._journal.write("".join(json.dumps(r) + "\n" for r in records))
        self._journal.flush()
        os.fsync(self._journal.fileno())

    def _replay(self, path: Path) -> None:
        if not path.exists():
            return
        data = path.read_bytes()
        whole = data[: data.rfind(b"\n") + 1]
        if len(whole) < len(data):
            # The last write was cut short by a crash: drop it, or the next record appended
            # would be glued to it and lost at the next replay (a launch started twice).
            with path.open("r+b") as journal:
                journal.truncate(len(whole))
                os.fsync(journal.fileno())
        for line in whole.decode("utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash: nothing after it was acknowledged
            op = record["op"]
            if op == "start":
                self._started(Launch.from_json(record["launch"]), record["at"])
            elif op == "stop":
                self._stopped(record["id"], record["at"], record["reason"])
            elif op == "exit":
                run = self._runs[record["id"]]
                self._exited(run, run.started_at_s + (run.launch.duration_s or 0.0))
            elif op == "ack":
                self._runs[record["id"]].acknowledged = True
