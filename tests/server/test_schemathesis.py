"""Property-based API tests: schemathesis generates requests for every operation of the
server's OpenAPI schema and sends them, with the admin's token, to a live server (a `gpupool
server` child process); no answer may be a server error (5xx). Then the same again with a
researcher's token (a member of one project): no 5xx either, never a 2xx for anything naming
another project, and nothing of that project's workload (its name, command or environment) in
any answer. The stateful run along the schema's links is in test_schemathesis_stateful.py.

The schema is taken from the app in-process at collection time, so that each operation is its
own test item (schemathesis' lazy `from_fixture` loader fails on pytest 9), and the live server's
`/openapi.json` is checked to be the same. The examples are derandomized (the same requests
every run) and bounded per operation (25 as the admin, 15 as the researcher). A path naming a
project or workload is, for about half the cases, pointed at ones that exist, so that the
operations behind the 404 are reached too; the researcher's, for a third each, at their own
project's and at the other project's.
"""

from __future__ import annotations

import tempfile
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from gpupool.clock import SystemClock
from gpupool.executors.simulated import SimulatedExecutor
from gpupool.server.app import create_app
from gpupool.server.process import ServerProcess
from gpupool.server.settings import ServerSettings
from liveserver import LiveServer, unique

MAX_EXAMPLES = 25
RESEARCHER_EXAMPLES = 15
"""Fewer as the researcher: most of what a researcher may not do is refused before the body."""
ADMIN, RESEARCHER = "admin", "fuzz-researcher"
PROJECT, WORKLOAD = "fuzz-project", "fuzz-workload"
"""Exist throughout: most cases that name a project or workload are pointed here. The
researcher is a member of PROJECT (only)."""
DOOMED_PROJECT, DOOMED_WORKLOAD = "fuzz-doomed", "doomed-workload"
"""What the admin's DELETE cases are pointed at instead, so the others keep finding theirs."""
RESEARCHER_DOOMED = "researcher-doomed"
"""A workload of PROJECT that the researcher's DELETE cases are pointed at."""
OTHER_PROJECT, OTHER_WORKLOAD = "fuzz-other", "other-secret-workload"
"""Another project, not the researcher's, with a running workload: the researcher's cases are
pointed at them for about a third of the cases, and no answer may give them away."""
DESCRIBE = "/api/v1/workloads/{project}/{name}"
OTHER_SECRET = "other-project-secret-value"
"""In the other workload's command and environment: no answer to the researcher may hold it."""


def _openapi() -> dict[str, Any]:
    """The server's OpenAPI schema, from the app without starting it."""
    with tempfile.TemporaryDirectory() as tmp:
        executor = SimulatedExecutor((), SystemClock())
        schema: dict[str, Any] = create_app(ServerSettings(data_dir=Path(tmp)), executor).openapi()
        return schema


OPENAPI = _openapi()
schema = schemathesis.openapi.from_dict(OPENAPI)


