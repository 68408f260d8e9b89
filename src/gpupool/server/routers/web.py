"""The web dashboard: `/` is the single page, `/static/...` its files (plain HTML, CSS and
JavaScript modules shipped inside the package; no build step). The page reads the same
`/api/v1` as the CLI, with the session cookie of `POST /api/v1/session`.

Every answer carries a strict Content-Security-Policy (scripts, styles and connections from
this origin only; no inline code; never framed). There are no content-hashed file names, so
files are revalidated on each load (`Cache-Control: no-cache` with an ETag): an upgraded server
never runs a browser on a mix of old and new modules, and an unchanged file costs a 304.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from fastapi import APIRouter, Request, Response

from gpupool.server.errors import not_found

router = APIRouter(include_in_schema=False)

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


@cache
def assets() -> dict[str, Asset]:
    """Every file of the dashboard by URL path (`/`, `/static/app.js`), read once."""
    root = resources.files("gpupool.server") / "web"
    found: dict[str, Asset] = {}

    def walk(folder: resources.abc.Traversable, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
                continue
            suffix = "." + entry.name.rpartition(".")[2]
            if suffix not in CONTENT_TYPES:
                continue
            body = entry.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            found[prefix + entry.name] = Asset(body, CONTENT_TYPES[suffix], etag)

    walk(root / "static", "/static/")
    index = root / "index.html"
    body = index.read_bytes()
    found["/"] = Asset(
        body, CONTENT_TYPES[".html"], '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    )
    return found


def _serve(request: Request, path: str) -> Response:
    asset = assets().get(path)
    if asset is None:
        raise not_found("file", path, "the dashboard is at / (its files under /static/)")
    headers = {**SECURITY_HEADERS, "Cache-Control": "no-cache", "ETag": asset.etag}
    if asset.etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    body = b"" if request.method == "HEAD" else asset.body
    headers["Content-Length"] = str(len(asset.body))
    return Response(body, media_type=asset.content_type, headers=headers)


# `async`: an answer from memory needs no worker thread (a page load asks for a dozen files).
@router.api_route("/", methods=["GET", "HEAD"])
async def page(request: Request) -> Response:
    """The dashboard (one page; its views are `#/overview`, `#/workloads`, ...)."""
    return _serve(request, "/")


@router.api_route("/static/{path:path}", methods=["GET", "HEAD"])
async def static(path: str, request: Request) -> Response:
    return _serve(request, "/static/" + path)
