"""Smoke test of the dashboard benchmark (`benchmarks/dashboard.py`), run tiny: 200 workloads,
3 projects, 2 days of history on 4 simulated nodes, a real server, a few requests each.

It checks that the run completes and reports every number it promises, and that the seeded
history keeps the store's rules (an hour's row is the sum of its minutes' rows), not how fast
anything is: the timings are the benchmark's business.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import func, select

from gpupool.server import migrate
from gpupool.server.db import (
    ClusterHistoryRow,
    DeviceHistoryRow,
    ProjectHistoryRow,
    UsageRow,
    WorkloadRow,
    make_engine,
    sqlite_url,
)

pytestmark = pytest.mark.slow  # a benchmark run end to end: the slow tier

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "dashboard.py"
TINY = ["--workloads", "200", "--projects", "3", "--days", "2", "--nodes", "4"]


def _load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpupool_dashboard_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and value > 0


def test_tiny_run_reports_every_number(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load_benchmark()
    browser = bench.browser_unavailable() is None
    args = [*TINY, "--requests", "2", "--warmup", "1", "--raw-requests", "1", "--json"]
    args += ["--browser-loads", "1"] if browser else ["--no-browser"]

    status = bench.main(args)
    payload: dict[str, Any] = json.loads(capsys.readouterr().out)

    assert status == 0, payload
    keys = [
        "workloads_first_page_s",
        "history_30d_s",
        "history_7d_s",
        "history_24h_s",
        "history_1h_s",
        "top_s",
        "projects_s",
        "overview_api_s",
        "raw_usage_s",
        "ratio_raw_to_history",
    ]
    for key in keys:
        assert _positive(payload[key]), (key, payload[key])
    if browser:
        for key in ("overview_render_s", "overview_30d_render_s", "workloads_render_s"):
            assert _positive(payload[key]), (key, payload[key])
        assert payload["browser"]["skipped"] is None
    else:
        assert payload["overview_render_s"] is None
        assert payload["browser"]["skipped"] == "--no-browser"
    assert set(payload["pages_api"]) == {"overview 1h", "overview 30d", "workloads"}
    assert all(_positive(page["p50_s"]) for page in payload["pages_api"].values())
    assert set(payload["targets"]) >= {"overview", "workloads_first_page"}
    assert all(_positive(t["seconds"]) for t in payload["targets"].values())
    assert isinstance(payload["targets_met"], bool)

    names = {(a["name"], a["role"]) for a in payload["api"]}
    for role in ("admin", "researcher"):
        assert ("history 30d", role) in names
        assert ("workloads p1, newest first", role) in names
        assert ("project filter", role) in names
        assert ("name search q=sweep", role) in names
    assert all(_positive(a["p50_s"]) and _positive(a["bytes"]) for a in payload["api"])
    first_page = next(a for a in payload["api"] if a["name"] == "workloads p1, newest first")
    assert first_page["params"] == {"limit": 50, "sort": "submitted_at", "order": "desc"}
    assert first_page["rows"] > 0

    assert [p["window"] for p in payload["peer"]] == ["1h", "24h"]
    seed = payload["seed"]
    assert sum(seed["statuses"].values()) == 200
    assert seed["running_gpus"] == 32  # the running work fills the cluster
    assert seed["minute_rows"] > 0 and seed["hour_rows"] > 0 and seed["raw_usage_rows"] > 0
    assert payload["server"]["before_measuring"]["evicts"] == 0


def test_seeded_history_keeps_the_store_rules(tmp_path: Path) -> None:
    bench = _load_benchmark()
    config = bench.Config(workloads=200, projects=3, days=2, nodes=4, raw_hours=2)
    engine = make_engine(sqlite_url(tmp_path))
    migrate.upgrade(engine)
    plan = bench.plan(config)
    bench.seed_state(engine, tmp_path, plan)
    counts = bench.seed_history(engine, plan)

    per_minute = bench.SAMPLES_PER_MINUTE
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(WorkloadRow)) == 200
        for table in (ProjectHistoryRow, ClusterHistoryRow, DeviceHistoryRow):
            minutes = connection.execute(select(table).where(table.resolution_s == 60)).all()
            assert minutes
            assert {row.samples for row in minutes} == {per_minute}
            hours = connection.execute(select(table).where(table.resolution_s == 3600)).all()
            # Every hour whose minutes are all kept: its row is their sum.
            by_hour: dict[tuple[Any, ...], list[Any]] = {}
            key_of = _key_of(table)
            for row in minutes:
                by_hour.setdefault((row.bucket_s // 3600 * 3600, *key_of(row)), []).append(row)
            checked = 0
            for hour in hours:
                rows = by_hour.get((hour.bucket_s, *key_of(hour)), [])
                if len(rows) != 60:
                    continue
                checked += 1
                assert hour.samples == 60 * per_minute
                assert hour.allocated_milli_sum == sum(r.allocated_milli_sum for r in rows)
                assert hour.utilized_milli_sum == sum(r.utilized_milli_sum for r in rows)
                assert hour.utilized_samples == sum(r.utilized_samples for r in rows)
            assert checked >= 24
            assert all(0 <= r.utilized_milli_sum <= r.allocated_milli_sum for r in minutes)
        capacity = config.gpus * 1000 * per_minute
        cluster = connection.execute(
            select(ClusterHistoryRow).where(ClusterHistoryRow.resolution_s == 60)
        ).all()
        assert all(0 < row.allocated_milli_sum <= capacity for row in cluster)
        assert all(row.capacity_milli_sum == capacity for row in cluster)
        raw = connection.scalar(select(func.count()).select_from(UsageRow))
        assert raw == counts.raw_usage_rows > config.gpus * 60 * 2
    engine.dispose()


def _key_of(table: Any) -> Any:
    if table is ProjectHistoryRow:
        return lambda row: (row.project_id,)
    if table is DeviceHistoryRow:
        return lambda row: (row.node, row.device_index)
    return lambda row: ()
