"""Helpers for the authors of workloads that gpupool runs.

```python
from gpupool import job

state = job.load_checkpoint() or {"step": 0}
while state["step"] < 1000 and not job.stop_requested():
    train_one_step(state)
    state["step"] += 1
    if state["step"] % 50 == 0:
        job.save_checkpoint(state)
job.save_checkpoint(state)
```

A preempted task gets SIGTERM, then its grace period (`GPUPOOL_GRACE_PERIOD_S`), then SIGKILL.
`stop_requested()` turns true at SIGTERM, so a loop can checkpoint and exit in time; when the
workload runs again it gets the same checkpoint directory. Only the standard library is used:
this module is importable wherever gpupool is installed, with no server.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "checkpoint_dir",
    "grace_period_s",
    "load_checkpoint",
    "save_checkpoint",
    "stop_requested",
    "task_index",
]

_stop = False
_installed = False


def _on_sigterm(signum: int, frame: object) -> None:
    global _stop
    _stop = True


def stop_requested() -> bool:
    """True once gpupool asked this task to stop (SIGTERM). The first call installs the
    handler, so call it early (or at start-up) if the task may be stopped before its loop."""
    global _installed
    if not _installed:
        signal.signal(signal.SIGTERM, _on_sigterm)
        _installed = True
    return _stop


def checkpoint_dir() -> Path:
    """The workload's checkpoint directory: the same for every run of the workload.
    Outside gpupool: `./checkpoints`."""
    path = Path(os.environ.get("GPUPOOL_CHECKPOINT_DIR", "checkpoints"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def task_index() -> int:
    return int(os.environ.get("GPUPOOL_TASK_INDEX", "0"))


def grace_period_s() -> int:
    return int(os.environ.get("GPUPOOL_GRACE_PERIOD_S", "30"))


def _checkpoint_file(name: str) -> Path:
    return checkpoint_dir() / f"{name}-task{task_index()}.json"


def save_checkpoint(state: dict[str, Any], name: str = "state") -> Path:
    """Write `state` as JSON atomically (a kill mid-write leaves the previous checkpoint)."""
    path = _checkpoint_file(name)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(state, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    return path


def load_checkpoint(name: str = "state") -> dict[str, Any] | None:
    """The last saved state, or None on a first run."""
    path = _checkpoint_file(name)
    if not path.exists():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded
