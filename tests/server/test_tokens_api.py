"""Admins list and revoke tokens (`GET /api/v1/tokens`, `DELETE /api/v1/tokens/{id}`): the list
never shows a token, a revoked token answers 401 at once, researchers get 403, and the last
admin token cannot be revoked."""

from __future__ import annotations

from liveserver import LiveServer, unique


def test_admin_lists_and_revokes_tokens(live_server: LiveServer) -> None:
    user = unique("u")
    with live_server.client() as admin:
        assert admin.post("/api/v1/users", json={"name": user}).status_code == 201
        issued = admin.post(f"/api/v1/users/{user}/tokens", json={"label": "laptop"}).json()
        second = admin.post(f"/api/v1/users/{user}/tokens", json={"label": "ci"}).json()
        assert isinstance(issued["id"], int)

        everyone = admin.get("/api/v1/tokens")
        assert everyone.status_code == 200, everyone.text
        assert "admin" in {t["user"] for t in everyone.json()}
        assert issued["token"] not in everyone.text
        theirs = admin.get("/api/v1/tokens", params={"user": user}).json()
        assert [(t["id"], t["user"], t["label"]) for t in theirs] == [
            (issued["id"], user, "laptop"),
            (second["id"], user, "ci"),
        ]
        assert admin.get("/api/v1/tokens", params={"user": unique("nobody")}).status_code == 404

        with live_server.client(issued["token"]) as researcher:
            assert researcher.get("/api/v1/whoami").status_code == 200
            assert researcher.get("/api/v1/tokens").status_code == 403
            assert researcher.delete(f"/api/v1/tokens/{second['id']}").status_code == 403

            assert admin.delete(f"/api/v1/tokens/{issued['id']}").status_code == 204
            assert researcher.get("/api/v1/whoami").status_code == 401  # no stale cache
        gone = admin.delete(f"/api/v1/tokens/{issued['id']}")
        assert gone.status_code == 404
        assert "gpupool token list" in gone.json()["detail"]
        left = admin.get("/api/v1/tokens", params={"user": user}).json()
        assert [t["id"] for t in left] == [second["id"]]

        [admin_token] = admin.get("/api/v1/tokens", params={"user": "admin"}).json()
        last = admin.delete(f"/api/v1/tokens/{admin_token['id']}")
        assert last.status_code == 409
        assert "last admin token" in last.json()["detail"]
