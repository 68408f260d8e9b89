"""The workload list the dashboard's table reads: filters by user, node and name, sort and
order with stable paging, placement and exit code, clear 422s; and the device shares of
/nodes and /top, which show a researcher other projects' usage without names."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from liveserver import LiveServer, unique, wait_for


def _submit(http: httpx.Client, project: str, name: str, **fields: Any) -> None:
    made = http.post("/api/v1/workloads", json={"name": name, "project": project, **fields})
    assert made.status_code == 201, made.text


def _names(http: httpx.Client, **params: Any) -> list[str]:
    got = http.get("/api/v1/workloads", params=params)
    assert got.status_code == 200, got.text
    return [item["name"] for item in got.json()["items"]]


def _user(server: LiveServer, projects: list[str]) -> tuple[str, str]:
    name = unique("u")
    with server.client() as admin:
        assert admin.post("/api/v1/users", json={"name": name, "projects": projects}).is_success
        token = admin.post(f"/api/v1/users/{name}/tokens", json={}).json()["token"]
    return name, token


@pytest.fixture(scope="module")
def listed(api_server: LiveServer) -> dict[str, Any]:
    """A project with five workloads: two submitted by a researcher, one running whole GPU on
    a known node, one completed, names that test case and LIKE escaping."""
    project = unique("list")
    with api_server.client() as admin:
        assert admin.post("/api/v1/projects", json={"name": project}).status_code == 201
    user, token = _user(api_server, [project])
    with api_server.client() as admin, api_server.client(token) as mine:
        _submit(admin, project, "b-big", gpu=2, tasks=2)
        _submit(mine, project, "a_small", gpu=0.25)
        _submit(mine, project, "c-done", gpu=1, duration_s=0.05)
        _submit(admin, project, "d-mem", gpu_memory="40G")
        _submit(admin, project, "e-run", gpu=1)

        def done() -> bool:
            page = admin.get("/api/v1/workloads", params={"project": project}).json()
            status = {item["name"]: item["status"] for item in page["items"]}
            return status["c-done"] == "completed" and status["e-run"] == "running"

        wait_for(done, what="c-done completed and e-run running")
    return {"project": project, "user": user}


def test_filters_by_user_name_and_node(api_server: LiveServer, listed: dict[str, Any]) -> None:
    project = listed["project"]
    with api_server.client() as http:
        assert _names(http, project=project, user=listed["user"]) == ["a_small", "c-done"]
        assert _names(http, project=project, q="SMALL") == ["a_small"]
        assert _names(http, project=project, q="_") == ["a_small"]  # not a LIKE wildcard
        assert _names(http, project=project, q="%") == []
        running = http.get("/api/v1/workloads", params={"project": project, "q": "e-run"}).json()[
            "items"
        ][0]
        (placement,) = running["placement"]
        assert placement["state"] == "running" and len(placement["devices"]) == 1
        on_node = _names(http, project=project, node=placement["node"])
        assert "e-run" in on_node and "c-done" not in on_node
        assert _names(http, project=project, node="no-such-node") == []


def test_sorts_both_ways_with_stable_paging(api_server: LiveServer, listed: dict[str, Any]) -> None:
    project = listed["project"]
    with api_server.client() as http:
        by_name = ["a_small", "b-big", "c-done", "d-mem", "e-run"]
        assert _names(http, project=project, sort="name") == by_name
        assert _names(http, project=project, sort="name", order="desc") == by_name[::-1]
        # gpu: the whole request (b-big 4 GPUs; d-mem 40G counted as half an 80G device);
        # ties in submission order, reversed with the rest.
        assert _names(http, project=project, sort="gpu", order="desc") == [
            "b-big",
            "e-run",
            "c-done",
            "d-mem",
            "a_small",
        ]
        assert _names(http, project=project, sort="submitted_at") == [
            "b-big",
            "a_small",
            "c-done",
            "d-mem",
            "e-run",
        ]
        pages = [
            _names(http, project=project, sort="status", limit=2, offset=offset)
            for offset in (0, 2, 4)
        ]
        assert sorted(name for page in pages for name in page) == by_name
        page = http.get("/api/v1/workloads", params={"project": project, "limit": 2}).json()
        assert page["total"] == 5 and len(page["items"]) == 2


def test_exit_code_of_finished_work(api_server: LiveServer, listed: dict[str, Any]) -> None:
    with api_server.client() as http:
        items = http.get("/api/v1/workloads", params={"project": listed["project"]}).json()
    by_name = {item["name"]: item for item in items["items"]}
    assert by_name["c-done"]["exit_code"] == 0 and by_name["c-done"]["placement"] == []
    assert by_name["e-run"]["exit_code"] is None


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"sort": "size"}, "query.sort", "'name', 'submitted_at', 'status', 'project' or 'gpu'"),
        ({"order": "up"}, "query.order", "'asc' or 'desc'"),
        ({"q": "x" * 64}, "query.q", "at most 63 characters"),
    ],
)
def test_bad_list_parameters_are_422s_that_say_what_is_allowed(
    api_server: LiveServer, params: dict[str, str], field: str, words: str
) -> None:
    with api_server.client() as http:
        got = http.get("/api/v1/workloads", params=params)
    assert got.status_code == 422
    (error,) = got.json()["errors"]
    assert error["field"] == field and words in error["message"]


def test_a_researcher_sees_other_projects_shares_without_names(
    api_server: LiveServer,
) -> None:
    mine, theirs = unique("mine"), unique("theirs")
    with api_server.client() as admin:
        for name in (mine, theirs):
            assert admin.post("/api/v1/projects", json={"name": name}).status_code == 201
        _submit(admin, mine, "visible", gpu=0.5)
        _submit(admin, theirs, "hidden", gpu=0.5)

        def running() -> bool:
            page = admin.get("/api/v1/workloads", params={"status": "running"}).json()
            names = {(item["project"], item["name"]) for item in page["items"]}
            return {(mine, "visible"), (theirs, "hidden")} <= names

        wait_for(running, what="both halves running")
        admin_shares = _shares(admin.get("/api/v1/nodes").json())
    assert (theirs, "hidden", 500) in admin_shares and (mine, "visible", 500) in admin_shares
    _, token = _user(api_server, [mine])
    with api_server.client(token) as researcher:
        nodes = researcher.get("/api/v1/nodes").json()
        top = researcher.get("/api/v1/top").json()
    for view in (nodes, top["nodes"]):
        shares = _shares(view)
        assert (theirs, None, 500) in shares and (mine, "visible", 500) in shares
        names = [
            name for node in view for device in node["devices"] for name in device["workloads"]
        ]
        assert f"{mine}/visible" in names and not any(theirs in name for name in names)


def _shares(nodes: list[dict[str, Any]]) -> list[tuple[str, str | None, int]]:
    return [
        (share["project"], share["workload"], share["milli"])
        for node in nodes
        for device in node["devices"]
        for share in device["shares"]
    ]
