"""Timing the pages in Chromium (Playwright): navigation until `main[data-ready]` names the view."""

from __future__ import annotations

import importlib.util
import os
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .common import ms, say

CHROMIUM = Path(os.environ.get("GPUPOOL_CHROMIUM", "/usr/bin/chromium"))
"""Debian's Chromium (or the one GPUPOOL_CHROMIUM names, as the browser tests take it)."""
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass(slots=True)
class BrowserResult:
    skipped: str | None = None
    """Why the pages were not timed."""
    loads_s: dict[str, list[float]] = field(default_factory=dict)
    """Per view: navigation start until `main[data-ready]` names it, per timed load."""
    first_load_s: dict[str, float] = field(default_factory=dict)
    """Per view: the first load after logging in (not in the median)."""
    scripts_s: dict[str, float] = field(default_factory=dict)
    """Per view, median: until DOMContentLoaded (the page and its modules loaded and run)."""
    api_s: dict[str, float] = field(default_factory=dict)
    """Per view, median: until the last /api/v1 answer before it was drawn."""
    calls: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)
    """Per view, in its median load: each /api/v1 call (path, sent, answered) before drawn."""

    def median(self, view: str) -> float | None:
        loads = self.loads_s.get(view)
        return statistics.median(loads) if loads else None


def browser_unavailable(server_url: str | None = None) -> str | None:
    """Why the pages cannot be timed here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "Playwright for Python is not installed (pip install playwright)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    if server_url is not None:
        answer = httpx.get(server_url + "/", timeout=30)
        if answer.status_code != 200 or "html" not in answer.headers.get("content-type", ""):
            return f"the server does not serve the dashboard at / ({answer.status_code})"
    return None


VIEWS = {
    "overview 1h": ("overview", "#/overview"),
    "overview 30d": ("overview", "#/overview?range=30d"),
    "workloads": ("workloads", "#/workloads"),
}
"""Timed views: (what `main[data-ready]` says when it is drawn, the page's fragment). The
overview opens on its last hour; the 30-day chart is the widest it draws."""
_NOTE_READY = """
(() => {
  const seen = (window.__gpupoolReady = {});
  const note = () => {
    const main = document.querySelector("main");
    const view = main && main.dataset.ready;
    if (view && !(view in seen)) seen[view] = performance.now();
  };
  new MutationObserver(note).observe(document, {
    subtree: true, childList: true, attributes: true, attributeFilter: ["data-ready"],
  });
})();
"""
"""Runs in each new document before the page's own scripts: notes when `main[data-ready]`
first names each view, in milliseconds since the navigation started."""
_READY = "view => window.__gpupoolReady !== undefined && view in window.__gpupoolReady"
_READY_AT = """view => {
  const ready = window.__gpupoolReady[view];
  const nav = performance.getEntriesByType("navigation")[0];
  const api = performance.getEntriesByType("resource")
    .filter((e) => e.name.includes("/api/v1/") && e.responseEnd <= ready);
  return {
    ready,
    scripts: nav ? nav.domContentLoadedEventEnd : null,
    api: api.length ? Math.max(...api.map((e) => e.responseEnd)) : null,
    calls: api.map((e) => [
      e.name.slice(e.name.indexOf("/api/v1/") + 7), e.startTime, e.responseEnd,
    ]),
  };
}"""


def measure_browser(url: str, token: str, loads: int) -> BrowserResult:
    """Log in through the page (`#login=TOKEN`), then for each view: fresh page loads (from
    `about:blank`), each timed in the page from navigation start (`performance.now()`, noted
    by a mutation observer installed before the page's scripts) until `main`'s `data-ready`
    names the view."""
    reason = browser_unavailable(url)
    if reason is not None:
        return BrowserResult(skipped=reason)
    # On a thread of its own: Playwright's sync API refuses a thread where it already runs (a
    # test session that drove a browser before calling this).
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(_measure, url, token, loads).result()


def _measure(url: str, token: str, loads: int) -> BrowserResult:
    from playwright.sync_api import sync_playwright

    result = BrowserResult()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            context.add_init_script(_NOTE_READY)
            page = context.new_page()
            page.goto(f"{url}/#login={token}")
            page.wait_for_function(_READY, arg="overview", timeout=60_000)
            for view, (ready, fragment) in VIEWS.items():
                times: list[float] = []
                scripts: list[float] = []
                answers: list[float] = []
                calls: list[list[tuple[str, float, float]]] = []
                for _ in range(loads + 1):
                    page.goto("about:blank")
                    page.goto(f"{url}/{fragment}", wait_until="commit")
                    page.wait_for_function(_READY, arg=ready, timeout=60_000)
                    marks = page.evaluate(_READY_AT, ready)
                    times.append(float(marks["ready"]) / 1000)
                    if marks["scripts"] is not None:
                        scripts.append(float(marks["scripts"]) / 1000)
                    if marks["api"] is not None:
                        answers.append(float(marks["api"]) / 1000)
                    calls.append([(str(c[0]), c[1] / 1000, c[2] / 1000) for c in marks["calls"]])
                result.first_load_s[view] = times[0]
                ordered = sorted(range(1, len(times)), key=lambda i: times[i])
                result.calls[view] = calls[ordered[len(ordered) // 2]]
                result.loads_s[view] = times[1:]
                if scripts[1:]:
                    result.scripts_s[view] = statistics.median(scripts[1:])
                if answers[1:]:
                    result.api_s[view] = statistics.median(answers[1:])
                say(
                    f"  browser {view:<12} first load {times[0] * 1000:,.0f} ms, median of "
                    f"{loads} {statistics.median(times[1:]) * 1000:,.0f} ms (scripts run by "
                    f"{ms(result.scripts_s.get(view))}, last API answer by "
                    f"{ms(result.api_s.get(view))})"
                )
        finally:
            browser.close()
    return result
