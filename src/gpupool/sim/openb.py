"""Strict loaders for the Alibaba GPU-sharing trace "openb" (cluster-trace-gpu-v2023).

The trace (ATC '23, "Beware of Fragmentation"; terms and column meanings in `data/openb/README.md`)
is two node lists and several pod lists, all CSV with a header line:

- node lists: `sn, cpu_milli, memory_mib, gpu, model`;
- pod lists: `name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase,
  creation_time, deletion_time, scheduled_time`, except the `multigpuNN` variants, which have
  only the five shape columns (`name` .. `gpu_milli`).

`load_nodes` and `load_pods` read a file into frozen records and reject, with
`path:line: column: message`, anything that is not what the README defines: a missing, unknown
or repeated column, a field that is not a non-negative integer, `gpu_milli` outside 0..1000, a GPU
share that does not fit `num_gpu`, an unknown QoS class or phase, timestamps out of order, a
repeated name, an empty file. They never guess or fix a row. Every file shipped in `data/openb`
loads (the tests check it).

`to_core_node` turns a trace node into the core's `Node`; that is how the simulator will feed
the core. This module only reads files; it knows nothing of the scheduler.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpupool.core.model import MILLI_PER_GPU, Node
from gpupool.sim.openb_files import (
    ALL_NODE_LIST_FILE,
    DEFAULT_POD_LIST_FILE,
    GPU_NODE_LIST_FILE,
)
from gpupool.userfiles import UserFileError

__all__ = [
    "ALL_NODE_LIST_FILE",
    "DEFAULT_GPU_MEMORY_MIB",
    "DEFAULT_POD_LIST_FILE",
    "GPU_NODE_LIST_FILE",
    "MAX_GPUS_PER_POD",
    "NODE_COLUMNS",
    "POD_COLUMNS",
    "POD_PHASES",
    "POD_SHAPE_COLUMNS",
    "QOS_CLASSES",
    "TraceError",
    "TraceNode",
    "TracePod",
    "default_data_dir",
    "load_nodes",
    "load_pods",
    "to_core_node",
]

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_SHAPE_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
"""The only columns of the `multigpuNN` pod lists."""
POD_COLUMNS = (
    *POD_SHAPE_COLUMNS,
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)

QOS_CLASSES = ("LS", "BE", "Burstable", "Guaranteed")
POD_PHASES = ("Succeeded", "Running", "Pending", "Failed")
MAX_GPUS_PER_POD = 8
"""README: `num_gpu` is an integer from 0 to 8."""
GPU_SPEC_SEPARATOR = "|"
"""README: `gpu_spec` lists the allowed models separated by `|`, like `V100M16|V100M32`."""

DEFAULT_GPU_MEMORY_MIB = 81920
"""Device memory given to every trace node's GPUs, in MiB (80 GiB, the core's own default).

The trace records no device memory, and its README gives no memory per model (G1, G2 and G3 are
undisclosed internal codes), so there is no table to take it from. It does not change how trace
pods are charged: every pod asks for whole GPUs or a milli-GPU share of one, never for device
memory, and the core charges those in milli-GPU whatever the device size is.
"""

_INTEGER = re.compile(r"-?[0-9]+")


TraceError = UserFileError
"""A trace file that is not what the trace's README defines: the one error type of every user
file (`gpupool.userfiles`), under the name it had here.

`line` is the 1-based line of the file (the header is line 1); `key_path` names the column at
fault, or `header` / `row` when the problem is the header line or the row as a whole.
"""


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One row of a node list. `gpu_model` is None for a CPU-only node (`gpu_count` 0)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_model: str | None


@dataclass(frozen=True, slots=True)
class TracePod:
    """One row of a pod list.

    `gpu_milli` is the share of each of the `num_gpu` GPUs (1000 = a whole GPU; below 1000 only
    for a 1-GPU sharing pod). `gpu_spec` is the tuple of models the pod may run on, empty for any.
    `qos`, `pod_phase` and the times are None in a pod list without those columns (`multigpuNN`);
    `scheduled_time_s` is also None for a pod that was never scheduled (Pending). Times are seconds
    from the start of the trace.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    qos: str | None = None
    pod_phase: str | None = None
    creation_time_s: int | None = None
    deletion_time_s: int | None = None
    scheduled_time_s: int | None = None

    @property
    def is_fractional(self) -> bool:
        """True for a GPU-sharing pod: one GPU, less than all of it."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI_PER_GPU

    @property
    def total_gpu_milli(self) -> int:
        """The pod's whole GPU request, in milli-GPU (`num_gpu * gpu_milli`)."""
        return self.num_gpu * self.gpu_milli


