"""Generic workload files for the simulator: JSON Lines (primary) or CSV, read strictly.

One workload per line (JSONL: one JSON object; CSV: one row under a header). Fields:

| field | required | meaning |
|---|---|---|
| `submit_s` | yes | when it is submitted, whole seconds from the start (>= 0) |
| `name` | no | unique; default `<project>-<line>` |
| `project` | yes | a leaf project of the cluster file |
| `type` | yes | `train`, `interactive` or `inference` |
| `tasks` | no | replicas started together (a gang); default 1 |
| `gpu` | yes | per task: whole devices (`2`) or a fraction of one (`0.5`, `"0.5"`) |
| `gpu_limit` | no | dynamic fraction: usable up to this while idle (with a fractional `gpu`) |
| `duration_s` | yes | seconds of running it needs to finish (>= 1) |
| `mean_gpu_util` | no | 0..1, mean utilization of what it holds; default by type |
| `cpu_milli`, `memory_mib` | no | per task; default 0 |

GPU amounts are parsed once, here, into the core's `GpuRequest` (integer milli-GPU); utilization
into per-mille. Anything else is an error naming `file:line: field`, what is wrong and how to fix
it (a `UserFileError`, the one error type of every user file); rows are never guessed at or
fixed.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from gpupool.core.model import GpuRequest, WorkloadType
from gpupool.units import GpuAmount, parse_gpu, parse_gpu_limit
from gpupool.userfiles import UserFileError, read_text, show_input

__all__ = [
    "DEFAULT_UTIL_PERMILLE",
    "FIELDS",
    "REQUIRED_FIELDS",
    "SimWorkload",
    "load_workloads",
    "parse_workloads",
]

FIELDS = (
    "submit_s",
    "name",
    "project",
    "type",
    "tasks",
    "gpu",
    "gpu_limit",
    "duration_s",
    "mean_gpu_util",
    "cpu_milli",
    "memory_mib",
)
REQUIRED_FIELDS = ("submit_s", "project", "type", "gpu", "duration_s")

DEFAULT_UTIL_PERMILLE = {
    WorkloadType.TRAIN: 1000,
    WorkloadType.INTERACTIVE: 200,
    WorkloadType.INFERENCE: 500,
}
"""Mean GPU utilization when a row gives none: training saturates, notebooks mostly idle."""

_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class SimWorkload:
    """One workload to simulate, in the core's units. `gpu` is per task."""

    name: str
    project: str
    type: WorkloadType
    gpu: GpuRequest
    duration_s: int
    submit_s: int = 0
    tasks: int = 1
    mean_gpu_util_permille: int = 1000
    cpu_milli: int = 0
    memory_mib: int = 0


def load_workloads(
    path: str | os.PathLike[str], projects: Collection[str]
) -> tuple[SimWorkload, ...]:
    """Read a `.jsonl` or `.csv` workload file; every row's project must be in `projects`."""
    shown = os.fspath(path)
    suffix = Path(shown).suffix.lower()
    if suffix not in (".jsonl", ".csv"):
        raise UserFileError(
            shown, None, "", "unknown file type; name a workload file *.jsonl or *.csv"
        )
    text = read_text(shown, kind="a workload file", row_key="row")
    return parse_workloads(text, shown, projects, csv_format=suffix == ".csv")


def parse_workloads(
    text: str, path: str, projects: Collection[str], *, csv_format: bool = False
) -> tuple[SimWorkload, ...]:
    """Parse workload rows from `text` (named `path` in errors); see the module doc."""
    rows = _csv_rows(text, path) if csv_format else _jsonl_rows(text, path)
    known = sorted(projects)
    out: list[SimWorkload] = []
    seen: dict[str, int] = {}
    for row in rows:
        workload = row.workload(known)
        if workload.name in seen:
            raise row.error(
                "name",
                f"{workload.name!r} appears twice (first on line {seen[workload.name]}); "
                "names must be unique",
            )
        seen[workload.name] = row.line
        out.append(workload)
    if not out:
        raise UserFileError(path, None, "", "no workloads in the file; add at least one row")
    return tuple(out)


