"""The web dashboard: `/` is the single page, `/static/...` its files (plain HTML, CSS and
JavaScript modules shipped inside the package; no build step). The page reads the same
`/api/v1` as the CLI, with the session cookie of `POST /api/v1/session`.

Every answer carries a strict Content-Security-Policy (scripts, styles and connections from
this origin only; no inline code; never framed). The page itself is revalidated on each load
(`Cache-Control: no-cache` with an ETag) and names its files under a version, a hash of all of
them (`/static/v1a2b.../app.js`; modules import each other by relative paths, so they stay
under it): those answers may be kept for good (`immutable`), so a reload asks for nothing but the
page, and an upgraded server's page names a new version, so a browser never runs a mix of old
and new modules. An old version is a 404. `/static/app.js` without a version is revalidated.
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


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


@cache
def assets() -> dict[str, Asset]:
    """Every file of the dashboard by URL path (`/`, `/static/app.js`), read once."""
    return _read()[0]


@cache
def version() -> str:
    """The files' version: a hash of every file under `/static/`."""
    return _read()[1]


@cache
def _read() -> tuple[dict[str, Asset], str]:
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
            found[prefix + entry.name] = Asset(body, CONTENT_TYPES[suffix], _etag(body))

    walk(root / "static", "/static/")
    files = hashlib.sha256()
    for path, asset in sorted(found.items()):
        files.update(f"{path} {asset.etag}\n".encode())
    current = "v" + files.hexdigest()[:16]
    body = (root / "index.html").read_bytes().replace(b'"/static/', f'"/static/{current}/'.encode())
    found["/"] = Asset(body, CONTENT_TYPES[".html"], _etag(body))
    return found, current


def _serve(request: Request, path: str, immutable: bool = False) -> Response:
    asset = assets().get(path)
    if asset is None:
        raise not_found("file", path, "the dashboard is at / (its files under /static/)")
    cache_control = "public, max-age=31536000, immutable" if immutable else "no-cache"
    headers = {**SECURITY_HEADERS, "Cache-Control": cache_control, "ETag": asset.etag}
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
    named, _, rest = path.partition("/")
    if named == version() and rest:
        return _serve(request, "/static/" + rest, immutable=True)
    return _serve(request, "/static/" + path)
