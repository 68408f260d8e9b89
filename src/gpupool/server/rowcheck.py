"""Checks of stored workload rows that the scheduling loop makes before it uses one.

The API validates what it stores, but the loop reads whatever is in the database: a row written
by an older version, by hand, or by a bug. A row that fails a check is not scheduled: the loop
fails its workload with the problem as the reason (see `gpupool.server.quarantine`) and goes on
with the others. Each check returns None for a good value, else the problem in words.
"""

from __future__ import annotations

import json
from typing import Any

from gpupool.core.model import GpuRequestKind, WorkloadType

_KINDS = {kind.value for kind in GpuRequestKind}
_TYPES = {kind.value for kind in WorkloadType}
_MAX_INT = 2**31 - 1


def parse_json(text: Any, what: str) -> Any:
    """A JSON column read as text (`CAST(column AS TEXT)`), parsed; ValueError that says which
    column when it is not JSON. None stays None (a NULL column)."""
    if text is None or not isinstance(text, str | bytes):
        return text
    # Most rows hold an empty object or list: a fresh one, without the decoder's two regular
    # expression matches (a third of a 100,000-row snapshot's parsing).
    if text == "{}":
        return {}
    if text == "[]":
        return []
    try:
        return json.loads(text)
    except ValueError as error:
        raise ValueError(f"{what} is not valid JSON ({error})") from None


def _int_in(value: object, low: int, high: int = _MAX_INT) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def snapshot_problem(
    *,
    type: object,
    gpu_kind: object,
    gpu_amount: object,
    gpu_limit_milli: object,
    tasks: object,
    min_available: object,
    cpu_milli: object,
    memory_mib: object,
    node_selector: object,
    tolerations: object,
) -> str | None:
    """What is wrong with the columns the core reads, or None."""
    if type not in _TYPES:
        return f"unknown workload type {type!r} (one of {', '.join(sorted(_TYPES))})"
    if gpu_kind not in _KINDS:
        return f"unknown gpu_kind {gpu_kind!r} (one of {', '.join(sorted(_KINDS))})"
    if not _int_in(gpu_amount, 0):
        return f"gpu_amount {gpu_amount!r} is not a whole number >= 0"
    if gpu_kind == GpuRequestKind.FRACTION.value and not _int_in(gpu_amount, 1, 1000):
        return f"a fraction of {gpu_amount!r} milli-GPU is not between 1 and 1000"
    if gpu_limit_milli is not None and not _int_in(gpu_limit_milli, 0):
        return f"gpu_limit_milli {gpu_limit_milli!r} is not a whole number >= 0"
    if not _int_in(tasks, 1, 10_000):
        return f"tasks {tasks!r} is not between 1 and 10000"
    if min_available is not None and not _int_in(min_available, 1, 10_000):
        return f"min_available {min_available!r} is not between 1 and 10000"
    for name, value in (("cpu_milli", cpu_milli), ("memory_mib", memory_mib)):
        if not _int_in(value, 0):
            return f"{name} {value!r} is not a whole number >= 0"
    if not isinstance(node_selector, dict) or not all(
        isinstance(key, str)
        and isinstance(values, list)
        and all(isinstance(v, str) for v in values)
        for key, values in node_selector.items()
    ):
        return "node_selector is not an object of label -> list of values"
    if tolerations is not None and not (
        isinstance(tolerations, list) and all(isinstance(t, dict) for t in tolerations)
    ):
        return "tolerations is not a list of objects"
    return None


def launch_problem(command: object, env: object, working_dir: object) -> str | None:
    """What is wrong with the columns an executor gets to start a task, or None. A NUL byte
    cannot be passed to a process (nor stored by PostgreSQL in text)."""
    if not isinstance(command, list) or not all(isinstance(part, str) for part in command):
        return "command is not a list of strings"
    if any("\0" in part for part in command):
        return "command contains a NUL byte, which no process can be given"
    if not isinstance(env, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in env.items()
    ):
        return "env is not an object of string -> string"
    for key, value in env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            return f"env variable {key!r} has an empty name, '=' or a NUL byte"
    if working_dir is not None and (not isinstance(working_dir, str) or "\0" in working_dir):
        return "working_dir is not a string without NUL bytes"
    return None
