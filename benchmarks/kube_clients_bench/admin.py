"""The parent's own calls to the API server: the namespace and node each client uses."""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any


class Admin:
    """The parent's own calls to the API server (urllib: no client library in this process)."""

    def __init__(self, server: str, token: str, ca_path: Path) -> None:
        self.server, self.token = server, token
        self.tls = ssl.create_default_context(cafile=str(ca_path))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            self.server + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=self.tls, timeout=60) as answer:
            return json.load(answer)

    def exists(self, path: str) -> bool:
        try:
            self.call("GET", path)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return False
            raise
        return True

    def wait(self, what: str, condition: Callable[[], bool], timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.2)

    def prepare(self, namespace: str, node: str) -> None:
        """A namespace (with its default service account) and a node no kubelet serves."""
        self.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        self.call("POST", "/api/v1/nodes", {"metadata": {"name": node}})
        self.wait(
            "the default service account",
            lambda: self.exists(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
        )

    def delete_pod(self, namespace: str, name: str) -> None:
        self.call(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0}
        )

    def remove(self, namespace: str, node: str) -> None:
        """Pods at once (no kubelet would ever confirm their end), the namespace, the node."""
        with contextlib.suppress(urllib.error.HTTPError):
            self.call("DELETE", f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": 0})
        with contextlib.suppress(urllib.error.HTTPError):
            self.call("DELETE", f"/api/v1/namespaces/{namespace}")
        path = f"/api/v1/namespaces/{namespace}"
        self.wait(f"namespace {namespace} to go", lambda: not self.exists(path))
        with contextlib.suppress(urllib.error.HTTPError):
            self.call("DELETE", f"/api/v1/nodes/{node}")
