"""OpenAPI links in the server's schema: which answer's fields name what a later request acts
on. A created project is read, changed, deleted and submitted to by its `name`; a submitted
workload is described, suspended, resumed, deleted and its logs read by `project` and `name`.

Clients may follow them, and schemathesis' stateful tests chain requests along them
(tests/server/test_schemathesis_stateful.py). They are added to the schema FastAPI builds, so
the routers stay as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

_PROJECT = "/api/v1/projects/{name}"
_WORKLOAD = "/api/v1/workloads/{project}/{name}"
_BY_PROJECT_NAME = {"name": "$response.body#/name"}
_BY_WORKLOAD = {"project": "$response.body#/project", "name": "$response.body#/name"}


@dataclass(frozen=True, slots=True)
class Link:
    """Where an answer leads: the operation, its parameters and (in part) its request body,
    as OpenAPI runtime expressions over the answer."""

    method: str
    path: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    request_body: Mapping[str, str] | None = None


LINKS: dict[tuple[str, str, str], dict[str, Link]] = {
    # (method, path, status) of the answer -> link name -> where it leads
    ("post", "/api/v1/projects", "201"): {
        "GetProject": Link("get", _PROJECT, _BY_PROJECT_NAME),
        "PatchProject": Link("patch", _PROJECT, _BY_PROJECT_NAME),
        "DeleteProject": Link("delete", _PROJECT, _BY_PROJECT_NAME),
        "SubmitWorkload": Link(
            "post", "/api/v1/workloads", request_body={"project": "$response.body#/name"}
        ),
    },
    ("post", "/api/v1/workloads", "201"): {
        "DescribeWorkload": Link("get", _WORKLOAD, _BY_WORKLOAD),
        "SuspendWorkload": Link("post", _WORKLOAD + "/suspend", _BY_WORKLOAD),
        "ResumeWorkload": Link("post", _WORKLOAD + "/resume", _BY_WORKLOAD),
        "DeleteWorkload": Link("delete", _WORKLOAD, _BY_WORKLOAD),
        "WorkloadLogs": Link("get", _WORKLOAD + "/logs", _BY_WORKLOAD),
    },
}


def _pointer(path: str, method: str) -> str:
    """A JSON pointer to an operation of this schema (`~1` is `/`)."""
    return "#/paths/" + path.replace("~", "~0").replace("/", "~1") + "/" + method


def add_links(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with LINKS in its responses (changed in place); a link to an operation not in
    the schema is a `KeyError`, so a renamed route cannot leave a dangling link."""
    paths = schema["paths"]
    for (method, path, status), links in LINKS.items():
        out: dict[str, Any] = paths[path][method]["responses"][status].setdefault("links", {})
        for name, link in links.items():
            if link.method not in paths[link.path]:
                raise KeyError(f"link {name}: no {link.method.upper()} {link.path}")
            written: dict[str, Any] = {"operationRef": _pointer(link.path, link.method)}
            if link.parameters:
                written["parameters"] = dict(link.parameters)
            if link.request_body is not None:
                written["requestBody"] = dict(link.request_body)
            out[name] = written
    return schema


def install(app: FastAPI) -> None:
    """Make `app.openapi()` (and `/openapi.json`) return the schema with its links."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = add_links(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
