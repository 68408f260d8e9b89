"""Tenancy (issue 14 item 6), in process on a real database (SQLite and PostgreSQL) with a fake
clock: the event log is keyed by project id, so a project deleted and created again under its
name starts with none of the old one's events; admin actions are audited, and a researcher sees
those of their projects only; tokens expire; a researcher sees other projects' work only as
usage. The migration that carries old events over: `test_migration_keys_old_events_by_id`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import text

from gpupool.api import limits
from gpupool.clock import FakeClock
from gpupool.server import migrate
from gpupool.server.app import create_app
from gpupool.server.db import make_engine
from gpupool.server.settings import ServerSettings
from liveserver import wait_for


@dataclass
class Server:
    app: Any
    clock: FakeClock
    admin: TestClient
    said: list[str]
    """What the server announced (the loop's errors among them)."""

    def client(self, token: str) -> TestClient:
        """Another caller of the same app (not entered: the app's lifespan is the admin
        client's)."""
        return TestClient(self.app, headers={"Authorization": f"Bearer {token}"})

    def ok(self, method: str, path: str, body: object = None) -> Any:
        response = self.admin.request(method, path, json=body)
        assert response.status_code < 300, response.text
        return response.json() if response.content else None

    def researcher(self, name: str, projects: list[str], **token: object) -> str:
        self.ok("POST", "/api/v1/users", {"name": name, "projects": projects})
        issued = self.ok("POST", f"/api/v1/users/{name}/tokens", token)
        return str(issued["token"])

    def wait(self, check: Callable[[], bool], what: str) -> None:
        """Until `check()`, moving the server's clock on (a stopped task's grace period) and
        waking its loop (it runs when woken: the interval is an hour)."""

        loop = self.app.state.gpupool.loop
        began = loop.iterations

        def moved_on() -> bool:
            self.clock.advance(10)
            loop.wake()
            return check()

        try:
            wait_for(moved_on, what=what)
        except AssertionError as error:  # say what the loop did meanwhile (CI saw this once)
            raise AssertionError(
                f"{error}; the loop ran {loop.iterations - began} iteration(s) meanwhile, its "
                f"thread alive: {loop.thread_alive}, its last error: {loop.last_error}, "
                f"the server said: {self.said}"
            ) from None

    def events(self, client: TestClient | None = None, **params: object) -> list[dict[str, Any]]:
        response = (client or self.admin).get("/api/v1/events", params=params)
        assert response.status_code == 200, response.text
        events: list[dict[str, Any]] = response.json()
        return events


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    url = None if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    data_dir = tmp_path / "data"
    clock = FakeClock()
    settings = ServerSettings(
        data_dir=data_dir, database_url=url, simulated_nodes="1x4", cycle_interval_s=3600.0
    )
    said: list[str] = []
    app = create_app(settings, clock=clock, announce=said.append)
    with TestClient(app) as admin:
        token = (data_dir / "admin-token").read_text().strip()
        admin.headers["Authorization"] = f"Bearer {token}"
        yield Server(app, clock, admin, said)


def test_a_project_created_again_sees_none_of_the_old_ones_events(server: Server) -> None:
    server.ok("POST", "/api/v1/projects", {"name": "p", "quota": {"gpu": 1}})
    rita = server.client(server.researcher("rita", ["p"]))
    job = {"name": "w", "project": "p", "gpu": 0.5, "duration_s": 3600}
    assert rita.post("/api/v1/workloads", json=job).status_code == 201
    assert rita.delete("/api/v1/workloads/p/w").status_code == 200
    server.wait(
        lambda: any(e["kind"] == "deleted" for e in server.events(rita)),
        what="the loop to remove the deleted workload",
    )
    old = server.events(rita)
    assert {"project-created", "member-added", "submitted", "deleted"} <= {e["kind"] for e in old}
    (old_id,) = {e["project_id"] for e in old}

    server.ok("DELETE", "/api/v1/projects/p")
    server.ok("POST", "/api/v1/projects", {"name": "p", "quota": {"gpu": 1}})
    server.ok("PUT", "/api/v1/users/rita/projects", {"projects": ["p"]})

    new = server.events(rita)
    (new_id,) = {e["project_id"] for e in new}
    assert new_id != old_id  # the deleted project had the highest id: not reused
    assert [e["kind"] for e in new] == ["project-created", "member-added"]
    assert server.events(rita, project="p") == new
    assert server.events(rita, project="p", workload="w") == []
    # Admins still see the old project's events, told apart by id.
    every = server.events(project="p")
    assert {e["project_id"] for e in every} == {old_id, new_id}
    assert [e["kind"] for e in every if e["project_id"] == old_id][-1] == "project-deleted"


def test_a_workloads_events_are_its_own_not_an_earlier_ones_of_its_name(server: Server) -> None:
    server.ok("POST", "/api/v1/projects", {"name": "p", "quota": {"gpu": 1}})
    job = {"name": "w", "project": "p", "gpu": 0.5, "duration_s": 3600}
    first = server.ok("POST", "/api/v1/workloads", job)
    server.ok("DELETE", "/api/v1/workloads/p/w")
    server.wait(lambda: server.admin.get("/api/v1/workloads/p/w").status_code == 404, "gone")
    second = server.ok("POST", "/api/v1/workloads", job)
    assert second["id"] != first["id"]  # the deleted one had the highest id: not reused
    detail = server.ok("GET", "/api/v1/workloads/p/w")
    # The scheduling loop may have bound the second one by now: its events only, from its
    # submission (the first one's submission, binding and deletion are not shown).
    events = [(e["kind"], e["workload_id"]) for e in detail["events"]]
    assert events[0] == ("submitted", second["id"])
    assert {workload_id for _kind, workload_id in events} == {second["id"]}
    assert [kind for kind, _id in events] in (["submitted"], ["submitted", "bound"])


def test_tokens_expire_by_the_servers_clock(server: Server) -> None:
    now = server.clock.now_s()
    token = server.researcher("rita", [], expires_in_s=3600)
    (listed,) = server.admin.get("/api/v1/tokens", params={"user": "rita"}).json()
    assert listed["expires_at"] == now + 3600
    admin_tokens = server.admin.get("/api/v1/tokens", params={"user": "admin"}).json()
    assert [t["expires_at"] for t in admin_tokens] == [None]

    rita = server.client(token)
    assert rita.get("/api/v1/whoami").status_code == 200  # now cached
    server.clock.advance(3599)
    assert rita.get("/api/v1/whoami").status_code == 200
    server.clock.advance(1)
    refused = rita.get("/api/v1/whoami")
    assert refused.status_code == 401
    detail = refused.json()["detail"]
    assert f"token {listed['id']} expired at" in detail
    assert "gpupool user token NAME --expires-in" in detail and "gpupool login" in detail
    # Logging in to the dashboard with it fails the same way.
    assert rita.post("/api/v1/session", json={"token": token}).status_code == 401


def test_a_browser_session_ends_with_its_token(server: Server) -> None:
    token = server.researcher("rita", [], expires_in_s=600)
    browser = TestClient(server.app)  # no bearer token: the cookie only
    login = browser.post("/api/v1/session", json={"token": token})
    assert login.status_code == 201
    assert login.json()["expires_at"] == server.clock.now_s() + 600
    assert "Max-Age=600" in login.headers["set-cookie"]
    assert browser.get("/api/v1/session").status_code == 200
    server.clock.advance(600)
    assert browser.get("/api/v1/session").status_code == 401


@pytest.mark.parametrize(
    "expires_in_s",
    [0, 59, limits.TOKEN_LIFETIME_MAX_S + 1, 10**30, "a month", 1.5],
)
def test_a_token_lifetime_out_of_bounds_is_refused(server: Server, expires_in_s: object) -> None:
    server.ok("POST", "/api/v1/users", {"name": "rita", "projects": []})
    answer = server.admin.post("/api/v1/users/rita/tokens", json={"expires_in_s": expires_in_s})
    assert answer.status_code == 422
    assert [e["field"] for e in answer.json()["errors"]] == ["expires_in_s"]
    if isinstance(expires_in_s, int):
        assert (
            f"is {expires_in_s} s: a token may live from 60 s to 365 days (31536000 s)"
            in (answer.json()["detail"])
        )
    assert [t["user"] for t in server.ok("GET", "/api/v1/tokens")] == ["admin"]


# (method, path, body, the kinds of event it writes, what the message must say, whether a
# researcher of project p sees them). Run in this order, each after the ones before.
AUDITED: list[tuple[str, str, dict[str, Any] | None, list[str], str, bool]] = [
    (
        "POST",
        "/departments",
        {"name": "d", "quota": {"gpu": 4}},
        ["department-created"],
        "quota gpu 4",
        False,
    ),
    (
        "PATCH",
        "/departments/d",
        {"quota": {"gpu": 6}},
        ["department-updated"],
        "quota gpu 4 -> 6",
        False,
    ),
    (
        "POST",
        "/projects",
        {"name": "p", "department": "d"},
        ["project-created"],
        "department d",
        True,
    ),
    ("POST", "/projects", {"name": "q"}, ["project-created"], "quota gpu 0", False),
    (
        "PATCH",
        "/projects/p",
        {"quota": {"gpu": 2}, "priority": 80},
        ["project-updated"],
        "quota gpu 0 -> 2, priority",
        True,
    ),
    (
        "PATCH",
        "/projects/p",
        {"limit": {"gpu": 3}},
        ["project-updated"],
        "by admin: limit gpu none -> 3",
        True,
    ),
    (
        "POST",
        "/users",
        {"name": "bob", "projects": ["p", "q"]},
        ["user-created", "member-added", "member-added"],
        "bob",
        True,
    ),
    (
        "POST",
        "/users/bob/tokens",
        {"label": "ci", "expires_in_s": 86400},
        ["token-created"],
        "for bob by admin; expires",
        False,
    ),
    ("PUT", "/users/bob/projects", {"projects": ["q"]}, ["member-removed"], "bob removed", True),
    (
        "POST",
        "/nodes",
        {"name": "extra", "gpu_count": 2, "gpu_memory_mib": 1024},
        ["node-registered"],
        "extra (2 GPUs)",
        False,
    ),
    ("DELETE", "/users/bob", None, ["member-removed", "user-deleted"], "bob", False),
    ("DELETE", "/projects/q", None, ["project-deleted"], "deleted by admin", False),
]


def test_admin_actions_are_audited_and_researchers_see_their_projects(server: Server) -> None:
    first_start = server.events()  # the first admin and its token, actor: none
    assert [(e["kind"], e["actor"]) for e in first_start] == [
        ("user-created", None),
        ("token-created", None),
    ]
    seen = first_start[-1]["id"]
    written: list[dict[str, Any]] = []
    secrets = []
    for method, path, body, kinds, says, _ in AUDITED:
        answer = server.ok(method, "/api/v1" + path, body)
        if isinstance(answer, dict) and "token" in answer:
            secrets.append(answer["token"])
        events = server.events(after_id=seen)
        assert [e["kind"] for e in events] == kinds, (method, path)
        assert all(e["actor"] == "admin" for e in events)
        assert any(says in e["message"] for e in events), (says, events)
        written += events
        seen = events[-1]["id"]
    secrets.append(server.researcher("rita", ["p"]))
    (token_id,) = [t["id"] for t in server.ok("GET", "/api/v1/tokens") if t["user"] == "rita"]
    server.ok("DELETE", f"/api/v1/tokens/{token_id}")
    revoked = server.events(after_id=seen)[-1]
    assert (revoked["kind"], revoked["actor"]) == ("token-revoked", "admin")
    assert f"token {token_id} (cli) of rita by admin" == revoked["message"]
    issued = server.ok("POST", "/api/v1/users/rita/tokens", {})  # that one is revoked
    secrets.append(issued["token"])
    rita = server.client(issued["token"])
    visible = server.events(rita)
    p_id = next(e["project_id"] for e in written if e["kind"] == "project-created")
    expected = [
        e["id"]
        for e, (*_, researcher_sees) in zip(
            written, (row for row in AUDITED for _ in row[3]), strict=True
        )
        if researcher_sees and e["project_id"] == p_id
    ]
    mine = [e for e in visible if e["id"] <= seen]
    assert [e["id"] for e in mine] == expected
    assert all(e["project_id"] == p_id for e in visible)
    assert [e["kind"] for e in visible if e["id"] > seen] == ["member-added"]  # rita herself
    everything = server.admin.get("/api/v1/events").text
    assert not any(secret in everything for secret in secrets)


def test_a_researcher_sees_other_projects_only_as_usage(server: Server) -> None:
    server.ok("POST", "/api/v1/projects", {"name": "mine", "quota": {"gpu": 1}})
    server.ok("POST", "/api/v1/projects", {"name": "theirs", "quota": {"gpu": 2}})
    secret = {
        "name": "secret-job",
        "project": "theirs",
        "gpu": 2,
        "command": ["python", "secret-script.py"],
        "env": {"SECRET_VAR": "x"},
    }
    server.ok("POST", "/api/v1/workloads", secret)
    rita = server.client(server.researcher("rita", ["mine"]))
    mine = {"name": "my-job", "project": "mine", "gpu": 0.5, "duration_s": 3600}
    assert rita.post("/api/v1/workloads", json=mine).status_code == 201
    wait_for(
        lambda: server.ok("GET", "/api/v1/top")["allocated_gpu_milli"] == 2500,
        what="both workloads to run",
    )
    bodies = {
        path: rita.get(path)
        for path in (
            "/api/v1/nodes",
            "/api/v1/nodes/sim-1",
            "/api/v1/top",
            "/api/v1/events",
            "/api/v1/workloads",
            "/api/v1/history",
            "/api/v1/usage",
        )
    }
    for path, answer in bodies.items():
        assert answer.status_code == 200, (path, answer.text)
        for leak in ("secret-job", "secret-script", "SECRET_VAR"):
            assert leak not in answer.text, (path, leak)
    top = bodies["/api/v1/top"].json()
    theirs = next(p for p in top["projects"] if p["name"] == "theirs")
    assert (theirs["allocated_gpu_milli"], theirs["running"]) == (2000, 1)
    shares = [
        (share["project"], share["workload"], share["milli"])
        for node in bodies["/api/v1/nodes"].json()
        for device in node["devices"]
        for share in device["shares"]
    ]
    assert sorted(shares, key=str) == sorted(
        [("theirs", None, 1000), ("theirs", None, 1000), ("mine", "my-job", 500)], key=str
    )
    # The admin sees it all, as before.
    assert "secret-job" in server.admin.get("/api/v1/nodes").text


def test_migration_keys_old_events_by_id(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Rows written before 0006: an event belongs to the project of its name only if that
    project existed then; older ones (an earlier project of that name) are left to admins.
    Memberships survive the rebuild of the projects table, and ids go on above every id the
    history names (SQLite)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    config = migrate.alembic_config(str(engine.url))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0005")
        for statement in (
            "INSERT INTO users (id, name, role, created_at) VALUES (1, 'rita', 'researcher', 0)",
            "INSERT INTO projects (id, name, is_department, quota_gpu_milli, quota_cpu_milli,"
            " quota_memory_mib, over_quota_weight, has_limit, priority, min_runtime_s,"
            " created_at) VALUES (3, 'p', 0, 0, 0, 0, 1, 0, 50, 0, 100)",
            "INSERT INTO memberships (user_id, project_id) VALUES (1, 3)",
            "INSERT INTO workloads (id, name, project_id, type, status, version, gpu_kind,"
            " gpu_amount, tasks, cpu_milli, memory_mib, node_selector, command, env,"
            " grace_period_s, submitted_at, preemptions) VALUES (5, 'w', 3, 'train',"
            " 'pending', 1, 'whole', 1, 1, 0, 0, '{}', '[]', '{}', 30, 120, 0)",
            "INSERT INTO history_project (resolution_s, bucket_s, project_id, samples,"
            " allocated_milli_sum, utilized_milli_sum, utilized_samples, requested_milli_sum)"
            " VALUES (60, 60, 9, 1, 0, 0, 0, 0)",
            # Usage of the minutes before (an earlier p) and in which (this p) p was created.
            "INSERT INTO usage (id, bucket_s, node, device_index, project, workload, samples,"
            " allocated_milli_sum, utilized_milli_sum, memory_used_max_mib)"
            " VALUES (1, 0, 'n', 0, 'p', 'w', 1, 0, 0, 0), (2, 60, 'n', 0, 'p', 'w', 1, 0, 0, 0),"
            " (3, 60, 'n', 0, '', '', 1, 0, 0, 0)",
        ):
            connection.execute(text(statement))
        for event_id, at, project, workload in [
            (1, 50, "p", "w"),  # an earlier project p
            (2, 110, "p", "w"),  # this p, an earlier workload w
            (3, 130, "p", "w"),  # this p, this w
            (4, 140, "p", None),
            (5, 150, "gone", "x"),  # a project deleted since
            (6, 160, None, None),
        ]:
            connection.execute(
                text(
                    "INSERT INTO events (id, at, kind, project, workload, message)"
                    " VALUES (:id, :at, 'k', :project, :workload, '')"
                ),
                {"id": event_id, "at": at, "project": project, "workload": workload},
            )
    migrate.upgrade(engine)
    with engine.begin() as connection:
        keyed = connection.execute(
            text("SELECT id, project_id, workload_id FROM events ORDER BY id")
        ).all()
        assert [tuple(row) for row in keyed] == [
            (1, None, None),
            (2, 3, None),
            (3, 3, 5),
            (4, 3, None),
            (5, None, None),
            (6, None, None),
        ]
        usage = connection.execute(text("SELECT id, project_id FROM usage ORDER BY id")).all()
        assert [tuple(row) for row in usage] == [(1, None), (2, 3), (3, None)]
        assert connection.execute(text("SELECT user_id, project_id FROM memberships")).all() == [
            (1, 3)
        ]
        connection.execute(
            text(
                "INSERT INTO projects (name, is_department, quota_gpu_milli, quota_cpu_milli,"
                " quota_memory_mib, over_quota_weight, has_limit, priority, min_runtime_s,"
                " created_at) VALUES ('new', 0, 0, 0, 0, 1, 0, 50, 0, 200)"
            )
        )
        new_id = connection.execute(text("SELECT id FROM projects WHERE name = 'new'")).scalar()
        assert new_id == 10  # above the history's project 9, not 4
    engine.dispose()


def test_reasons_name_no_workload_of_another_project(server: Server) -> None:
    """A reclaim: the reclaimer's start names its victims, the victim's eviction names the
    reclaimer. Each project's researcher reads the other's workload as 'a workload of project
    P'; the admin reads the names."""
    server.ok("POST", "/api/v1/projects", {"name": "mine", "quota": {"gpu": 4}})
    server.ok("POST", "/api/v1/projects", {"name": "theirs", "quota": {"gpu": 0}})
    rita = server.client(server.researcher("rita", ["mine"]))
    tom = server.client(server.researcher("tom", ["theirs"]))
    victim = {"name": "their-job", "project": "theirs", "gpu": 4, "duration_s": 3600}
    assert tom.post("/api/v1/workloads", json=victim).status_code == 201
    wait_for(lambda: _status(server, "theirs", "their-job") == "running")
    reclaimer = {"name": "my-job", "project": "mine", "gpu": 4, "duration_s": 3600}
    assert rita.post("/api/v1/workloads", json=reclaimer).status_code == 201

    server.wait(lambda: _status(server, "mine", "my-job") == "running", what="the reclaim")
    admin_log = server.admin.get("/api/v1/events").text
    assert "theirs/their-job" in admin_log and "mine/my-job" in admin_log
    for client, own, other, hidden in (
        (rita, "mine/my-job", "their-job", "theirs"),
        (tom, "theirs/their-job", "my-job", "mine"),
    ):
        detail = client.get(f"/api/v1/workloads/{own}").json()
        texts = [e["message"] for e in client.get("/api/v1/events").json()]
        texts += [e["message"] for e in detail["events"]] + [detail["pending_reason"] or ""]
        texts += [
            w["pending_reason"] or "" for w in client.get("/api/v1/workloads").json()["items"]
        ]
        assert not any(other in text for text in texts), texts
        assert any(f"a workload of project {hidden}" in text for text in texts), texts


def _status(server: Server, project: str, name: str) -> str:
    return str(server.ok("GET", f"/api/v1/workloads/{project}/{name}")["status"])