def load_nodes(path: str | os.PathLike[str]) -> tuple[TraceNode, ...]:
    """Read a node list (`sn, cpu_milli, memory_mib, gpu, model`); raise `TraceError` if malformed.

    A node has a `model` exactly when it has GPUs (an empty model means a CPU-only node).
    """
    nodes: list[TraceNode] = []
    names: dict[str, int] = {}
    for row in _rows(path, (NODE_COLUMNS,)):
        name = row.name("sn", names)
        cpu_milli = row.count("cpu_milli")
        memory_mib = row.count("memory_mib")
        gpu_count = row.count("gpu")
        model = row.values["model"]
        if gpu_count == 0 and model:
            raise row.error("model", f"{model!r}, but gpu is 0; a CPU-only node has an empty model")
        if gpu_count > 0 and not model:
            raise row.error("model", f"empty, but the node has {gpu_count} GPUs; name their model")
        nodes.append(TraceNode(name, cpu_milli, memory_mib, gpu_count, model or None))
    return tuple(nodes)


def load_pods(path: str | os.PathLike[str]) -> tuple[TracePod, ...]:
    """Read a pod list (all 11 columns, or the 5 shape columns); raise `TraceError` if malformed.

    Checked against the README's definitions: `num_gpu` 0..8; `gpu_milli` 0..1000, 0 exactly when
    `num_gpu` is 0, and 1000 when `num_gpu` > 1 (only 1-GPU pods share a GPU); `gpu_spec` models
    separated by `|`; `qos` and `pod_phase` from their listed values; `creation_time` and
    `deletion_time` present, `scheduled_time` empty for a Pending pod; creation <= scheduled <=
    deletion.
    """
    pods: list[TracePod] = []
    names: dict[str, int] = {}
    for row in _rows(path, (POD_COLUMNS, POD_SHAPE_COLUMNS)):
        name = row.name("name", names)
        cpu_milli = row.count("cpu_milli")
        memory_mib = row.count("memory_mib")
        num_gpu = row.count("num_gpu")
        gpu_milli = row.count("gpu_milli")
        # memory_mib 0 is allowed: the README sets no minimum, and one real pod asks for 0 MiB.
        _check_gpu_shape(row, num_gpu, gpu_milli)
        if "gpu_spec" not in row.values:
            pods.append(TracePod(name, cpu_milli, memory_mib, num_gpu, gpu_milli))
            continue
        gpu_spec = _gpu_spec(row)
        qos = row.choice("qos", QOS_CLASSES)
        pod_phase = row.choice("pod_phase", POD_PHASES)
        creation = row.count("creation_time")
        deletion = row.count("deletion_time")
        scheduled = row.optional_count("scheduled_time")
        _check_times(row, pod_phase, creation, deletion, scheduled)
        pods.append(
            TracePod(
                name,
                cpu_milli,
                memory_mib,
                num_gpu,
                gpu_milli,
                gpu_spec,
                qos,
                pod_phase,
                creation,
                deletion,
                scheduled,
            )
        )
    return tuple(pods)


def to_core_node(node: TraceNode) -> Node:
    """The core's `Node` for a trace node; its GPUs get `DEFAULT_GPU_MEMORY_MIB` of memory each."""
    return Node(
        name=node.name,
        gpu_count=node.gpu_count,
        gpu_memory_mib=DEFAULT_GPU_MEMORY_MIB,
        gpu_model=node.gpu_model,
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
    )


def checkout_data(name: str) -> Path | None:
    """`data/NAME` of a source checkout: the one this module lives in (an editable install),
    else the one the process runs in (an installed package, the compiled core's wheel say, run
    from a checkout). A checkout is a folder with `pyproject.toml` and `data/NAME`."""
    for start in (Path(__file__).resolve(), Path.cwd().resolve() / "pyproject.toml"):
        for root in start.parents:
            candidate = root / "data" / name
            if candidate.is_dir() and (root / "pyproject.toml").is_file():
                return candidate
    return None


def default_data_dir() -> Path:
    """The `data/openb` folder of the source checkout (`checkout_data`): the trace is data of
    the repository, not of the installed package."""
    found = checkout_data("openb")
    if found is None:
        raise FileNotFoundError(
            f"the openb trace was not found above {Path(__file__).resolve()} or {Path.cwd()}: "
            "run from a source checkout (the trace lives in data/openb), or name the folder "
            "with --data"
        )
    return found


# --- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Row:
    path: str
    line: int
    values: dict[str, str]

    def error(self, column: str, message: str) -> TraceError:
        return TraceError(self.path, self.line, column, message)

    def name(self, column: str, seen: dict[str, int]) -> str:
        value = self.values[column]
        if not value:
            raise self.error(column, "empty; every row needs a name")
        if value in seen:
            raise self.error(column, f"{value!r} appears twice (first on line {seen[value]})")
        seen[value] = self.line
        return value

    def count(self, column: str) -> int:
        value = self.optional_count(column)
        if value is None:
            raise self.error(column, "empty; expected a non-negative integer")
        return value

    def optional_count(self, column: str) -> int | None:
        text = self.values[column]
        if not text:
            return None
        if not _INTEGER.fullmatch(text):
            raise self.error(column, f"not an integer: {text!r}; expected a non-negative integer")
        value = int(text)
        if value < 0:
            raise self.error(column, f"negative number {value}; expected a non-negative integer")
        return value

    def choice(self, column: str, allowed: Sequence[str]) -> str:
        value = self.values[column]
        if value not in allowed:
            raise self.error(
                column, f"unknown value {value!r}; expected one of {', '.join(allowed)}"
            )
        return value


