"""The whole flow through the real server: submit -> scheduled by the core -> run on the
simulated nodes -> completed; suspend, resume, delete; reclaim between projects; access."""

from __future__ import annotations

from typing import Any

import httpx

from liveserver import LiveServer, wait_for


def _workload(http: httpx.Client, project: str, name: str) -> dict[str, Any]:
    response = http.get(f"/api/v1/workloads/{project}/{name}")
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def _status_is(http: httpx.Client, project: str, name: str, status: str) -> bool:
    return _workload(http, project, name)["status"] == status


def _project(http: httpx.Client, name: str, quota_gpu: float, **extra: Any) -> None:
    body = {"name": name, "quota": {"gpu": quota_gpu}, **extra}
    response = http.post("/api/v1/projects", json=body)
    assert response.status_code == 201, response.text


def _submit(http: httpx.Client, project: str, name: str, **fields: Any) -> None:
    body = {"name": name, "project": project, **fields}
    response = http.post("/api/v1/workloads", json=body)
    assert response.status_code == 201, response.text


def test_workload_runs_and_completes_with_history(live_server: LiveServer) -> None:
    with live_server.client() as http:
        _project(http, "team-a", 4)
        _submit(http, "team-a", "train-1", gpu=1, tasks=2, duration_s=0.5)
        wait_for(lambda: _status_is(http, "team-a", "train-1", "completed"), what="completion")
        detail = _workload(http, "team-a", "train-1")
        assert [task["state"] for task in detail["task_list"]] == ["done", "done"]
        assert {task["exit_code"] for task in detail["task_list"]} == {0}
        kinds = [event["kind"] for event in detail["events"]]
        assert kinds == ["submitted", "bound", "completed"]
        log = http.get("/api/v1/workloads/team-a/train-1/logs", params={"task": 1}).json()
        assert "started on sim-" in log["text"] and "finished: exit code 0" in log["text"]


def test_pending_reason_says_why(live_server: LiveServer) -> None:
    with live_server.client() as http:
        _project(http, "team-a", 4)
        # what no node could ever run is refused at once, with the reason
        body = {"name": "too-big", "project": "team-a", "gpu": 8}
        refused = http.post("/api/v1/workloads", json=body)
        assert refused.status_code == 422, refused.text
        assert "the largest node in the cluster has 4" in refused.json()["detail"]
        # what could run but not now waits, with the reason
        _submit(http, "team-a", "filler", gpu=4, tasks=2)
        wait_for(lambda: _status_is(http, "team-a", "filler", "running"), what="running")
        _submit(http, "team-a", "waits", gpu=1)
        wait_for(
            lambda: (
                "needs 1 whole GPU" in (_workload(http, "team-a", "waits")["pending_reason"] or "")
            ),
            what="a pending reason",
        )
        top = http.get("/api/v1/top").json()
        assert top["capacity_gpu_milli"] == 8000
        assert top["last_cycle_ms"] is not None


def test_suspend_resume_delete(live_server: LiveServer) -> None:
    with live_server.client() as http:
        _project(http, "team-a", 4)
        _submit(http, "team-a", "nb", type="interactive", gpu=0.5)
        wait_for(lambda: _status_is(http, "team-a", "nb", "running"), what="running")
        assert http.post("/api/v1/workloads/team-a/nb/suspend").json()["status"] == "suspended"
        wait_for(
            lambda: _workload(http, "team-a", "nb")["task_list"][0]["state"] == "done",
            what="the task to stop",
        )
        again = http.post("/api/v1/workloads/team-a/nb/suspend")
        assert again.status_code == 409 and "suspended" in again.json()["detail"]
        assert http.post("/api/v1/workloads/team-a/nb/resume").json()["status"] == "pending"
        wait_for(lambda: _status_is(http, "team-a", "nb", "running"), what="running again")
        assert http.delete("/api/v1/workloads/team-a/nb").json()["status"] == "deleting"
        wait_for(
            lambda: http.get("/api/v1/workloads/team-a/nb").status_code == 404,
            what="the row to go",
        )
        events = http.get("/api/v1/events", params={"project": "team-a", "workload": "nb"})
        kinds = [event["kind"] for event in events.json()]
        assert kinds[-2:] == ["deleting", "deleted"] and "suspended" in kinds


def test_over_quota_work_is_reclaimed_and_resumes_by_itself(live_server: LiveServer) -> None:
    """G4 through the service: team-a borrows idle GPUs, team-b takes its quota back, team-a's
    preempted work runs again once team-b is done."""
    with live_server.client() as http:
        _project(http, "team-a", 2)
        _project(http, "team-b", 6)
        for index in range(8):
            _submit(http, "team-a", f"a{index}", gpu=1)
        wait_for(
            lambda: http.get("/api/v1/top").json()["allocated_gpu_milli"] == 8000,
            what="team-a to fill the cluster",
        )
        for index in range(6):
            _submit(http, "team-b", f"b{index}", gpu=1, duration_s=1)

        def team_b_running() -> bool:
            page = http.get("/api/v1/workloads", params={"project": "team-b"}).json()
            return sum(w["status"] in ("running", "completed") for w in page["items"]) == 6

        wait_for(team_b_running, what="team-b to get its quota")
        page = http.get("/api/v1/workloads", params={"project": "team-a"}).json()
        preempted = [w for w in page["items"] if w["preemptions"] == 1]
        assert len(preempted) == 6
        events = http.get("/api/v1/events", params={"project": "team-a"}).json()
        evictions = [e for e in events if e["kind"] == "evicted"]
        assert len(evictions) == 6
        assert all("reclaimed for team-b/" in e["message"] for e in evictions)

        def team_a_back() -> bool:
            items = http.get("/api/v1/workloads", params={"project": "team-a"}).json()["items"]
            return all(w["status"] == "running" for w in items)

        wait_for(team_a_back, timeout_s=20, what="team-a's work to resume")
        projects = {p["name"]: p for p in http.get("/api/v1/projects").json()}
        assert projects["team-a"]["holding"]["gpu_milli"] == 8000
        metrics = http.get("/metrics").text
        assert 'gpupool_decisions_total{kind="evict"} 6.0' in metrics
        assert 'gpupool_project_fair_share_gpu{project="team-a"}' in metrics
        assert "gpupool_cycle_duration_seconds_count" in metrics


