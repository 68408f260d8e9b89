"""The typed HTTP client of the gpupool API and the CLI's config file."""

from gpupool.client.config import ClientConfig, ConfigError, NotLoggedInError
from gpupool.client.http import ApiError, ClientError, GpupoolClient, ServerUnreachable

__all__ = [
    "ApiError",
    "ClientConfig",
    "ClientError",
    "ConfigError",
    "GpupoolClient",
    "NotLoggedInError",
    "ServerUnreachable",
]