def _check_gpu_shape(row: _Row, num_gpu: int, gpu_milli: int) -> None:
    if num_gpu > MAX_GPUS_PER_POD:
        raise row.error("num_gpu", f"{num_gpu} GPUs; a pod requests 0 to {MAX_GPUS_PER_POD}")
    if gpu_milli > MILLI_PER_GPU:
        raise row.error(
            "gpu_milli", f"{gpu_milli} is outside 0..{MILLI_PER_GPU} (milli-GPU of each GPU)"
        )
    if num_gpu == 0 and gpu_milli != 0:
        raise row.error("gpu_milli", f"{gpu_milli}, but num_gpu is 0; a CPU-only pod has 0")
    if num_gpu > 0 and gpu_milli == 0:
        raise row.error("gpu_milli", f"0, but num_gpu is {num_gpu}; a GPU pod has 1..1000")
    if num_gpu > 1 and gpu_milli != MILLI_PER_GPU:
        raise row.error(
            "gpu_milli",
            f"{gpu_milli}, but num_gpu is {num_gpu}; only 1-GPU pods share a GPU, "
            f"a pod with more GPUs has {MILLI_PER_GPU}",
        )


def _gpu_spec(row: _Row) -> tuple[str, ...]:
    text = row.values["gpu_spec"]
    if not text:
        return ()
    models = tuple(text.split(GPU_SPEC_SEPARATOR))
    if "" in models:
        raise row.error(
            "gpu_spec",
            f"empty model name in {text!r}; models are separated by "
            f"{GPU_SPEC_SEPARATOR!r}, like V100M16|V100M32",
        )
    # A model may be listed twice: 9 real rows of gpuspec10 read `V100M16|V100M32|V100M32` or
    # `A10|G2|P100|T4|V100M16|V100M32|V100M32`. The README does not forbid it and it changes no
    # meaning (the set of allowed models), so the row is kept as written.
    return models


def _check_times(
    row: _Row, pod_phase: str, creation: int, deletion: int, scheduled: int | None
) -> None:
    if deletion < creation:
        raise row.error("deletion_time", f"{deletion} is before creation_time {creation}")
    if scheduled is None:
        return
    if pod_phase == "Pending":
        raise row.error("scheduled_time", f"{scheduled}, but a Pending pod has none (empty)")
    if scheduled < creation:
        raise row.error("scheduled_time", f"{scheduled} is before creation_time {creation}")
    if scheduled > deletion:
        raise row.error("scheduled_time", f"{scheduled} is after deletion_time {deletion}")


def _rows(path: str | os.PathLike[str], schemas: Sequence[tuple[str, ...]]) -> Iterator[_Row]:
    """The data rows of `path`, checked against the header; the header must match a schema."""
    shown = os.fspath(path)
    reader = csv.reader(io.StringIO(_text(shown), newline=""), strict=True)
    try:
        header = next(reader, None)
        columns = _check_header(shown, header, schemas)
        count = 0
        for fields in reader:
            line = reader.line_num
            if not fields:
                raise TraceError(shown, line, "row", "blank line; every line is a data row")
            if len(fields) != len(columns):
                raise TraceError(
                    shown,
                    line,
                    "row",
                    f"{len(fields)} fields, expected {len(columns)} ({', '.join(columns)})",
                )
            count += 1
            yield _Row(shown, line, dict(zip(columns, fields, strict=True)))
    except csv.Error as exc:
        raise TraceError(shown, reader.line_num, "row", f"malformed CSV: {exc}") from None
    if count == 0:
        raise TraceError(shown, 1, "header", "no data rows after the header")


def _text(path: str) -> str:
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceError(path, line, "row", f"not UTF-8 text: {exc.reason}") from None


def _check_header(
    path: str, header: list[str] | None, schemas: Sequence[tuple[str, ...]]
) -> tuple[str, ...]:
    expected = " or ".join(", ".join(schema) for schema in schemas)
    if not header:
        what = "empty file" if header is None else "blank header line"
        raise TraceError(path, 1, "header", f"{what}; expected a header line: {expected}")
    for i, column in enumerate(header):
        if column in header[:i]:
            raise TraceError(path, 1, column, f"column appears twice; expected: {expected}")
    known = {column for schema in schemas for column in schema}
    unknown = [column for column in header if column not in known]
    if unknown:
        raise TraceError(path, 1, unknown[0], f"unknown column; expected: {expected}")
    for schema in schemas:
        if set(header) == set(schema):
            return tuple(header)
    # Every column is known but none of the schemas matches, so columns are missing. The schemas
    # are nested (the shape columns are a subset of the full ones), so the largest one always
    # holds the header: name what the nearest schema that holds it misses.
    missing = min(
        (
            [column for column in schema if column not in header]
            for schema in schemas
            if set(header) <= set(schema)
        ),
        key=len,
    )
    plural = "s" if len(missing) > 1 else ""
    raise TraceError(
        path,
        1,
        missing[0],
        f"missing column{plural} {', '.join(missing)}; expected: {expected}",
    )
