"""Finding a local executor's tasks again without its journal (deleted, or corrupt and moved
aside), so that a restarted server adopts them instead of starting second copies.

What survives the journal: each task's shim (`gpupool.executors.shim STATE_DIR LAUNCH_ID -- ...`
on its command line, leader of its process group, the task's `GPUPOOL_*` variables in
`/proc/PID/environ`), and the files the shim writes, `LAUNCH_ID.pid` and `LAUNCH_ID.exit`, kept
until the scheduler has acknowledged the task's end. From them:

- a group whose processes carry `GPUPOOL_LAUNCH_ID=LAUNCH_ID` runs: adopted, with the launch
  rebuilt from its environment (devices, share, grace period, gang port);
- an exit file says how a task that is gone ended;
- a pid file with neither says it was killed (SIGKILL leaves no exit record).

A pid reused by another process does not pass: its environment lacks the launch id.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from gpupool.core.model import MILLI_PER_GPU
from gpupool.executors.base import Launch
from gpupool.executors.isolation import unwrap


def proc_stat(pid: int) -> tuple[int, int] | None:
    """(process group, start time in clock ticks) of a live process, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[2]), int(fields[19])


def group_members(groups: set[int]) -> dict[int, list[int]]:
    """Live pids per process group, for the groups asked about."""
    members: dict[int, list[int]] = defaultdict(list)
    if not groups:
        return members
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = proc_stat(int(entry.name))
        if stat is not None and stat[0] in groups:
            members[stat[0]].append(int(entry.name))
    return members


SHIM_MODULE = "gpupool.executors.shim"
LAUNCH_ID_VARIABLE = "GPUPOOL_LAUNCH_ID"


@dataclass(frozen=True, slots=True)
class Found:
    """A task of this executor known only from what it left on the machine."""

    launch: Launch
    pid: int | None
    """Its group's leader while it runs."""
    master_port: int | None = None
    exit_code: int | None = None
    """How it ended (None: it runs, or it left no exit record)."""
    stop_requested: bool = False
    running: bool = False

    def ending(self) -> tuple[int, str, bool] | None:
        """(exit code, reason, stopped) of a task found ended; None for one that runs."""
        if self.running:
            return None
        code = self.exit_code
        if code is None:
            return KILLED, "ended while the server was down (killed)", True
        if self.stop_requested:
            return code, f"stopped (exit code {code})", True
        return code, "completed" if code == 0 else f"exited with code {code}", False


KILLED = 137


def set_aside(journal: Path, now_s: float) -> Path:
    """Move a corrupt journal to `journal.corrupt-TIME` (UTC) beside it; returns where."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_s))
    aside = journal.with_name(f"journal.corrupt-{stamp}")
    while aside.exists():
        aside = aside.with_name(aside.name + "-1")
    journal.rename(aside)
    return aside


def summary(found: list[Found], corrupt: str | None, state_dir: Path) -> str | None:
    """What a start recovered without a journal, in words; None when there is nothing to say."""
    if not found:
        return None if corrupt is None else f"{corrupt}; no task to recover"
    running = sum(1 for item in found if item.running)
    what = corrupt or f"no journal entry for tasks in {state_dir} (journal lost?)"
    return (
        f"{what}; recovered from pid files and processes: {running} running task(s) adopted "
        f"(not started again), {len(found) - running} ended task(s) to report"
    )


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _environ(pid: int) -> dict[str, str]:
    data = _read(f"/proc/{pid}/environ") or b""
    values: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            values[key.decode(errors="replace")] = value.decode(errors="replace")
    return values


def _cmdline(pid: int) -> list[str]:
    data = _read(f"/proc/{pid}/cmdline") or b""
    return [part.decode(errors="replace") for part in data.split(b"\0")[:-1]]


def _group_and_state(pid: int) -> tuple[int, str] | None:
    data = _read(f"/proc/{pid}/stat")
    if data is None:
        return None
    text = data.decode(errors="replace")
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[2]), fields[0]


def live_shims(state_dir: Path) -> dict[str, int]:
    """Launch id -> pid of each live shim that runs for `state_dir` and leads its group."""
    found: dict[str, int] = {}
    wanted = str(state_dir)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        args = _cmdline(pid)
        if SHIM_MODULE not in args:
            continue
        at = args.index(SHIM_MODULE)
        if len(args) < at + 4 or args[at + 1] != wanted or args[at + 3] != "--":
            continue
        group = _group_and_state(pid)
        if group is not None and group[0] == pid and group[1] != "Z":
            found[args[at + 2]] = pid
    return found


def _carries(pid: int, launch_id: str) -> dict[str, str] | None:
    """The environment of the live process `pid` if it is launch `launch_id`'s, else None."""
    group = _group_and_state(pid)
    if group is None or group[1] == "Z":
        return None
    env = _environ(pid)
    return env if env.get(LAUNCH_ID_VARIABLE) == launch_id else None


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def launch_from_environment(
    launch_id: str, env: dict[str, str], node: str, command: list[str]
) -> Launch:
    """The launch, as far as a task's environment tells it (enough to watch, stop and report)."""
    devices = tuple(
        int(d) for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip().isdigit()
    )
    try:
        milli = round(float(env.get("GPUPOOL_GPU_FRACTION", "1")) * MILLI_PER_GPU)
    except ValueError:
        milli = MILLI_PER_GPU
    request = _int(env.get("GPUPOOL_GPU_MEMORY_REQUEST_MIB"), 0)
    limit = _int(env.get("GPUPOOL_GPU_MEMORY_LIMIT_MIB"), request)
    return Launch(
        launch_id=launch_id,
        project=env.get("GPUPOOL_PROJECT", ""),
        workload=env.get("GPUPOOL_WORKLOAD", ""),
        task_index=_int(env.get("GPUPOOL_TASK_INDEX"), 0),
        node=node,
        devices=devices,
        gpu_milli=milli,
        gpu_memory_mib=request,
        command=tuple(command),
        grace_period_s=_int(env.get("GPUPOOL_GRACE_PERIOD_S"), 30),
        burst_memory_mib=limit if limit != request else None,
        world_size=_int(env.get("WORLD_SIZE"), 1),
    )


