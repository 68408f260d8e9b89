"""`deploy/grafana/gpupool.json` asks only for metrics the server serves: a real server runs a
little work, its `/metrics` is scraped, and every metric name in every panel's PromQL (and in
the template variables' queries) must be among the served samples. And `--metrics-public`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.server.process import ServerProcess
from liveserver import LiveServer, wait_for

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "gpupool.json"

_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
    | {"and", "or", "unless", "inf", "nan", "le"}
)
_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions or
    aggregations (followed by a parenthesis), keywords, label names or Grafana variables."""
    text = re.sub(r"label_values\((.*),\s*\w+\s*\)$", r"\1", expr)  # Grafana's: metric, label
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', '""', text)  # strings
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "", text)  # Grafana variables
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = _CLAUSE.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match[0] in _KEYWORDS:
            continue
        if match.start() and (text[match.start() - 1].isdigit() or text[match.start() - 1] == "."):
            continue  # the exponent or unit of a number (1e3, 5m)
        names.add(match[0])
    return names


def test_metric_names_are_read_out_of_promql() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le) (rate(gpupool_cycle_duration_seconds_bucket{job="x"}'
        "[$__rate_interval]))) / on(project) group_left sum without (node) (a:b_total offset 5m)"
        ' + count(up{job="by"}) * 1e3'
    )
    assert metric_names(expr) == {"gpupool_cycle_duration_seconds_bucket", "a:b_total", "up"}
    assert metric_names('label_values(gpupool_x{a="b"}, project)') == {"gpupool_x"}


def _expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((panel["title"], target["expr"]))
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            found.append((f"${variable['name']}", query["query"]))
    return found


def _served(scrape: str) -> set[str]:
    return {
        sample.name
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
    }


def test_every_panel_reads_served_metrics(live_server: LiveServer) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    with live_server.client() as http:
        body = {"name": "team-a", "quota": {"gpu": 2}}
        assert http.post("/api/v1/projects", json=body).status_code == 201
        # "big" is the whole 2x4 cluster as a gang: pending while "train" runs
        for name, gpu, tasks in (("train", 1, 1), ("big", 4, 2)):
            body = {"name": name, "project": "team-a", "gpu": gpu, "tasks": tasks}
            made = http.post("/api/v1/workloads", json=body)
            assert made.status_code == 201, made.text

        def measured() -> bool:
            served = _served(http.get("/metrics").text)
            return {"gpupool_project_utilized_gpu", "gpupool_device_memory_used_bytes"} <= served

        wait_for(measured, 30, "a history step with the workload running and measured")
        served = _served(http.get("/metrics").text)
    expressions = _expressions(dashboard)
    assert len(expressions) >= 20
    missing = {
        (title, name)
        for title, expr in expressions
        for name in metric_names(expr)
        if name not in served
    }
    assert not missing, f"panels read metrics the server does not serve: {sorted(missing)}"
    for title, expr in expressions:
        for quantile in re.findall(r"histogram_quantile\([^,]+,(.*)", expr):
            assert all(n.endswith("_bucket") for n in metric_names(quantile)), title
    kinds = {panel["type"] for panel in dashboard["panels"]}
    assert {"timeseries", "stat", "status-history", "table"} <= kinds


def test_metrics_public_serves_metrics_without_a_token(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, simulated_nodes="1x1", extra_args=("--metrics-public",)) as server:
        scrape = httpx.get(server.url + "/metrics", timeout=10)
        assert scrape.status_code == 200
        assert "gpupool_cycle_duration_seconds" in scrape.text
        refused = httpx.get(server.url + "/api/v1/top", timeout=10)
        assert refused.status_code == 401  # the API still needs one


@pytest.mark.parametrize("header", [None, "Bearer gp_nope"])
def test_metrics_need_a_valid_token_by_default(live_server: LiveServer, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    assert httpx.get(live_server.url + "/metrics", headers=headers).status_code == 401
