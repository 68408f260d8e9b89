"""Stateful API fuzzing: schemathesis chains requests along the OpenAPI links the server
publishes (gpupool.server.openapi_links: a created project is read, changed, deleted and
submitted to; a submitted workload is described, suspended, resumed, deleted and its logs read)
and those it infers from the schema, against a live `gpupool server` child process with the
admin's token. No answer may be a server error (5xx), the server's log must hold no traceback,
and the chains must reach the operations behind a created project and workload with 2xx.

The run is derandomized (the same sequences every run) and bounded (40 scenarios of at most 12
steps, about 450 requests): 35 s alone, about a minute on a busy 2-core machine, so it is in the
slow tier.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import Flaky
from schemathesis.checks import not_a_server_error

from gpupool.api.limits import NAME_MAX
from gpupool.api.schemas import NAME_PATTERN
from gpupool.server.process import ServerProcess

pytestmark = pytest.mark.slow

SCENARIOS = 40
STEPS = 12
ROUNDS = 4
"""Runs of the state machine at most, while Hypothesis stops early (see the test)."""
ADMIN = "admin"
PROJECT = "fuzz-project"
"""Exists throughout: plain submissions not sent to a project by a link go here."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("stateful") / "server"
    process = ServerProcess(data_dir, simulated_nodes="2x4", cycle_interval_s=0.2)
    with process:
        with httpx.Client(base_url=process.url, timeout=30) as http:
            created = http.post(
                "/api/v1/projects",
                json={"name": PROJECT, "quota": {"gpu": 2}},
                headers={"Authorization": f"Bearer {process.admin_token}"},
            )
            assert created.status_code == 201, created.text
        yield process
        log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "scheduling loop:" not in log, log[-6000:]


RUN = settings(
    max_examples=SCENARIOS,
    stateful_step_count=STEPS,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)
NAME = re.compile(NAME_PATTERN)


def _own_name(body: dict[str, Any], scenario: int) -> None:
    """A valid name to create is made the scenario's own (`s3-<name>`): what one scenario
    creates does not collide with what another did, so that the same steps get the same
    answers, as Hypothesis expects of a test it may run again."""
    name = body.get("name")
    if isinstance(name, str) and NAME.match(name):
        prefix = f"s{scenario}-"
        body["name"] = prefix + name[: NAME_MAX - len(prefix)].rstrip("-._")


def _spare_the_caller(case: Any) -> None:
    """Steps must not delete the admin's user or revoke its token (token 1, the first issued):
    every later step uses it."""
    parameters = case.path_parameters or {}
    if case.method != "DELETE":
        return
    if case.operation.path == "/api/v1/users/{name}" and parameters.get("name") == ADMIN:
        parameters["name"] = "someone-else"
    if case.operation.path == "/api/v1/tokens/{token_id}" and parameters.get("token_id") == 1:
        parameters["token_id"] = 2**31 - 1


def _plainer(operation: str, body: dict[str, Any], scenario: int) -> None:
    """Most projects and submissions are made plain enough to be accepted (a project without
    quota or department; half a GPU and nothing the cluster lacks, in a project that exists),
    so that the chains go on past them: to what a created project and a created workload link
    to. A submission that a link sent to a project the scenario created keeps it."""
    if zlib.crc32(repr(sorted(body.items(), key=str)).encode()) % 4 == 0:
        return  # as generated
    if operation == "POST /api/v1/projects":
        for key in ("quota", "limit", "department"):
            body.pop(key, None)
    elif operation == "POST /api/v1/workloads":
        for key in ("gpu_memory", "gpu_limit", "node_selector", "min_available", "memory"):
            body.pop(key, None)
        body.update(gpu=0.5, tasks=1, cpu_milli=0)
        if not str(body.get("project", "")).startswith(f"s{scenario}-"):
            body["project"] = PROJECT


def _template(case: Any) -> str:
    return f"{case.method} {case.operation.path}"


def test_chains_of_requests_along_the_links_never_get_a_server_error(
    server: ServerProcess,
) -> None:
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    openapi = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    created = openapi["paths"]["/api/v1/workloads"]["post"]["responses"]["201"]
    assert "DescribeWorkload" in created["links"]  # the links are served, not only built
    schema = schemathesis.openapi.from_dict(openapi)
    answered: Counter[tuple[str, int]] = Counter()

    scenarios = itertools.count()
    started: list[int] = []

    def scenarios_run() -> int:
        return len(started)

    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            self.scenario = next(scenarios)
            started.append(self.scenario)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": server.url, "headers": headers, "timeout": 30}

        def before_call(self, case: Any) -> None:
            _spare_the_caller(case)
            if case.method == "POST" and isinstance(case.body, dict):
                _own_name(case.body, self.scenario)
                _plainer(_template(case), case.body, self.scenario)

        def after_call(self, response: Any, case: Any) -> None:
            answered[(_template(case), response.status_code)] += 1

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=[not_a_server_error])

    # The server's state carries from one scenario to the next, so Hypothesis may find that the
    # same draws met other answers than before and stop early (schemathesis' own runner ends its
    # stateful phase there too). The run is then started again on the server as it now is (new
    # names: the scenario numbers go on), up to ROUNDS times, until enough scenarios have run.
    # Every answer of every round is counted and checked below, so a round cut short hides
    # nothing.
    for _ in range(ROUNDS):
        with contextlib.suppress(Flaky):
            Machine.run(settings=RUN)
        if scenarios_run() >= SCENARIOS // 2 and sum(answered.values()) >= SCENARIOS * 2:
            break
    lines = "\n".join(f"{key}: {count}" for key, count in sorted(answered.items()))
    steps = sum(answered.values())
    assert scenarios_run() >= SCENARIOS // 2 and steps >= SCENARIOS * 2, lines
    assert not [key for key in answered if key[1] >= 500], lines
    reached = {template for (template, status) in answered if 200 <= status < 300}
    assert {"POST /api/v1/projects", "POST /api/v1/workloads"} <= reached, lines
    assert reached & {
        "GET /api/v1/workloads/{project}/{name}",
        "GET /api/v1/workloads/{project}/{name}/logs",
        "POST /api/v1/workloads/{project}/{name}/suspend",
        "POST /api/v1/workloads/{project}/{name}/resume",
        "DELETE /api/v1/workloads/{project}/{name}",
    }, lines
