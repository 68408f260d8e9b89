"""Helpers for the dashboard's browser tests: log in through the form, make users and work."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from liveserver import LiveServer, unique, wait_for

# Without Playwright the browser test modules (which import this one) are skipped; conftest.py
# fails the run instead when CI=true.
pytest.importorskip(
    "playwright.sync_api", reason="Playwright is not installed: pip install -e '.[dev]'"
)
from playwright.sync_api import Page, expect

__all__ = ["Page", "expect"]


def ready(page: Page, name: str) -> None:
    """Wait until the page named `name` has rendered its first data."""
    expect(page.locator("main")).to_have_attribute("data-ready", name)


def log_in(page: Page, server: LiveServer, token: str) -> None:
    """Paste `token` into the login form, as a person would."""
    page.goto(server.url + "/")
    ready(page, "login")
    page.get_by_label("Access token").fill(token)
    page.get_by_role("button", name="Log in").click()
    ready(page, "overview")


def open_page(page: Page, server: LiveServer, route: str, name: str) -> None:
    page.goto(f"{server.url}/#/{route}")
    ready(page, name)


def number(value: float | None) -> str:
    """A number as the page writes it (at most two decimals, no trailing zeros)."""
    if value is None:
        return "unknown"
    text = f"{round(value, 2):,.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def researcher(server: LiveServer, projects: list[str]) -> tuple[str, str]:
    """A new researcher in `projects`: (name, token)."""
    name = unique("res")
    with server.client() as admin:
        made = admin.post("/api/v1/users", json={"name": name, "projects": projects})
        assert made.status_code == 201, made.text
        token = admin.post(f"/api/v1/users/{name}/tokens", json={}).json()["token"]
    return name, token


def project(http: httpx.Client, name: str, quota: float = 0, department: str | None = None) -> None:
    body: dict[str, Any] = {"name": name, "quota": {"gpu": quota}}
    if department:
        body["department"] = department
    made = http.post("/api/v1/projects", json=body)
    assert made.status_code == 201, made.text


def submit(http: httpx.Client, project_name: str, name: str, **fields: Any) -> dict[str, Any]:
    made = http.post("/api/v1/workloads", json={"name": name, "project": project_name, **fields})
    assert made.status_code == 201, made.text
    body: dict[str, Any] = made.json()
    return body


def workload(http: httpx.Client, project_name: str, name: str) -> dict[str, Any]:
    got = http.get(f"/api/v1/workloads/{project_name}/{name}")
    assert got.status_code == 200, got.text
    body: dict[str, Any] = got.json()
    return body


def wait_status(http: httpx.Client, project_name: str, name: str, *statuses: str) -> None:
    wait_for(
        lambda: workload(http, project_name, name)["status"] in statuses,
        what=f"{project_name}/{name} to be {' or '.join(statuses)}",
    )
