"""`GET /api/v1/history` through the real server, on SQLite and on PostgreSQL: what the loop
recorded (simulated utilization) as an admin and as a researcher sees it, zooming, devices and
the errors that say how to ask."""

from __future__ import annotations

import time
from typing import Any

import httpx

from liveserver import LiveServer, unique, wait_for


def _last(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return known[-1] if known else None


def _setup(http: httpx.Client) -> tuple[str, str, str]:
    """Two projects, each with a training workload, and a researcher of the first."""
    mine, theirs, user = unique("mine"), unique("theirs"), unique("rita")
    for project, gpu in ((mine, 1), (theirs, 2)):
        body = {"name": project, "quota": {"gpu": 2}}
        assert http.post("/api/v1/projects", json=body).status_code == 201
        body = {"name": "train", "project": project, "gpu": gpu}
        assert http.post("/api/v1/workloads", json=body).status_code == 201
    body = {"name": user, "role": "researcher", "projects": [mine]}
    assert http.post("/api/v1/users", json=body).status_code == 201
    token = http.post(f"/api/v1/users/{user}/tokens", json={}).json()["token"]
    return mine, theirs, token


def test_admins_and_researchers_see_the_recorded_history(api_server: LiveServer) -> None:
    with api_server.client() as http:
        mine, theirs, token = _setup(http)

        def series() -> dict[str, Any]:
            out = http.get("/api/v1/history", params={"range": "1h"}).json()
            return {s["key"]: s for s in out["projects"]}

        wait_for(
            lambda: all(_last(series().get(p, {}).get("utilized_gpu", [])) for p in (mine, theirs)),
            30,
            "both projects' work recorded as running and measured",
        )
        out = http.get("/api/v1/history").json()  # 24h by default
        assert (out["resolution_s"], out["step_s"]) == (60, 240)
        assert len(out["times"]) <= 361
        assert _last(out["capacity_gpu"]) == 8.0
        by_key = {s["key"]: s for s in out["projects"]}
        # Averages over whole steps, the first of which began before the work ran (the
        # model's exact numbers are checked on fake time in test_history.py).
        assert 0 < (_last(by_key[mine]["allocated_gpu"]) or 0) <= 1.0
        allocated = _last(by_key[theirs]["allocated_gpu"]) or 0
        assert 0 < (_last(by_key[theirs]["utilized_gpu"]) or 0) <= allocated <= 2.0

    with api_server.client(token) as rita:
        out = rita.get("/api/v1/history", params={"range": "1h"})
        assert out.status_code == 200, out.text
        assert theirs not in out.text  # anonymous usage only
        keys = [s["key"] for s in out.json()["projects"]]
        assert keys[0] == mine and keys[-1] == "other projects"
        others = out.json()["projects"][-1]
        assert _last(others["allocated_gpu"]) is not None
        devices = rita.get("/api/v1/history/devices", params={"range": "1h"}).json()
        assert len(devices["devices"]) == 8

        # A chart of allocation alone (the overview's) asks for that series only.
        params = {"range": "1h", "project_series": "allocated"}
        lean = rita.get("/api/v1/history", params=params).json()
        assert [s["key"] for s in lean["projects"]] == keys
        for full, only in zip(out.json()["projects"], lean["projects"], strict=True):
            assert only["utilized_gpu"] is None and only["requested_gpu"] is None
            assert len(only["allocated_gpu"]) == len(full["allocated_gpu"])
        assert lean["utilized_gpu"] == out.json()["utilized_gpu"]  # the cluster's lines stay


def test_zooming_and_the_errors(api_server: LiveServer) -> None:
    now = time.time()
    with api_server.client() as http:
        zoom = http.get("/api/v1/history", params={"start": now - 600, "end": now}).json()
        assert (zoom["resolution_s"], zoom["step_s"]) == (60, 60)
        assert zoom["start"] == now - 600 and len(zoom["times"]) in (10, 11)
        month = http.get("/api/v1/history", params={"range": "30d"}).json()
        assert (month["resolution_s"], month["step_s"]) == (3600, 7200)
        both = {"range": "1h", "project_series": ["allocated", "requested"]}
        for series in http.get("/api/v1/history", params=both).json()["projects"]:
            assert series["utilized_gpu"] is None
            assert None not in (series["allocated_gpu"], series["requested_gpu"])
        for params, message in (
            ({"start": now, "end": now - 60}, "must be after start"),
            ({"start": now - 400 * 86_400, "end": now}, "at most 366 days"),
            ({"end": now}, "give start with end"),
            ({"range": "2h"}, "range"),
            ({"project_series": "demand"}, "project_series"),
        ):
            answer = http.get("/api/v1/history", params=params)
            assert answer.status_code == 422, answer.text
            assert message in answer.text
    with httpx.Client(base_url=api_server.url) as anonymous:
        assert anonymous.get("/api/v1/history").status_code == 401
