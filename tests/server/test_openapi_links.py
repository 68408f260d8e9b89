"""The OpenAPI links the server publishes (gpupool.server.openapi_links) lead to operations
that exist, with the parameters those operations take, and schemathesis reads them as the
transitions its stateful tests follow (tests/server/test_schemathesis_stateful.py)."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis

from gpupool.clock import SystemClock
from gpupool.executors.simulated import SimulatedExecutor
from gpupool.server import openapi_links
from gpupool.server.app import create_app
from gpupool.server.settings import ServerSettings


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        executor = SimulatedExecutor((), SystemClock())
        schema: dict[str, Any] = create_app(ServerSettings(data_dir=Path(tmp)), executor).openapi()
        return schema


def _operation(openapi: dict[str, Any], ref: str) -> dict[str, Any]:
    assert ref.startswith("#/paths/")
    path, method = ref.removeprefix("#/paths/").rsplit("/", 1)
    operation: dict[str, Any] = openapi["paths"][path.replace("~1", "/").replace("~0", "~")][method]
    return operation


def test_every_link_leads_to_an_operation_with_those_parameters(openapi: dict[str, Any]) -> None:
    found = 0
    for (method, path, status), links in openapi_links.LINKS.items():
        published = openapi["paths"][path][method]["responses"][status]["links"]
        assert set(published) == set(links)
        for link in published.values():
            target = _operation(openapi, link["operationRef"])
            taken = {p["name"] for p in target.get("parameters", []) if p["in"] == "path"}
            assert set(link.get("parameters", {})) == taken, link
            if "requestBody" in link:
                assert "requestBody" in target
            found += 1
    assert found == 9


def test_a_link_to_a_missing_operation_is_an_error(openapi: dict[str, Any]) -> None:
    renamed = copy.deepcopy(openapi)
    renamed["paths"].pop("/api/v1/workloads/{project}/{name}/logs")
    for operations in renamed["paths"].values():
        for operation in operations.values():
            for response in operation.get("responses", {}).values():
                response.pop("links", None)
    with pytest.raises(KeyError):
        openapi_links.add_links(renamed)


def test_schemathesis_follows_the_links(openapi: dict[str, Any]) -> None:
    machine = schemathesis.openapi.from_dict(openapi).as_state_machine()
    rules = set(vars(machine))
    for name in ("SubmitWorkload", "DescribeWorkload", "WorkloadLogs", "DeleteProject"):
        assert any(f"___201_{name}__" in rule for rule in rules), name