# --- rows ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Row:
    """One row's raw values. From CSV every value is text; from JSON it is a JSON value."""

    path: str
    line: int
    values: Mapping[str, object]
    text: bool

    def error(self, field: str, message: str) -> UserFileError:
        return UserFileError(self.path, self.line, field, message)

    def workload(self, projects: list[str]) -> SimWorkload:
        for field in REQUIRED_FIELDS:
            if self.values.get(field) is None:
                raise self.error(field, f"missing; every row needs {', '.join(REQUIRED_FIELDS)}")
        project = self._name("project")
        if project not in projects:
            raise self.error(
                "project",
                f"unknown project {project!r}; the cluster file defines "
                f"{', '.join(projects) or 'no projects'}",
            )
        kind = self._type()
        name = self._name("name") if self.values.get("name") is not None else None
        tasks = self._int("tasks", 1, least=1)
        gpu, gpu_limit = self._gpu()
        util = self._util()
        return SimWorkload(
            name=name or f"{project}-{self.line}",
            project=project,
            type=kind,
            gpu=gpu.to_request(gpu_limit),
            duration_s=self._int("duration_s", None, least=1),
            submit_s=self._int("submit_s", None, least=0),
            tasks=tasks,
            mean_gpu_util_permille=DEFAULT_UTIL_PERMILLE[kind] if util is None else util,
            cpu_milli=self._int("cpu_milli", 0, least=0),
            memory_mib=self._int("memory_mib", 0, least=0),
        )

    def _name(self, field: str) -> str:
        value = self.values[field]
        if not isinstance(value, str) or not value.strip():
            raise self.error(field, f"{show_input(value)}; expected a non-empty name")
        return value.strip()

    def _type(self) -> WorkloadType:
        value = self.values["type"]
        allowed = [t.value for t in WorkloadType]
        if value not in allowed:
            raise self.error(
                "type", f"unknown type {show_input(value)}; expected {' | '.join(allowed)}"
            )
        return WorkloadType(value)

    def _int(self, field: str, default: int | None, *, least: int) -> int:
        value = self.values.get(field)
        if value is None:
            assert default is not None, "required fields are checked first"
            return default
        number: int | None = None
        if self.text and isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
            number = int(value)
        elif not self.text and isinstance(value, int) and not isinstance(value, bool):
            number = value
        if number is None:
            raise self.error(
                field, f"{show_input(value)} is not a whole number; write it like 3600"
            )
        if number < least:
            raise self.error(field, f"{number} is too small; it must be at least {least}")
        return number

    def _gpu(self) -> tuple[GpuAmount, int | None]:
        try:
            gpu = parse_gpu(self.values["gpu"])
        except ValueError as exc:
            raise self.error("gpu", str(exc)) from None
        limit = self.values.get("gpu_limit")
        if limit is None:
            return gpu, None
        try:
            return gpu, parse_gpu_limit(limit, gpu)
        except ValueError as exc:
            raise self.error("gpu_limit", str(exc)) from None

    def _util(self) -> int | None:
        value = self.values.get("mean_gpu_util")
        if value is None:
            return None
        number: Decimal | None = None
        if isinstance(value, int | float | str) and not isinstance(value, bool):
            try:
                number = Decimal(str(value).strip())
            except InvalidOperation:
                number = None
        if number is None or not number.is_finite() or not 0 <= number <= 1:
            raise self.error(
                "mean_gpu_util",
                f"{show_input(value)}; expected a number from 0 to 1 (0.9 = busy 90% of the time)",
            )
        return int((number * 1000).to_integral_value())


def _jsonl_rows(text: str, path: str) -> Iterator[_Row]:
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UserFileError(
                path,
                line,
                "row",
                f"not valid JSON ({exc.msg} at column {exc.colno}); each line is one object "
                'like {"submit_s": 0, "project": "team-a", "type": "train", "gpu": 1, '
                '"duration_s": 3600}',
            ) from None
        if not isinstance(value, dict):
            raise UserFileError(
                path, line, "row", f"{show_input(value)}; each line is one JSON object {{...}}"
            )
        _check_fields(path, line, value)
        yield _Row(path, line, value, text=False)


def _csv_rows(text: str, path: str) -> Iterator[_Row]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if not header:
            raise UserFileError(
                path, 1, "header", f"no header line; expected some of: {', '.join(FIELDS)}"
            )
        columns = [column.strip() for column in header]
        for index, column in enumerate(columns):
            if column in columns[:index]:
                raise UserFileError(path, 1, column, "column appears twice")
        _check_fields(path, 1, dict.fromkeys(columns))
        for fields in reader:
            line = reader.line_num
            if not fields or all(not f.strip() for f in fields):
                continue
            if len(fields) != len(columns):
                raise UserFileError(
                    path, line, "row", f"{len(fields)} fields, expected {len(columns)} (header)"
                )
            values = {c: (v.strip() or None) for c, v in zip(columns, fields, strict=True)}
            yield _Row(path, line, values, text=True)
    except csv.Error as exc:
        raise UserFileError(path, reader.line_num, "row", f"malformed CSV: {exc}") from None


def _check_fields(path: str, line: int, values: Mapping[str, object]) -> None:
    unknown = [key for key in values if key not in FIELDS]
    if unknown:
        raise UserFileError(
            path, line, str(unknown[0]), f"unknown field; known fields are {', '.join(FIELDS)}"
        )
