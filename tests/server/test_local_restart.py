"""The scheduling loop with real local processes, restarted after the executor's journal was
lost: the running task is found again (not requeued, not started a second time)."""

from __future__ import annotations

import sys
from pathlib import Path

from test_scheduler_loop import Harness

from gpupool.core.model import SchedulerSettings
from gpupool.executors.gpus.declared import DeclaredBackend
from gpupool.executors.local import LocalExecutor
from gpupool.executors.local_recovery import live_shims
from gpupool.server.metrics import ServerMetrics
from gpupool.server.scheduler import SchedulingLoop

LONG = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"]


class LocalHarness(Harness):
    def new_loop(self) -> SchedulingLoop:
        self.reports = self.tmp / "reports"
        self.reports.mkdir(exist_ok=True)
        self.messages: list[str] = getattr(self, "messages", [])
        executor = LocalExecutor(
            self.tmp / "data",
            DeclaredBackend("2x80G", self.reports),
            self.clock,
            node_name="local",
            report=self.messages.append,
        )
        loop = SchedulingLoop(
            self.writer, executor, self.clock, SchedulerSettings(), ServerMetrics()
        )
        loop.take_over()
        return loop


def test_a_restart_without_the_journal_adopts_the_running_task(tmp_path: Path) -> None:
    harness = LocalHarness(tmp_path, nodes="")
    try:
        harness.project("a", 2)
        harness.submit("a", "job", gpu=1, command=LONG)
        harness.loop.run_once()
        assert harness.status("job") == "running"
        state_dir = tmp_path / "data" / "local"
        assert len(live_shims(state_dir)) == 1
        harness.loop._executor.close()

        (state_dir / "journal.jsonl").unlink()
        harness.loop = harness.new_loop()
        harness.loop.run_once()
        harness.loop.run_once()

        assert harness.status("job") == "running"
        assert [state for state, _ in harness.tasks("job")] == ["running"]
        assert len(live_shims(state_dir)) == 1
        assert any("1 running task(s) adopted" in m for m in harness.messages)
    finally:
        executor = harness.loop._executor
        assert isinstance(executor, LocalExecutor)
        executor.stop_all(timeout_s=2)
        executor.close()
