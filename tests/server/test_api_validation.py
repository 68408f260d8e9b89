"""Bad input gets a clear 4xx that names the field and says how to fix it; nothing is stored.

Runs against the real server (uvicorn child process) on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest

from liveserver import LiveServer, unique

WORKLOAD_CASES: list[tuple[str, dict[str, Any], int, str, str]] = [
    # id, body changes, status, field, words the message must contain
    ("unknown project", {"project": "nope"}, 422, "project", "does not exist"),
    ("fraction above 1", {"gpu": 1.5}, 422, "gpu", "between 0 and 1"),
    ("zero gpu", {"gpu": 0}, 422, "gpu", "more than 0"),
    ("negative gpu", {"gpu": -1}, 422, "gpu", "more than 0"),
    ("gpu not a number", {"gpu": "lots"}, 422, "gpu", "must be a number"),
    ("limit below request", {"gpu": 0.5, "gpu_limit": 0.25}, 422, "gpu_limit", "at least"),
    ("limit above one", {"gpu": 0.5, "gpu_limit": 1.5}, 422, "gpu_limit", "at most 1"),
    ("limit on whole gpu", {"gpu": 1, "gpu_limit": 1}, 422, "gpu_limit", "fractional"),
    ("min_available over tasks", {"tasks": 2, "min_available": 3}, 422, "min_available", "tasks"),
    ("gpu and memory", {"gpu_memory": "8G"}, 422, "", "not both"),
    ("memory unit", {"gpu": None, "gpu_memory": "8X"}, 422, "gpu_memory", "unit"),
    ("no gpu at all", {"gpu": None}, 422, "", "give the GPU per task"),
    ("bad name", {"name": "Has Spaces"}, 422, "name", "pattern"),
    ("unknown key", {"gpus": 2}, 422, "gpus", "not permitted"),
    (
        "preemptible notebook",
        {"type": "interactive", "preemptible": True},
        422,
        "preemptible",
        "never preempted",
    ),
]


@pytest.fixture(scope="module")
def project(api_server: LiveServer) -> str:
    name = unique("val")
    with api_server.client() as http:
        response = http.post("/api/v1/projects", json={"name": name, "quota": {"gpu": 2}})
        assert response.status_code == 201, response.text
    return name


@pytest.mark.parametrize(
    ("changes", "status", "field", "words"),
    [case[1:] for case in WORKLOAD_CASES],
    ids=[case[0] for case in WORKLOAD_CASES],
)
def test_bad_workload_is_refused_with_field_and_fix(
    api_server: LiveServer,
    project: str,
    changes: dict[str, Any],
    status: int,
    field: str,
    words: str,
) -> None:
    name = unique("w")
    body: dict[str, Any] = {"name": name, "project": project, "gpu": 1}
    body.update(changes)
    body = {key: value for key, value in body.items() if value is not None}
    with api_server.client() as http:
        response = http.post("/api/v1/workloads", json=body)
        assert response.status_code == status, response.text
        error = response.json()
        assert words in error["detail"], error
        if field:
            assert field in [e["field"] for e in error["errors"]], error
        listed = http.get("/api/v1/workloads", params={"project": project}).json()
        assert name not in [w["name"] for w in listed["items"]]


PROJECT_CASES: list[tuple[str, dict[str, Any], int, str, str]] = [
    ("negative quota", {"quota": {"gpu": -1}}, 422, "quota.gpu", "0 or more"),
    ("negative weight", {"over_quota_weight": -1}, 422, "over_quota_weight", "greater than"),
    (
        "limit below quota",
        {"quota": {"gpu": 4}, "limit": {"gpu": 2}},
        422,
        "limit.gpu",
        "below the quota",
    ),
    ("unknown department", {"department": "nope"}, 422, "department", "does not exist"),
    ("quota with 4 decimals", {"quota": {"gpu": 0.0001}}, 422, "quota.gpu", "3 decimals"),
]


@pytest.mark.parametrize(
    ("changes", "status", "field", "words"),
    [case[1:] for case in PROJECT_CASES],
    ids=[case[0] for case in PROJECT_CASES],
)
def test_bad_project_is_refused(
    api_server: LiveServer, changes: dict[str, Any], status: int, field: str, words: str
) -> None:
    name = unique("p")
    with api_server.client() as http:
        response = http.post("/api/v1/projects", json={"name": name, **changes})
        assert response.status_code == status, response.text
        error = response.json()
        assert words in error["detail"], error
        assert field in [e["field"] for e in error["errors"]], error
        assert http.get(f"/api/v1/projects/{name}").status_code == 404


def test_duplicate_names_conflict(api_server: LiveServer, project: str) -> None:
    with api_server.client() as http:
        response = http.post("/api/v1/projects", json={"name": project})
        assert response.status_code == 409
        assert "already exists" in response.json()["detail"]
        body = {"name": unique("dup"), "project": project, "gpu": 0.5}
        assert http.post("/api/v1/workloads", json=body).status_code == 201
        again = http.post("/api/v1/workloads", json=body)
        assert again.status_code == 409
        assert again.json()["errors"][0]["field"] == "name"


def test_department_quota_exceeded_by_children_warns_but_is_accepted(
    api_server: LiveServer,
) -> None:
    department = unique("dept")
    with api_server.client() as http:
        created = http.post("/api/v1/departments", json={"name": department, "quota": {"gpu": 4}})
        assert created.status_code == 201, created.text
        first = http.post(
            "/api/v1/projects",
            json={"name": unique("c"), "department": department, "quota": {"gpu": 3}},
        )
        assert first.status_code == 201
        assert not [w for w in first.json()["warnings"] if "department" in w]
        second = http.post(
            "/api/v1/projects",
            json={"name": unique("c"), "department": department, "quota": {"gpu": 3}},
        )
        assert second.status_code == 201
        (warning,) = [w for w in second.json()["warnings"] if "department" in w]
        assert "adding up to 6 GPUs, more than its quota of 4" in warning
        assert http.delete(f"/api/v1/departments/{department}").status_code == 409
