"""The dashboard's files as the server serves them (no browser): content types, caching,
security headers, no inline code, the size budget, and that a wheel would ship every file."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import httpx
import pytest

from gpupool.server.routers.web import assets, version
from liveserver import LiveServer

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "src" / "gpupool" / "server" / "web"
PAGE_BUDGET = 500 * 1024


@pytest.fixture(scope="module")
def server(api_server: LiveServer) -> LiveServer:
    return api_server


def test_the_page_carries_a_strict_policy(server: LiveServer) -> None:
    got = httpx.get(server.url + "/")
    assert got.status_code == 200
    assert got.headers["content-type"] == "text/html; charset=utf-8"
    policy = got.headers["content-security-policy"]
    for directive in (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
    ):
        assert directive in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["cache-control"] == "no-cache"
    assert httpx.head(server.url + "/").status_code == 200


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/static/app.js", "text/javascript; charset=utf-8"),
        ("/static/pages/overview.js", "text/javascript; charset=utf-8"),
        ("/static/style.css", "text/css; charset=utf-8"),
        ("/static/favicon.svg", "image/svg+xml"),
    ],
)
def test_files_have_their_types_and_revalidate_with_an_etag(
    server: LiveServer, path: str, content_type: str
) -> None:
    got = httpx.get(server.url + path)
    assert got.status_code == 200
    assert got.headers["content-type"] == content_type
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["cache-control"] == "no-cache"
    etag = got.headers["etag"]
    again = httpx.get(server.url + path, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""


def test_the_page_names_its_files_under_a_version_kept_for_good(server: LiveServer) -> None:
    """A reload asks for the page alone: its files are named under a hash of them all and may be
    cached for good; an upgrade changes the hash, so old and new modules never mix."""
    page = httpx.get(server.url + "/").text
    named = re.findall(r'"/static/(v[0-9a-f]{16})/([^"]+)"', page)
    assert {version for version, _ in named} == {version()}
    assert {path for _, path in named} >= {"app.js", "style.css", "pages/workloads.js"}
    assert '"/static/app.js"' not in page
    for _, path in named:
        got = httpx.get(f"{server.url}/static/{version()}/{path}")
        assert got.status_code == 200, path
        assert got.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert got.content == httpx.get(f"{server.url}/static/{path}").content
    old = httpx.get(server.url + "/static/v0000000000000000/app.js")
    assert old.status_code == 404  # an old page's files are gone, never the new ones instead


@pytest.mark.parametrize(
    "path", ["/static/nope.js", "/static/..%2Fapp.py", "/static/pages", "/static/"]
)
def test_unknown_files_are_404s(server: LiveServer, path: str) -> None:
    got = httpx.get(server.url + path)
    assert got.status_code == 404
    assert "the dashboard is at /" in got.json()["detail"]


def test_no_inline_scripts_styles_or_markup_injection() -> None:
    html = (WEB / "index.html").read_text(encoding="utf-8")
    assert re.findall(r"<script(?![^>]*\bsrc=)", html) == []
    assert "<style" not in html and " style=" not in html
    assert re.findall(r"\son[a-z]+=", html) == []
    for script in (WEB / "static").rglob("*.js"):
        text = script.read_text(encoding="utf-8")
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text, script
        assert "eval(" not in text and "new Function" not in text, script
        assert 'setAttribute("style"' not in text, script


def test_the_page_asks_for_every_module_at_once() -> None:
    """Each module is preloaded by the page, so that the browser does not discover them one
    import level at a time (a round trip each before the first read of the API)."""
    html = (WEB / "index.html").read_text(encoding="utf-8")
    preloaded = set(re.findall(r'<link rel="modulepreload" href="/static/([^"]+)">', html))
    modules = {p.relative_to(WEB / "static").as_posix() for p in (WEB / "static").rglob("*.js")}
    assert '<script type="module" src="/static/app.js"></script>' in html
    assert preloaded == modules - {"app.js"}


def test_every_page_loads_under_the_size_budget() -> None:
    # One page is the HTML and every file it may load (all modules are loaded at start).
    total = sum(asset.body.__len__() for asset in assets().values())
    assert total < PAGE_BUDGET, f"the dashboard is {total} bytes, over {PAGE_BUDGET}"


def test_a_wheel_ships_every_dashboard_file() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["gpupool.server"]
    package = ROOT / "src" / "gpupool" / "server"
    files = [path for path in WEB.rglob("*") if path.is_file()]
    assert files
    for path in files:
        relative = path.relative_to(package).as_posix()
        assert any(
            fnmatch.fnmatch(relative, pattern) and "/" not in relative[len(pattern) - 1 :]
            for pattern in patterns
        ), f"{relative} matches no package-data pattern in pyproject.toml"
