"""Smoke test of the API benchmark (`benchmarks/api.py`) in its quick mode: a real server on 50
simulated nodes, 400 + 200 workloads through HTTP, then the loop in-process.

It checks that the run completes (every workload runs, team-b ends up holding its quota by
reclaiming from team-a), not how fast: the timings are the benchmark's business.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # a benchmark run end to end: the slow tier

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "api.py"


def _load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpupool_api_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_quick_mode_completes(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load_benchmark()
    quick = bench.QUICK
    quota_gpus = quick["nodes"] * quick["gpus_per_node"] // 2

    status = bench.main(["--quick", "--json"])
    payload: dict[str, Any] = json.loads(capsys.readouterr().out)

    assert status == 0, payload
    assert payload["completed"] is True
    burst, reclaim = payload["phases"]

    assert burst["count"] == quick["workloads"]
    assert burst["errors"] == 0 and reclaim["errors"] == 0
    assert burst["completed"] and burst["done_s"] is not None
    assert burst["bound_s"] <= burst["done_s"]
    assert burst["binds"] >= quick["workloads"]

    assert reclaim["count"] == quick["reclaim"]
    assert reclaim["completed"] and reclaim["done_s"] is not None
    assert reclaim["held_gpus"] >= quota_gpus
    assert reclaim["evicts"] >= quick["reclaim"]

    final = payload["final"]
    assert final["team-b"]["allocated_gpu_milli"] == quota_gpus * 1000
    assert final["team-b"]["running"] == quick["reclaim"]
    assert final["team-b"]["pending"] == 0
    assert final["team-a"]["running"] == quick["workloads"] - quick["reclaim"]
    assert final["team-a"]["pending"] == quick["reclaim"]  # preempted train work waits again

    loop = payload["loop"]
    assert loop["burst"]["binds"] == quick["workloads"]
    assert loop["burst"]["pending"] == quick["workloads"]
    assert loop["reclaim_done"] is True
    assert sum(c["evicts"] for c in loop["reclaim"]) == quick["reclaim"]