class Target:
    def __init__(self, process: ServerProcess, token: str) -> None:
        self.process = process
        self.headers = {"Authorization": f"Bearer {token}"}
        self.answered: Counter[tuple[str, int]] = Counter()
        """(request, status) of every case sent: the researcher's are checked at the end."""
        self.operations: set[tuple[str, str]] = set()
        """(method, path template) of the operations cases were sent to."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("schemathesis") / "server"
    process = ServerProcess(data_dir, simulated_nodes="2x4", cycle_interval_s=0.2)
    with process:
        headers = {"Authorization": f"Bearer {process.admin_token}"}
        with httpx.Client(base_url=process.url, headers=headers, timeout=30) as http:
            assert http.get("/openapi.json").json() == OPENAPI
            made = (
                (PROJECT, WORKLOAD),
                (PROJECT, RESEARCHER_DOOMED),
                (DOOMED_PROJECT, DOOMED_WORKLOAD),
                (OTHER_PROJECT, OTHER_WORKLOAD),
            )
            for project, workload in made:
                if workload != RESEARCHER_DOOMED:
                    body: dict[str, Any] = {"name": project, "quota": {"gpu": 2}}
                    response = http.post("/api/v1/projects", json=body)
                    assert response.status_code == 201, response.text
                body = {"name": workload, "project": project, "gpu": 0.5, "duration_s": 3600}
                if project == OTHER_PROJECT:
                    body.update(command=["echo", OTHER_SECRET], env={"SECRET": OTHER_SECRET})
                response = http.post("/api/v1/workloads", json=body)
                assert response.status_code == 201, response.text
            body = {"name": RESEARCHER, "projects": [PROJECT]}
            assert http.post("/api/v1/users", json=body).status_code == 201
        yield process
        log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "scheduling loop:" not in log, log[-6000:]


@pytest.fixture(scope="module")
def target(server: ServerProcess) -> Target:
    """The admin."""
    return Target(server, server.admin_token)


@pytest.fixture(scope="module")
def researcher(server: ServerProcess) -> Iterator[Target]:
    """A researcher, member of PROJECT only, with a token of their own (issued by the admin
    after the admin's cases ran, so that none of them revoked it)."""
    with httpx.Client(base_url=server.url, timeout=30) as http:
        issued = http.post(
            f"/api/v1/users/{RESEARCHER}/tokens",
            json={"label": "fuzz"},
            headers={"Authorization": f"Bearer {server.admin_token}"},
        )
        assert issued.status_code == 201, issued.text
        target = Target(server, issued.json()["token"])
        yield target
        assert http.get("/api/v1/whoami", headers=target.headers).json()["name"] == RESEARCHER
    answered = target.answered
    if ("GET", DESCRIBE) not in target.operations:
        return  # that operation's cases were not selected (-k)
    # Not vacuous: the researcher's cases reached their own project's workload, and were
    # refused the other project's.
    own = f"GET /api/v1/workloads/{PROJECT}/{WORKLOAD}"
    other = f"GET /api/v1/workloads/{OTHER_PROJECT}/{OTHER_WORKLOAD}"
    assert answered[(own, 200)] > 0 and answered[(other, 403)] > 0, answered


def _half(value: object) -> bool:
    """True for about half the values: deterministic, unlike `hash`."""
    return zlib.crc32(repr(value).encode()) % 2 == 0


def _third(value: object) -> int:
    return zlib.crc32(repr(value).encode()) % 3


def _point_at_existing(case: Any) -> None:
    """For about half the cases, name a project and workload that exist instead of random
    ones: in the path, and for a submitted workload, which gets a plain GPU request too so
    that more submissions are accepted and reach the scheduling loop with fuzzed fields."""
    body = case.body
    if (
        case.method == "POST"
        and case.path == "/api/v1/workloads"
        and isinstance(body, dict)
        and "project" in body
        and _half(sorted(body.items(), key=str))
    ):
        body["project"] = PROJECT
        _plain_gpu(body)
    parameters = case.path_parameters
    if not parameters or not _half(sorted(parameters.items())):
        return
    doomed = case.method == "DELETE"
    project = DOOMED_PROJECT if doomed else PROJECT
    if "project" in parameters:
        parameters["project"] = project
        if "name" in parameters:
            parameters["name"] = DOOMED_WORKLOAD if doomed else WORKLOAD
    elif "name" in parameters and case.path.startswith("/api/v1/projects/"):
        parameters["name"] = project


def _plain_gpu(body: dict[str, Any]) -> None:
    body.pop("gpu_memory", None)
    body.pop("gpu_limit", None)
    body["gpu"] = (1, 0.5, 2)[zlib.crc32(repr(body).encode()) % 3]


def _point_researcher(case: Any) -> str | None:
    """For about a third of the researcher's cases, name their own project and workload; for
    another third, the other project's. The project named, or None."""
    body = case.body
    if case.method == "POST" and case.path == "/api/v1/workloads" and isinstance(body, dict):
        which = _third(sorted(body.items(), key=str))
        if which < 2 and "project" in body:
            body["project"] = (PROJECT, OTHER_PROJECT)[which]
            _plain_gpu(body)
    parameters = case.path_parameters or {}
    query = case.query if isinstance(case.query, dict) else {}
    which = _third(sorted([*parameters.items(), *query.items()], key=str))
    if which < 2:
        own = which == 0
        project = PROJECT if own else OTHER_PROJECT
        if "project" in parameters:
            parameters["project"] = project
            if "name" in parameters:
                doomed = case.method == "DELETE" and own
                parameters["name"] = (
                    RESEARCHER_DOOMED if doomed else (WORKLOAD, OTHER_WORKLOAD)[which]
                )
        elif "name" in parameters and case.path.startswith("/api/v1/projects/"):
            parameters["name"] = project
        elif "project" in query:
            query["project"] = project
    if "project" in parameters:
        return str(parameters["project"])
    if case.path.startswith("/api/v1/projects/"):
        return str(parameters.get("name"))
    if isinstance(body, dict) and case.path.startswith("/api/v1/workloads"):
        return str(body.get("project"))
    return None


SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@schema.parametrize()
@SETTINGS
def test_no_server_errors(case: Any, target: Target) -> None:
    on_user = case.method in ("DELETE", "PUT") and case.path.startswith("/api/v1/users/{name}")
    if on_user and case.path_parameters.get("name") in (ADMIN, RESEARCHER):
        # Deleting the caller's own user revokes the token every other case uses; the
        # researcher's user and projects are the researcher's cases'.
        case.path_parameters["name"] = "someone-else"
    revokes_caller = case.method == "DELETE" and case.path == "/api/v1/tokens/{token_id}"
    if revokes_caller and case.path_parameters.get("token_id") == 1:
        # Token 1 is the first admin's, issued first: the token every other case uses.
        case.path_parameters["token_id"] = 2**31 - 1
    _point_at_existing(case)
    case.call_and_validate(
        base_url=target.process.url,
        headers=target.headers,
        checks=[not_a_server_error],
        timeout=30,
    )


@schema.parametrize()
@settings(SETTINGS, max_examples=RESEARCHER_EXAMPLES)
def test_a_researcher_gets_no_server_errors_and_nothing_of_other_projects(
    case: Any, researcher: Target
) -> None:
    """The same cases as a researcher, member of one project: no 5xx, no 2xx for anything
    naming another project (its workloads, its settings, submitting to it), and nothing of
    the other project's workload in any answer (its name, its command and environment)."""
    project = _point_researcher(case)
    response = case.call(base_url=researcher.process.url, headers=researcher.headers, timeout=30)
    operation = f"{case.method} {case.formatted_path}"
    researcher.answered[(operation, response.status_code)] += 1
    researcher.operations.add((case.method, case.path))
    case.validate_response(response, checks=[not_a_server_error])
    if project == OTHER_PROJECT:
        assert response.status_code >= 400, (operation, response.text[:500])
    assert OTHER_WORKLOAD not in response.text, (operation, response.text[:2000])
    assert OTHER_SECRET not in response.text, (operation, response.text[:2000])


# -- what schemathesis found, pinned down on both databases --------------------------------------

BIG = 99_999_999_999_999_999_999_999
OVERSIZED: list[tuple[str, str, str, dict[str, Any]]] = [
    # id, method, path, body: "{p}" is a project made for the case; POSTs get a fresh name
    ("workload gpu 1e30", "POST", "/api/v1/workloads", {"project": "{p}", "gpu": 1e30}),
    ("workload gpu 3e9", "POST", "/api/v1/workloads", {"project": "{p}", "gpu": 3_000_000_000}),
    ("workload memory", "POST", "/api/v1/workloads", {"project": "{p}", "gpu": 1, "memory": BIG}),
    ("workload gpu_memory", "POST", "/api/v1/workloads", {"project": "{p}", "gpu_memory": BIG}),
    ("project quota gpu", "POST", "/api/v1/projects", {"quota": {"gpu": 1e20}}),
    (
        "project quota past 2^53 milli",
        "POST",
        "/api/v1/projects",
        {"quota": {"gpu": 2**53 // 1000 + 1}},
    ),
    ("department cpu past 2^53", "POST", "/api/v1/departments", {"quota": {"cpu_milli": 2**53}}),
    ("project limit gpu", "POST", "/api/v1/projects", {"limit": {"gpu": 1e20}}),
    ("department quota memory", "POST", "/api/v1/departments", {"quota": {"memory": BIG}}),
    ("patched quota gpu", "PATCH", "/api/v1/projects/{p}", {"quota": {"gpu": 1e20}}),
]


def test_a_large_clusters_quotas_are_stored_as_sent(api_server: LiveServer) -> None:
    """A department of 10,000 nodes (80,000 GPUs, 256 cores and 1 TiB each) and a project
    asking for 3,000,000 GPUs: past 2^31 - 1 in milli-GPU, millicores and MiB, stored exactly on
    both databases (PostgreSQL refused them before migration 0008)."""
    department, project = unique("wide"), unique("wide")
    quota = {"gpu": 80_000, "cpu_milli": 2_560_000_000, "memory": "10000T"}
    with api_server.client() as http:
        response = http.post(
            "/api/v1/departments", json={"name": department, "quota": quota, "limit": quota}
        )
        assert response.status_code == 201, response.text
        response = http.post(
            "/api/v1/projects",
            json={"name": project, "department": department, "quota": {"gpu": 3_000_000}},
        )
        assert response.status_code == 201, response.text
        read = http.get(f"/api/v1/departments/{department}").json()
        assert (
            read["quota"]
            == read["limit"]
            == {
                "gpu_milli": 80_000_000,
                "cpu_milli": 2_560_000_000,
                "memory_mib": 10_000 * 1024**2,
            }
        )
        read = http.get(f"/api/v1/projects/{project}").json()
        assert read["quota"]["gpu_milli"] == 3_000_000_000


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [case[1:] for case in OVERSIZED],
    ids=[case[0] for case in OVERSIZED],
)
def test_amounts_too_big_to_store_are_refused_not_a_server_error(
    api_server: LiveServer, method: str, path: str, body: dict[str, Any]
) -> None:
    """Amounts that pass the parsers but not the database's integer columns (a task's are
    32-bit on PostgreSQL, quotas 64-bit) must be refused with 422, not crash the request with
    500."""
    project = unique("big")
    name = unique("n")
    with api_server.client() as http:
        response = http.post("/api/v1/projects", json={"name": project, "quota": {"gpu": 1}})
        assert response.status_code == 201, response.text
        sent = {key: project if value == "{p}" else value for key, value in body.items()}
        if method == "POST":
            sent["name"] = name
        response = http.request(method, path.replace("{p}", project), json=sent)
        assert response.status_code == 422, response.text
        assert http.get(f"/api/v1/projects/{name}").status_code == 404
        assert http.get(f"/api/v1/workloads/{project}/{name}").status_code == 404
