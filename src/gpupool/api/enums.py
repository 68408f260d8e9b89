"""The API's enums that command-line signatures name: in a module of their own, with nothing
but `enum` to import, so that `gpupool --help` and friends need not load pydantic and the
wire models (`gpupool.api.schemas` re-exports them)."""

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
    """A task ended successfully; the others are finishing. Never restarted."""
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    DELETING = "deleting"
