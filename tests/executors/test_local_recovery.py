"""The local executor restarted without its journal (deleted, or corrupt): real processes are
found again by their shims, pid and exit files and `GPUPOOL_LAUNCH_ID`, and never started twice."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_local_executor import Setup, _launch, _until

from gpupool.executors.base import Stop
from gpupool.executors.gpus.declared import DeclaredBackend
from gpupool.executors.local import LocalExecutor, live_task_groups
from gpupool.executors.local_recovery import live_shims

LONG = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"


class Restartable(Setup):
    def __init__(self, tmp: Path) -> None:
        self.messages: list[str] = []
        super().__init__(tmp)

    def restart(self) -> LocalExecutor:
        """A new executor on the same data directory, its report kept in `messages`."""
        self.executor.close()
        self.executor = LocalExecutor(
            self.tmp / "data",
            DeclaredBackend("2x80G", self.reports),
            self.clock,
            node_name="local",
            watchdog_interval_s=0,
            report=self.messages.append,
        )
        return self.executor

    @property
    def state_dir(self) -> Path:
        return self.tmp / "data" / "local"


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Restartable]:
    s = Restartable(tmp_path)
    yield s
    s.executor.stop_all(timeout_s=2)
    s.executor.close()


def _shims(setup: Restartable, launch_id: str) -> int:
    return sum(1 for found in live_shims(setup.state_dir) if found == launch_id)


def test_without_its_journal_it_adopts_what_runs_and_reports_what_ended(
    setup: Restartable,
) -> None:
    running = _launch("run1", LONG, devices=(1,), gpu_milli=500, gpu_memory_mib=40960)
    setup.executor.start([running, _launch("fail1", "import sys; sys.exit(3)")])
    setup.executor.start([_launch("kill1", LONG)])
    _until(lambda: "ready" in setup.log("run1") and "ready" in setup.log("kill1"))
    _until(lambda: (setup.state_dir / "fail1.exit").exists())
    _until(lambda: _shims(setup, "fail1") == 0)  # its shim writes the exit file, then exits
    os.killpg(int((setup.state_dir / "kill1.pid").read_text()), signal.SIGKILL)
    _until(lambda: _shims(setup, "kill1") == 0)

    (setup.state_dir / "journal.jsonl").unlink()  # the journal is lost
    run1_group = int((setup.state_dir / "run1.pid").read_text())
    assert live_task_groups(setup.tmp / "data") == [run1_group]  # what `gpupool down` stops
    executor = setup.restart()

    assert executor.known(["run1", "fail1", "kill1", "other"]) == {"run1", "fail1", "kill1"}
    assert executor.alive() == {"run1"}
    ends = {e.launch_id: e for e in executor.exits()}
    assert (ends["fail1"].exit_code, ends["fail1"].stopped) == (3, False)
    assert (ends["kill1"].exit_code, ends["kill1"].stopped) == (137, True)
    assert "run1" not in ends
    [message] = setup.messages
    assert "journal lost" in message
    assert "1 running task(s) adopted (not started again), 2 ended task(s)" in message

    executor.start([running])  # the scheduler's dispatch, repeated: a no-op
    assert _shims(setup, "run1") == 1
    adopted = executor._runs["run1"].launch
    assert (adopted.project, adopted.workload, adopted.devices) == ("team-a", "w-run1", (1,))
    assert (adopted.gpu_milli, adopted.gpu_memory_mib) == (500, 40960)

    executor.acknowledge(["fail1", "kill1"])
    executor.stop([Stop("run1", 5, "suspended")])
    end = setup.ended("run1")
    assert end.stopped
    assert _shims(setup, "run1") == 0


def test_a_corrupt_journal_is_moved_aside_and_its_tasks_recovered(setup: Restartable) -> None:
    setup.executor.start([_launch("run2", LONG)])
    _until(lambda: "ready" in setup.log("run2"))
    journal = setup.state_dir / "journal.jsonl"
    with journal.open("a") as handle:
        handle.write('{"op": "pid", "id": "never-started"\n')

    executor = setup.restart()

    aside = sorted(setup.state_dir.glob("journal.corrupt-*"))
    assert len(aside) == 1
    assert '"never-started"' in aside[0].read_text()
    [message] = setup.messages
    assert f"the journal {journal} is corrupt (line 3: JSONDecodeError" in message
    assert f"moved it to {aside[0]}" in message
    assert "1 running task(s) adopted" in message
    assert executor.alive() == {"run2"}
    executor.start([_launch("run2", LONG)])
    assert _shims(setup, "run2") == 1

    # The new journal is whole: a third start replays it with nothing to recover.
    setup.messages.clear()
    executor = setup.restart()
    assert setup.messages == []
    assert executor.alive() == {"run2"}


def test_a_pid_file_naming_someone_elses_process_is_not_adopted(setup: Restartable) -> None:
    """A pid reused by a process without the launch's GPUPOOL_LAUNCH_ID (here: this test)."""
    (setup.state_dir / "gone1.pid").write_text(str(os.getpid()))
    executor = setup.restart()
    assert executor.alive() == set()
    [end] = executor.exits()
    assert (end.launch_id, end.exit_code, end.stopped) == ("gone1", 137, True)