def _exit_record(state_dir: Path, launch_id: str) -> tuple[int, bool] | None:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = json.loads((state_dir / f"{launch_id}.exit").read_text())
        return int(record["exit_code"]), bool(record.get("stop_requested", False))
    return None


def find(state_dir: Path, node: str, known: set[str]) -> list[Found]:
    """Tasks of `state_dir` that `known` (the launch ids the journal gave) lacks."""
    pid_files: dict[str, int | None] = {}
    for path in state_dir.glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid_files[path.stem] = int(path.read_text())
            continue
        pid_files[path.stem] = None
    exits = {path.stem for path in state_dir.glob("*.exit")}
    shims = live_shims(state_dir)
    found: list[Found] = []
    for launch_id in sorted((set(pid_files) | exits | set(shims)) - known):
        pid = shims.get(launch_id, pid_files.get(launch_id))
        env = _carries(pid, launch_id) if pid is not None else None
        if env is not None and pid is not None:
            args = _cmdline(pid)
            command = unwrap(args[args.index("--") + 1 :]) if "--" in args else []
            found.append(
                Found(
                    launch_from_environment(launch_id, env, node, command),
                    pid,
                    master_port=_int(env.get("MASTER_PORT"), 0) or None,
                    running=True,
                )
            )
            continue
        ended = _exit_record(state_dir, launch_id)
        placeholder = Launch(launch_id, "", "", 0, node, (), MILLI_PER_GPU, 0)
        if ended is None:
            found.append(Found(placeholder, None))
        else:
            found.append(Found(placeholder, None, exit_code=ended[0], stop_requested=ended[1]))
    return found


def live_task_groups(data_dir: Path) -> list[int]:
    """Process groups of local tasks with a process still alive (`find_task_groups`)."""
    return find_task_groups(data_dir).groups


@dataclass(frozen=True, slots=True)
class TaskGroups:
    groups: list[int]
    """Live process groups of this data directory's tasks."""
    journal_problem: str | None = None
    """Why the journal could not be read in full (then the groups also include those found by
    their log files); None when it could."""


def find_task_groups(data_dir: Path) -> TaskGroups:
    """Process groups of local tasks with a process still alive: from the executor's journal,
    and the live shims of this data directory, which a lost journal does not hide. Never fails
    on the journal's content: unreadable lines are skipped, and when any is, every process
    whose output goes to a task log of `data_dir/logs` counts too (each task's stdout is its
    log). A group whose leader is alive with another start time is someone else's (a reused
    pid)."""
    journal = data_dir / "local" / "journal.jsonl"
    leaders: dict[int, int | None] = {}
    problem = None
    try:
        data = journal.read_bytes()
    except FileNotFoundError:
        data = b""
    except OSError as error:
        data, problem = b"", f"cannot read it: {error.strerror}"
    data = data[: data.rfind(b"\n") + 1]  # a last line cut short by a crash is not corrupt
    bad = 0
    for line in data.splitlines():
        try:
            record = json.loads(line)
            if record.get("op") == "pid":
                ticks = record.get("ticks")
                leaders[int(record["pid"])] = ticks if isinstance(ticks, int) else None
        except (ValueError, TypeError, KeyError, AttributeError):
            bad += 1
    if bad:
        problem = f"{bad} of its {len(data.splitlines())} lines are not valid records"
    if problem is not None:
        for group in _groups_writing_to(data_dir / "logs"):
            leaders.setdefault(group, None)
    members = group_members(set(leaders))
    alive = set(live_shims(data_dir / "local").values())
    for leader, ticks in leaders.items():
        if not members.get(leader):
            continue
        stat = proc_stat(leader)
        if stat is not None and ticks is not None and stat[1] != ticks:
            continue
        alive.add(leader)
    return TaskGroups(sorted(alive), problem)


def _groups_writing_to(logs_dir: Path) -> set[int]:
    """Process groups of the processes whose stdout is a file in `logs_dir`."""
    prefix = str(logs_dir.resolve()) + os.sep
    groups = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            target = os.readlink(f"/proc/{entry.name}/fd/1")
        except OSError:
            continue
        if target.startswith(prefix):
            stat = proc_stat(int(entry.name))
            if stat is not None:
                groups.add(stat[0])
    return groups
