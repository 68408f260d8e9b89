"""The Kubernetes-client benchmark's table fits 100 columns whatever the watch latencies.

A watch event that arrives before the create's answer gives a negative latency; with one
decimal (`-1.0/2.3`) the row was 101 columns and `render` stopped the run on its assert.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))

from kube_clients_bench.report import render


def _row(p50_ms: float, p95_ms: float) -> dict[str, object]:
    return {
        "client": "kubernetes_asyncio",
        "import_s": 1.23,
        "import_mib": 45.0,
        "create_per_s": 1234.0,
        "bind_per_s": 987.0,
        "create_cpu_ms": 1.2,
        "bind_cpu_ms": 3.4,
        "list_s": 1.23,
        "list_peak_mib": 123.0,
        "load_peak_mib": 456.0,
        "watch_p50_ms": p50_ms,
        "watch_p95_ms": p95_ms,
        "py_typed": False,
        "mypy_errors": 1,
        "none_caught": False,
    }


@pytest.mark.parametrize(("p50_ms", "p95_ms"), [(-1.04, 2.3), (-12.6, 999.4), (3.2, 45.1)])
def test_the_table_fits_100_columns(p50_ms: float, p95_ms: float) -> None:
    text = render([_row(p50_ms, p95_ms)], {"kubernetes_asyncio": {"import_s": 1.0}})
    assert max(len(line) for line in text.splitlines()) <= 100
    assert f"{p50_ms:.0f}/{p95_ms:.0f}" in text
