"""The local executor with real processes and declared GPUs, on fake time for grace periods."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpupool.clock import FakeClock
from gpupool.executors.base import Exit, Launch, Stop
from gpupool.executors.gpus.declared import DeclaredBackend
from gpupool.executors.local import LocalExecutor, _group_members

PY = sys.executable


def _launch(launch_id: str, code: str, **fields: object) -> Launch:
    values: dict[str, object] = {
        "launch_id": launch_id,
        "project": "team-a",
        "workload": f"w-{launch_id}",
        "task_index": 0,
        "node": "local",
        "devices": (0,),
        "gpu_milli": 1000,
        "gpu_memory_mib": 81920,
        "command": (PY, "-c", code),
        "grace_period_s": 5,
    }
    values.update(fields)
    return Launch(**values)  # type: ignore[arg-type]


def _until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


class Setup:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.clock = FakeClock()
        self.reports = tmp / "gpu-reports"
        self.reports.mkdir()
        self.executor = self.new()

    def new(self) -> LocalExecutor:
        gpus = DeclaredBackend("2x80G", self.reports)
        return LocalExecutor(
            self.tmp / "data", gpus, self.clock, node_name="local", watchdog_interval_s=0
        )

    def ended(self, launch_id: str) -> Exit:
        found: list[Exit] = []

        def check() -> bool:
            found[:] = [e for e in self.executor.exits() if e.launch_id == launch_id]
            return bool(found)

        _until(check)
        return found[0]

    def log(self, launch_id: str) -> str:
        return self.executor.read_log(launch_id, 0, 1 << 20)[0].decode()


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    s = Setup(tmp_path)
    yield s
    s.executor.stop_all(timeout_s=2)
    s.executor.close()


def test_a_task_runs_with_its_devices_and_gpupool_variables(setup: Setup) -> None:
    code = (
        "import os, json; print(json.dumps({k: v for k, v in os.environ.items() "
        "if k.startswith(('GPUPOOL_', 'CUDA_', 'XLA_', 'TF_', 'CUPY_'))}))"
    )
    setup.executor.start([_launch("a1", code, devices=(1,), gpu_milli=500, gpu_memory_mib=40960)])
    end = setup.ended("a1")
    assert (end.exit_code, end.stopped, end.reason) == (0, False, "completed")
    env = json.loads(setup.log("a1").splitlines()[0])
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["GPUPOOL_GPU_FRACTION"] == "0.5"
    assert env["GPUPOOL_GPU_MEMORY_LIMIT_MIB"] == "40960"
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.500"
    assert env["CUPY_GPU_MEMORY_LIMIT"] == "50.0%"
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert env["GPUPOOL_CHECKPOINT_DIR"].endswith("checkpoints/team-a/w-a1")


def test_a_failing_command_reports_its_exit_code(setup: Setup) -> None:
    setup.executor.start([_launch("f1", "import sys; print('boom'); sys.exit(3)")])
    end = setup.ended("f1")
    assert (end.exit_code, end.stopped) == (3, False)
    assert "boom" in setup.log("f1")


def test_sigterm_then_the_task_stops_in_its_grace(setup: Setup) -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('checkpointing', flush=True), "
        "sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    setup.executor.start([_launch("t1", code)])
    _until(lambda: "ready" in setup.log("t1"))
    setup.executor.stop([Stop("t1", 30, "reclaimed for team-b/x")])
    end = setup.ended("t1")
    assert end.stopped and end.exit_code == 0
    assert "checkpointing" in setup.log("t1")
    assert "reclaimed for team-b/x" in end.reason


def test_a_task_that_ignores_sigterm_is_killed_after_its_grace(setup: Setup) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    setup.executor.start([_launch("i1", code, grace_period_s=10)])
    _until(lambda: "ready" in setup.log("i1"))
    setup.executor.stop([Stop("i1", 10, "preempted")])
    for _ in range(20):  # real time passes, fake time does not: it keeps running
        assert "i1" in setup.executor.alive()
        time.sleep(0.01)
    setup.clock.advance(10)
    end = setup.ended("i1")
    assert end.stopped and end.exit_code == 137
    assert "killed after its grace period" in end.reason


def test_devices_stay_busy_until_every_process_of_the_group_is_gone(setup: Setup) -> None:
    """The command exits at once but leaves a child behind in its process group."""
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('parent done', flush=True)\n"
    )
    setup.executor.start([_launch("g1", code)])
    _until(lambda: "parent done" in setup.log("g1"))
    time.sleep(0.3)
    assert "g1" in setup.executor.alive()
    setup.executor.stop([Stop("g1", 0, "deleted")])
    end = setup.ended("g1")
    assert end.stopped


def test_a_restarted_executor_adopts_running_tasks_and_starts_nothing_twice(
    setup: Setup,
) -> None:
    code = "import time; print('up', flush=True); time.sleep(60)"
    setup.executor.start([_launch("r1", code)])
    _until(lambda: "up" in setup.log("r1"))
    pid = int((setup.executor.state_dir / "r1.pid").read_text())
    setup.executor.close()

    setup.executor = setup.new()
    assert setup.executor.alive() == {"r1"}
    setup.executor.start([_launch("r1", code)])  # repeated dispatch after the restart
    assert setup.log("r1").count("up") == 1
    setup.executor.stop([Stop("r1", 0, "deleted")])
    end = setup.ended("r1")
    assert end.stopped
    assert not os.path.exists(f"/proc/{pid}") or _group_members({pid}) == {}


def test_the_watchdog_evicts_a_task_above_its_gpu_memory(setup: Setup) -> None:
    code = (
        "import os, time\n"
        "from gpupool.executors.gpus import report_fake_gpu_usage\n"
        "report_fake_gpu_usage(os.environ['GPUPOOL_FAKE_GPU_REPORT_DIR'], device=0, "
        "used_mib=50000, utilization_percent=90)\n"
        "print('allocated', flush=True)\n"
        "time.sleep(60)\n"
    )
    setup.executor.start([_launch("m1", code, gpu_milli=500, gpu_memory_mib=40960)])
    _until(lambda: "allocated" in setup.log("m1"))
    end = setup.ended("m1")
    assert not end.stopped
    assert "used 50000 MiB of GPU memory on device 0, above its limit of 40960 MiB" in end.reason


def test_a_bursting_dynamic_fraction_is_preempted_when_the_memory_is_claimed(
    setup: Setup,
) -> None:
    burst = (
        "import os, time\n"
        "from gpupool.executors.gpus import report_fake_gpu_usage\n"
        "report_fake_gpu_usage(os.environ['GPUPOOL_FAKE_GPU_REPORT_DIR'], device=0, "
        "used_mib=60000, utilization_percent=90)\n"
        "print('bursting', flush=True)\n"
        "time.sleep(60)\n"
    )
    setup.executor.start(
        [_launch("b1", burst, gpu_milli=250, gpu_memory_mib=20480, burst_memory_mib=65536)]
    )
    _until(lambda: "bursting" in setup.log("b1"))
    time.sleep(0.2)
    assert "b1" in setup.executor.alive()  # alone on the device: bursting is fine
    idle = "import time; print('up', flush=True); time.sleep(60)"
    setup.executor.start([_launch("o1", idle, gpu_milli=500, gpu_memory_mib=40960)])
    end = setup.ended("b1")
    assert end.stopped, end
    assert "bursting to 60000 MiB" in end.reason and "will run again" in end.reason
    assert "o1" in setup.executor.alive()


def test_the_torch_hook_caps_a_fractional_task_on_each_visible_device(
    setup: Setup, tmp_path: Path
) -> None:
    """A stand-in `torch` package (CUDA "available", two devices) records the calls the
    start-up hook makes when the task imports it."""
    fake = tmp_path / "fake-torch" / "torch"
    fake.mkdir(parents=True)
    (fake.parent / "sitecustomize.py").write_text("print('own sitecustomize ran')\n")
    (fake / "__init__.py").write_text(
        "calls = []\n"
        "class cuda:\n"
        "    @staticmethod\n"
        "    def is_available(): return True\n"
        "    @staticmethod\n"
        "    def device_count(): return 2\n"
        "    @staticmethod\n"
        "    def set_per_process_memory_fraction(fraction, device):\n"
        "        calls.append((fraction, device))\n"
    )
    code = "import torch, os; print(torch.calls, os.environ.get('GPUPOOL_TORCH_FRACTION_APPLIED'))"
    env = (("PYTHONPATH", str(fake.parent)),)
    setup.executor.start([_launch("h1", code, gpu_milli=250, gpu_memory_mib=20480, env=env)])
    setup.ended("h1")
    assert setup.log("h1").splitlines()[:2] == [
        "own sitecustomize ran",
        "[(0.25, 0), (0.25, 1)] 0.25",
    ]
    setup.executor.start([_launch("h2", code, env=env)])  # a whole GPU: no cap
    setup.ended("h2")
    assert setup.log("h2").splitlines()[:2] == ["own sitecustomize ran", "[] None"]


def test_a_command_that_cannot_be_started_fails_once_with_the_reason(setup: Setup) -> None:
    """A NUL byte cannot be passed to a process: the task ends failed (not stopped, so the
    scheduler does not requeue it), and the executor goes on starting the others."""
    setup.executor.start([_launch("nul", "print('x\0y')"), _launch("ok", "print('fine')")])
    end = setup.ended("nul")
    assert (end.exit_code, end.stopped) == (127, False)
    assert "null byte" in end.reason
    assert "cannot start the task" in setup.log("nul")
    assert setup.ended("ok").exit_code == 0
