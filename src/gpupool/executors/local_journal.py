"""The local executor's record of each launch (`Run`) and its journal, replayed after a restart."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.executors.base import Exit, Launch

__all__ = ["CorruptJournalError", "Run", "replay"]


@dataclass(slots=True)
class Run:
    launch: Launch
    started_at_s: float
    pid: int | None = None
    start_ticks: int | None = None
    process: subprocess.Popen[bytes] | None = None
    stop_reason: str | None = None
    kill_at_s: float | None = None
    evict_reason: str | None = None
    """Set by the watchdog: why it stopped the task (memory)."""
    evict_requeues: bool = False
    ended: Exit | None = None
    acknowledged: bool = False
    log_path: Path = field(default_factory=Path)
    master_port: int | None = None
    """A gang's rendezvous port: chosen free when its first live task starts, shared by all."""


class CorruptJournalError(ValueError):
    """A journal line that is not a record this executor wrote (the message says which)."""


def replay(journal_path: Path, logs_dir: Path) -> dict[str, Run]:
    """The runs the journal at `journal_path` records, by launch id (none if it does not exist);
    a last line cut short (a crash while writing it) is truncated away. `CorruptJournalError`
    when a line is not a record this executor wrote."""
    runs: dict[str, Run] = {}
    if not journal_path.exists():
        return runs
    data = journal_path.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]
    if len(whole) < len(data):
        with journal_path.open("r+b") as journal:
            journal.truncate(len(whole))
    try:
        lines = whole.decode("utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise CorruptJournalError(f"not UTF-8: {error}") from None
    for number, line in enumerate(lines, start=1):
        try:
            _replay_record(runs, logs_dir, json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise CorruptJournalError(f"line {number}: {type(error).__name__}: {error}") from None
    return runs


def _replay_record(runs: dict[str, Run], logs_dir: Path, record: dict[str, Any]) -> None:
    op = record["op"]
    if op == "start":
        launch = Launch.from_json(record["launch"])
        runs[launch.launch_id] = Run(
            launch,
            record["at"],
            log_path=logs_dir / f"{launch.launch_id}.log",
            master_port=record.get("master_port"),
        )
        return
    run = runs[record["id"]]
    if op == "pid":
        run.pid, run.start_ticks = record["pid"], record["ticks"]
    elif op == "stop":
        run.stop_reason = "stopped before the server restarted"
        run.kill_at_s = record["at"] + record["grace"]
    elif op == "end":
        run.ended = Exit(
            run.launch.launch_id,
            record["code"],
            record["at"],
            record["reason"],
            record["stopped"],
        )
    elif op == "ack":
        run.acknowledged = True
