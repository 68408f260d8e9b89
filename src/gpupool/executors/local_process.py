"""How the local executor starts a task's process group under the shim, signals it, and tells
whether its shim still runs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import IO

from gpupool.executors.base import Launch
from gpupool.executors.gpus.devices import GpuBackend
from gpupool.executors.isolation import Isolation
from gpupool.executors.local_journal import Run
from gpupool.executors.local_recovery import proc_stat as _proc_stat
from gpupool.executors.taskenv import inherited_environment, task_environment

__all__ = ["kill_group", "popen_task", "shim_alive", "terminate"]


def popen_task(
    launch: Launch,
    log: IO[bytes],
    *,
    python: str,
    state_dir: Path,
    checkpoint_dir: Path,
    isolation: Isolation,
    gpus: GpuBackend,
    report_dir: Path | None,
    master_port: int | None,
) -> subprocess.Popen[bytes]:
    """Start `launch` under the shim (`python -I -m gpupool.executors.shim`) in a session of its
    own, its output into `log`, as `isolation` says; `OSError`, `ValueError` or `TypeError` when
    it cannot start."""
    command = list(launch.command) or ["sh", "-c", "echo 'gpupool: no command given' >&2"]
    cwd = isolation.working_dir(launch, checkpoint_dir)
    writable = [cwd, checkpoint_dir]
    identity = isolation.prepare(launch, writable)
    if report_dir is not None and isolation.mode != "none":
        report_dir.mkdir(parents=True, exist_ok=True)
        report_dir.chmod(0o1777)  # each task writes its own report (fake GPUs)
        writable.append(report_dir)
    env = task_environment(
        inherited_environment(os.environ, isolated=isolation.mode != "none"),
        launch,
        checkpoint_dir=checkpoint_dir,
        mps_active=gpus.mps_active(),
        fake_gpu_report_dir=report_dir,
        master_port=master_port,
    )
    env.update(identity)
    env["GPUPOOL_ISOLATION"] = isolation.mode
    if isolation.mode != "none":
        env["HOME"] = str(cwd)
    # -I: the shim ignores the task's PYTHONPATH (and any sitecustomize on it).
    args = [python, "-I", "-m", "gpupool.executors.shim", str(state_dir)]
    args += [launch.launch_id, "--", *isolation.wrap(launch, command, writable, cwd)]
    return subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )


def terminate(run: Run, now: float, grace_s: int, reason: str) -> None:
    """Ask the task's group to stop (SIGTERM; SIGKILL at once with no grace), and note when to
    kill it."""
    run.stop_reason = reason
    run.kill_at_s = now + grace_s
    if run.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)


def kill_group(run: Run) -> None:
    if run.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)


def shim_alive(run: Run) -> bool:
    if run.pid is None:
        return False
    if run.process is not None:
        return run.process.poll() is None
    stat = _proc_stat(run.pid)
    return stat is not None and (run.start_ticks is None or stat[1] == run.start_ticks)
