"""Bad input gets a clear 4xx that names the field and says how to fix it; nothing is stored.

Runs against the real server (uvicorn child process) on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gpupool.api.limits import MAX_BODY_BYTES
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
    # control characters: a NUL fails every launch, ESC and BEL rewrite a terminal showing them
    ("NUL in command", {"command": ["echo", "a\x00b"]}, 422, "command.1", "U+0000 at position 1"),
    ("C1 in command", {"command": ["\x9b2J"]}, 422, "command.0", "U+009B"),
    ("ESC in env value", {"env": {"A": "\x1b[2J"}}, 422, "env.A", "U+001B"),
    ("BEL in working_dir", {"working_dir": "/tmp/\x07"}, 422, "working_dir", "U+0007"),
    ("newline in env name", {"env": {"A\nB": "x"}}, 422, "env.A\nB.[key]", "pattern"),
    # sizes (docs/security.md#limits)
    ("long argument", {"command": ["x" * 4097]}, 422, "command.0", "at most 4096"),
    ("many arguments", {"command": ["x"] * 257}, 422, "command", "at most 256"),
    ("command too big", {"command": ["x" * 4096] * 17}, 422, "command", "above the limit"),
    ("many env vars", {"env": {f"V{i}": "x" for i in range(257)}}, 422, "env", "at most 256"),
    ("long env value", {"env": {"V": "x" * 8193}}, 422, "env.V", "at most 8192"),
    ("env too big", {"env": {f"V{i}": "x" * 8000 for i in range(9)}}, 422, "env", "65536"),
    ("long working_dir", {"working_dir": "/" + "a" * 1024}, 422, "working_dir", "at most 1024"),
    ("long gpu text", {"gpu": "0." + "5" * 40}, 422, "gpu", "above the limit of 32"),
    ("many selector keys", {"node_selector": {f"k{i}": ["v"] for i in range(33)}}, 422, "", "32"),
    # what no node of the cluster (2 nodes of 4 GPUs of 80 GiB) could ever run
    (
        "memory above every device",
        {"gpu": None, "gpu_memory": "81G"},
        422,
        "gpu_memory",
        "more than any GPU in the cluster has (the largest has 81920 MiB)",
    ),
    ("GPUs above every node", {"gpu": 5}, 422, "gpu", "the largest node in the cluster has 4"),
    (
        "selector matches no node",
        {"node_selector": {"zone": ["mars"]}},
        422,
        "node_selector",
        "no node has the label zone",
    ),
    (
        "selector value no node has",
        {"node_selector": {"gpu_model": ["H100"]}},
        422,
        "node_selector",
        "the nodes have gpu_model = simulated",
    ),
    ("gang above the cluster", {"gpu": 4, "tasks": 3}, 422, "tasks", "at most 2 such tasks"),
    (
        "gang of fractions above the cluster",
        {"gpu": 0.5, "tasks": 20, "min_available": 17},
        422,
        "min_available",
        "at most 16 such tasks",
    ),
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


def test_a_body_above_the_limit_is_refused_before_it_is_read(api_server: LiveServer) -> None:
    """413 with the API's error, whether the size is declared (Content-Length) or only seen as
    the bytes stream in (chunked); the server goes on serving."""
    too_big = MAX_BODY_BYTES + 1

    def chunks() -> Iterator[bytes]:
        for _ in range(too_big // 65536 + 1):
            yield b" " * 65536

    with api_server.client() as http:
        for content in (b" " * too_big, chunks()):
            response = http.post(
                "/api/v1/workloads", content=content, headers={"content-type": "application/json"}
            )
            assert response.status_code == 413, response.text
            error = response.json()
            assert f"larger than {MAX_BODY_BYTES} bytes" in error["detail"], error
            assert error["errors"] == []
        assert http.get("/api/v1/projects").status_code == 200


def test_a_body_just_under_the_limit_is_read(api_server: LiveServer, project: str) -> None:
    body = json.dumps({"name": unique("pad"), "project": project, "gpu": 0.5}).encode()
    padded = body[:-1] + b" " * (MAX_BODY_BYTES - len(body)) + b"}"
    assert len(padded) == MAX_BODY_BYTES
    with api_server.client() as http:
        response = http.post(
            "/api/v1/workloads", content=padded, headers={"content-type": "application/json"}
        )
        assert response.status_code == 201, response.text
