"""The Kubernetes clients benchmark's report: the table, the ratios to the first client,
and the machine and package versions the JSON records.
"""

from __future__ import annotations

import contextlib
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from kube_clients_bench.common import DISTRIBUTIONS, LABELS

COLUMNS = (  # header, key, width, format
    ("client", "client", 18, "{}"),
    ("imp s", "import_s", 5, "{:.2f}"),
    ("imp MiB", "import_mib", 7, "{:.0f}"),
    ("create/s", "create_per_s", 8, "{:.0f}"),
    ("bind/s", "bind_per_s", 6, "{:.0f}"),
    ("CPU ms", "cpu", 7, "{}"),
    ("list s", "list_s", 6, "{:.2f}"),
    ("list MiB", "list_peak_mib", 8, "{:.0f}"),
    ("peak MiB", "load_peak_mib", 8, "{:.0f}"),
    ("watch", "watch", 7, "{}"),
    ("typed", "py_typed", 5, "{}"),
    ("mypy", "mypy", 4, "{}"),
)
LEGEND = [
    "imp: importing the client in a fresh interpreter (median). CPU ms: the client process's",
    "CPU per create / per bind. list MiB: peak RSS added by the list. peak MiB: peak RSS of the",
    "process that created and bound. watch: whole ms from a create's answer to its ADDED event,",
    "p50/p95 (< 0: the event came first). typed: ships py.typed. mypy: --strict errors in correct",
    "code; *: no error for an unchecked pod.metadata.name read as str (None not caught).",
]
RATIOS = (  # header, key, higher is better
    ("import s", "import_s", False),
    ("imp MiB", "import_mib", False),
    ("create/s", "create_per_s", True),
    ("bind/s", "bind_per_s", True),
    ("CPU/req", "cpu_ms", False),
    ("list s", "list_s", False),
    ("list MiB", "list_peak_mib", False),
    ("to ADDED", "watch_from_send_p50_ms", False),
)


def cells(row: dict[str, Any]) -> list[str]:
    if "error" in row:
        return [LABELS[row["client"]], f"failed: {row['error']}"[:70]]
    shown = {
        **row,
        "client": LABELS[row["client"]],
        "cpu": f"{row['create_cpu_ms']:.1f}/{row['bind_cpu_ms']:.1f}",
        "watch": f"{row['watch_p50_ms']:.0f}/{row['watch_p95_ms']:.0f}",  # whole ms: fits 7
        "py_typed": "yes" if row["py_typed"] else "no",
        "mypy": f"{row['mypy_errors']}{'' if row['none_caught'] else '*'}",
    }
    return [fmt.format(shown[key]) for _, key, _, fmt in COLUMNS]


def render(rows: list[dict[str, Any]], ratios: dict[str, dict[str, float]]) -> str:
    """The table (one row per client) and the ratios to the first client measured."""

    def line(values: list[str], widths: list[int]) -> str:
        parts = [
            value.ljust(width) if i == 0 else value.rjust(width)
            for i, (value, width) in enumerate(zip(values, widths, strict=False))
        ]
        return " ".join(parts).rstrip()

    widths = [width for _, _, width, _ in COLUMNS]
    lines = [
        line([header for header, *_ in COLUMNS], widths),
        line(["-" * w for w in widths], widths),
    ]
    lines += [line(cells(row), widths) for row in rows]
    lines += ["", *LEGEND]
    base = LABELS[next(iter(ratios))]
    lines += ["", f"Ratios to {base} (>1: better by that factor; times and sizes inverted):"]
    widths = [18, *(9 for _ in RATIOS)]
    lines.append(line(["client", *(header for header, *_ in RATIOS)], widths))
    for client, values in ratios.items():
        numbers = [f"{values[key]:.2f}" if key in values else "" for _, key, _ in RATIOS]
        lines.append(line([LABELS[client], *numbers], widths))
    lines.append("CPU/req: client CPU per create and bind; to ADDED: p50 from sending a create.")
    assert all(len(text) <= 100 for text in lines), "the table must fit 100 columns"
    return "\n".join(lines)


def compute_ratios(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each client against the first: throughput divided, times and sizes inverted."""
    base = rows[0]
    ratios: dict[str, dict[str, float]] = {}
    for row in rows:
        values = {}
        for _, key, higher in RATIOS:
            if key in row and key in base and row[key] > 0 and base[key] > 0:
                values[key] = row[key] / base[key] if higher else base[key] / row[key]
        ratios[row["client"]] = values
    return ratios


def machine() -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version()}


def versions() -> dict[str, str]:
    found = {}
    for name in DISTRIBUTIONS:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found
