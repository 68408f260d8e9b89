"""The API's enums that command signatures name, light to import.

Typer reads every command's signature at each start of the CLI, so a type named there must not
load `gpupool.api.schemas` (pydantic, about a quarter of a second). These mirror the API's enums
value for value (tests/client/test_cli_startup.py checks it); a command turns its argument into
the API's enum (`schemas.Role(role)`) where it builds a request.
"""

from __future__ import annotations

import enum

__all__ = ["Role", "WorkloadStatus", "WorkloadType"]


class Role(enum.StrEnum):
    ADMIN = "admin"
    RESEARCHER = "researcher"


class WorkloadType(enum.StrEnum):
    TRAIN = "train"
    INTERACTIVE = "interactive"
    INFERENCE = "inference"


class WorkloadStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETING = "completing"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    DELETING = "deleting"
