"""The typed Python client of the gpupool HTTP API, and the CLI's config file.

`GpupoolClient` has one method per endpoint and returns the pydantic models of
`gpupool.api.schemas`; the request models and enums a caller builds are re-exported here. Every
error it raises is a `ClientError`: `ApiError` (the server's status and message),
`ServerUnreachable` or `WaitTimeout`. The guide is docs/python-client.md.
"""

from gpupool.api.schemas import (
    AmountsIn,
    DepartmentIn,
    ErrorDetail,
    LogChunk,
    NodeIn,
    ProjectIn,
    ProjectOut,
    ProjectPatch,
    Role,
    UserIn,
    UserOut,
    WorkloadDetail,
    WorkloadIn,
    WorkloadOut,
    WorkloadPage,
    WorkloadStatus,
    WorkloadType,
)
from gpupool.client.config import ClientConfig, ConfigError, NotLoggedInError, effective_config
from gpupool.client.http import (
    FINISHED,
    ApiError,
    ClientError,
    GpupoolClient,
    ServerUnreachable,
    WaitTimeout,
)

__all__ = [
    "FINISHED",
    "AmountsIn",
    "ApiError",
    "ClientConfig",
    "ClientError",
    "ConfigError",
    "DepartmentIn",
    "ErrorDetail",
    "GpupoolClient",
    "LogChunk",
    "NodeIn",
    "NotLoggedInError",
    "ProjectIn",
    "ProjectOut",
    "ProjectPatch",
    "Role",
    "ServerUnreachable",
    "UserIn",
    "UserOut",
    "WaitTimeout",
    "WorkloadDetail",
    "WorkloadIn",
    "WorkloadOut",
    "WorkloadPage",
    "WorkloadStatus",
    "WorkloadType",
    "effective_config",
]
