"""Run the service with uvicorn: HTTPS with `--tls-cert/--tls-key`, else plain HTTP, which
only loopback gets without `--insecure` (tokens travel in every request)."""

from __future__ import annotations

import ipaddress

import uvicorn

from gpupool.server.app import create_app
from gpupool.server.settings import ServerSettings


def is_loopback(host: str) -> bool:
    """`127.0.0.1`, `::1`, `localhost`: reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def transport_problem(settings: ServerSettings) -> str | None:
    """Why the server must not start with these transport settings, or None."""
    if (settings.tls_cert is None) != (settings.tls_key is None):
        return "give both --tls-cert and --tls-key (the certificate and its private key)"
    for path in (settings.tls_cert, settings.tls_key):
        if path is not None and not path.is_file():
            return f"{path} is not a readable file: give the PEM file's path"
    if settings.tls_cert is None and not settings.insecure and not is_loopback(settings.host):
        return (
            f"--host {settings.host} would serve plain HTTP to other machines, and every request "
            "carries a token: give --tls-cert CERT.pem --tls-key KEY.pem, or --insecure when TLS "
            "ends in front of gpupool (an ingress, a service mesh), or listen on 127.0.0.1"
        )
    return None


def serve(settings: ServerSettings, access_log: bool = False) -> None:
    problem = transport_problem(settings)
    if problem is not None:
        raise ValueError(problem)
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=access_log,
        timeout_graceful_shutdown=10,
        ssl_certfile=None if settings.tls_cert is None else str(settings.tls_cert),
        ssl_keyfile=None if settings.tls_key is None else str(settings.tls_key),
    )
    uvicorn.Server(config).run()
