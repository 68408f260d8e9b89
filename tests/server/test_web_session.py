"""Browser sessions against the real server: a token buys an HttpOnly cookie; the cookie reads;
a change with the cookie needs the CSRF header; logout ends it; a researcher's cookie is a
researcher."""

from __future__ import annotations

from contextlib import closing

import httpx

from liveserver import LiveServer, unique


def _login(server: LiveServer, token: str) -> tuple[httpx.Client, str]:
    """A client holding the session cookie (close it), and the CSRF token."""
    browser = httpx.Client(base_url=server.url, timeout=10)
    response = browser.post("/api/v1/session", json={"token": token})
    assert response.status_code == 201, response.text
    header = response.headers["set-cookie"].lower()
    assert "httponly" in header and "samesite=strict" in header
    csrf = response.json()["csrf_token"]
    assert csrf
    return browser, csrf


def test_cookie_session_reads_and_changes_only_with_csrf(api_server: LiveServer) -> None:
    project = unique("web")
    browser, csrf = _login(api_server, api_server.admin_token)
    with closing(browser):
        me = browser.get("/api/v1/session")
        assert me.status_code == 200 and me.json()["role"] == "admin"
        assert browser.get("/api/v1/projects").status_code == 200

        body = {"name": project, "quota": {"gpu": 1}}
        refused = browser.post("/api/v1/projects", json=body)
        assert refused.status_code == 403
        assert "X-CSRF-Token" in refused.json()["detail"]
        wrong = browser.post("/api/v1/projects", json=body, headers={"X-CSRF-Token": "x" * 43})
        assert wrong.status_code == 403
        made = browser.post("/api/v1/projects", json=body, headers={"X-CSRF-Token": csrf})
        assert made.status_code == 201, made.text

        assert browser.delete("/api/v1/session").status_code == 403
        assert browser.delete("/api/v1/session", headers={"X-CSRF-Token": csrf}).status_code == 204
        # The server forgot the session: even replaying the old cookie is refused.
        assert browser.get("/api/v1/projects").status_code == 401


def test_stolen_cookie_value_replayed_after_logout_is_refused(api_server: LiveServer) -> None:
    browser, csrf = _login(api_server, api_server.admin_token)
    cookie = browser.cookies.get("gpupool_session")
    assert cookie
    with closing(browser):
        browser.delete("/api/v1/session", headers={"X-CSRF-Token": csrf})
    with httpx.Client(base_url=api_server.url, cookies={"gpupool_session": cookie}) as thief:
        assert thief.get("/api/v1/session").status_code == 401


def test_bad_tokens_and_researcher_sessions(api_server: LiveServer) -> None:
    with httpx.Client(base_url=api_server.url) as browser:
        assert browser.post("/api/v1/session", json={"token": "gp_nope"}).status_code == 401
        assert browser.post("/api/v1/session", json={"token": ""}).status_code == 422
        assert browser.get("/api/v1/session").status_code == 401
    project, user = unique("webp"), unique("webu")
    with api_server.client() as admin:
        assert admin.post("/api/v1/projects", json={"name": project}).status_code == 201
        body = {"name": user, "projects": [project]}
        assert admin.post("/api/v1/users", json=body).status_code == 201
        token = admin.post(f"/api/v1/users/{user}/tokens", json={}).json()["token"]
    browser, csrf = _login(api_server, token)
    with closing(browser):
        me = browser.get("/api/v1/session").json()
        assert me["role"] == "researcher" and me["projects"] == [project]
        denied = browser.post(
            "/api/v1/projects", json={"name": unique("x")}, headers={"X-CSRF-Token": csrf}
        )
        assert denied.status_code == 403
        assert "admin" in denied.json()["detail"]
