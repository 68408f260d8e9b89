"""Run the service with uvicorn."""

from __future__ import annotations

import uvicorn

from gpupool.server.app import create_app
from gpupool.server.settings import ServerSettings


def serve(settings: ServerSettings, access_log: bool = False) -> None:
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=access_log,
        timeout_graceful_shutdown=10,
    )
    uvicorn.Server(config).run()
