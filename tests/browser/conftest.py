"""Browser tests of the web dashboard: Playwright for Python driving Debian's Chromium
(`/usr/bin/chromium`, or the path in GPUPOOL_CHROMIUM) against a real `gpupool server` (the
`live_server` fixture: simulated nodes 2x4). Marked `browser`.

Without Chromium or Playwright the tests skip with the reason, except with CI=true, where they
fail: CI must run them (`.ci/run` installs Debian's chromium). Playwright's own browser
downloads are never used.

A failing test leaves a screenshot of its page in `test-artifacts/` (the path is printed).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from liveserver import LiveServer

pytestmark = pytest.mark.browser

if os.environ.get("CI") == "true" and importlib.util.find_spec("playwright") is None:
    raise RuntimeError(
        "CI must run the browser tests: Playwright is not installed (pip install -e '.[dev]')"
    )

CHROMIUM = Path(os.environ.get("GPUPOOL_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
UI_TIMEOUT_MS = 15_000
"""How long an `expect` waits for the page: the scheduler and the page's 5 s refresh both run."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)
            # The slow tier: a Chromium and a live server per module, about 80 s of the
            # default tier on 2 cores; CI runs them in `pytest -m slow`.
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def _unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed: .venv/bin/pip install -e '.[dev]'"
    if not CHROMIUM.exists():
        return (
            f"no Chromium at {CHROMIUM}: install Debian's (apt-get install chromium) or set "
            "GPUPOOL_CHROMIUM to a Chromium binary"
        )
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per module: Playwright's sync API keeps an event loop running in this
    thread while it is open, and tests after the browser tests call `asyncio.run`."""
    reason = _unavailable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the browser tests: {reason}", pytrace=False)
        pytest.skip(reason)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=UI_TIMEOUT_MS)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context (no cookies) and page; a screenshot is kept if the test fails.
    Errors in the page's scripts, and anything the Content-Security-Policy refused, fail the
    test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(UI_TIMEOUT_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on(
        "console",
        lambda message: (
            errors.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    try:
        yield tab
        assert not errors, f"errors in the page: {errors}"
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            ARTIFACTS.mkdir(exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-150:]
            path = ARTIFACTS / f"{name}.png"
            try:
                tab.screenshot(path=str(path), full_page=True)
                print(f"\nscreenshot of the failing page: {path}")
            except Exception as error:  # the page may be gone; the test's own error matters
                print(f"\nno screenshot ({error})")
        context.close()


@pytest.fixture
def server(live_server: LiveServer) -> LiveServer:
    return live_server