def test_researchers_see_only_their_projects(live_server: LiveServer) -> None:
    with live_server.client() as admin:
        _project(admin, "alpha", 2)
        _project(admin, "beta", 2)
        _submit(admin, "beta", "secret", gpu=1)
        created = admin.post(
            "/api/v1/users", json={"name": "rita", "role": "researcher", "projects": ["alpha"]}
        )
        assert created.status_code == 201, created.text
        token = admin.post("/api/v1/users/rita/tokens", json={}).json()["token"]
    with live_server.client(token) as rita:
        assert rita.get("/api/v1/whoami").json() == {
            "name": "rita",
            "role": "researcher",
            "projects": ["alpha"],
        }
        _submit(rita, "alpha", "mine", gpu=0.5)
        refused = rita.post("/api/v1/workloads", json={"name": "x", "project": "beta", "gpu": 1})
        assert refused.status_code == 403 and "not a member" in refused.json()["detail"]
        # Outside her projects every answer is the same 403, whether the thing exists or not.
        for path in ("/workloads/beta/secret", "/workloads/beta/none", "/workloads/nope/none"):
            got = rita.get(f"/api/v1{path}")
            assert got.status_code == 403 and "not a member" in got.json()["detail"], path
        for project in ("beta", "nope"):
            for path, params in [("/workloads", {"project": project}),
                                 ("/events", {"project": project})]:  # fmt: skip
                assert rita.get(f"/api/v1{path}", params=params).status_code == 403
            submitted = rita.post(
                "/api/v1/workloads", json={"name": "x", "project": project, "gpu": 1}
            )
            assert submitted.status_code == 403
        assert rita.get("/api/v1/workloads/alpha/none").status_code == 404  # hers: not found
        listed = rita.get("/api/v1/workloads").json()
        assert [w["name"] for w in listed["items"]] == ["mine"]
        assert [p["name"] for p in rita.get("/api/v1/projects").json()] == ["alpha"]
        assert rita.post("/api/v1/projects", json={"name": "mine2"}).status_code == 403
        assert rita.get("/api/v1/users").status_code == 403
        # Names alone, as in /top: every project (for colours) and every node (for a filter).
        names = rita.get("/api/v1/names").json()
        assert {"alpha", "beta"} <= set(names["projects"])
        assert names["projects"] == sorted(names["projects"])
        assert names["nodes"] == [n["name"] for n in rita.get("/api/v1/nodes").json()]
    with httpx.Client(base_url=live_server.url) as anonymous:
        assert anonymous.get("/api/v1/names").status_code == 401
        assert anonymous.get("/health").status_code == 200
        assert anonymous.get("/api/v1/workloads").status_code == 401
        assert anonymous.get("/metrics").status_code == 401
        bad = anonymous.get("/api/v1/nodes", headers={"Authorization": "Bearer gp_nope"})
        assert bad.status_code == 401 and "not recognised" in bad.json()["detail"]


def test_project_with_work_cannot_be_deleted(live_server: LiveServer) -> None:
    with live_server.client() as http:
        _project(http, "team-a", 1)
        _submit(http, "team-a", "job", gpu=1)
        refused = http.delete("/api/v1/projects/team-a")
        assert refused.status_code == 409 and "delete them first" in refused.json()["detail"]
        http.delete("/api/v1/workloads/team-a/job")
        wait_for(
            lambda: http.delete("/api/v1/projects/team-a").status_code == 204,
            what="the project to be deletable",
        )


def test_concurrent_submissions_are_committed_together_and_fail_alone(
    live_server: LiveServer,
) -> None:
    """Group commit: a burst is written in few transactions, yet each answer is its own: one
    of twenty identical names wins, the rest get 409, and every 201 is stored."""
    from concurrent.futures import ThreadPoolExecutor

    with live_server.client() as http:
        _project(http, "team-a", 8)

    def post(name: str) -> int:
        with live_server.client() as client:
            body = {"name": name, "project": "team-a", "gpu": 0.5}
            return client.post("/api/v1/workloads", json=body).status_code

    names = ["same"] * 20 + [f"own-{i}" for i in range(40)]
    with ThreadPoolExecutor(max_workers=20) as pool:
        codes = dict(zip(range(len(names)), pool.map(post, names), strict=True))
    same = [codes[i] for i, name in enumerate(names) if name == "same"]
    assert sorted(same) == [201] + [409] * 19
    assert all(codes[i] == 201 for i, name in enumerate(names) if name != "same")
    with live_server.client() as http:
        stored = http.get("/api/v1/workloads", params={"project": "team-a"}).json()
        assert stored["total"] == 41
