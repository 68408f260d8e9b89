"""The API's enums that command-line signatures name: in a module of their own, with nothing
but `enum` (and the core's lifecycle, itself plain enums) to import, so that `gpupool --help`
and friends need not load pydantic and the wire models (`gpupool.api.schemas` re-exports them).

`WorkloadStatus` is the core's (`gpupool.core.lifecycle`): one enum, with its transitions."""

from __future__ import annotations

import enum

from gpupool.core.lifecycle import WorkloadStatus as WorkloadStatus

__all__ = ["Role", "WorkloadStatus", "WorkloadType"]


class Role(enum.StrEnum):
    ADMIN = "admin"
    RESEARCHER = "researcher"


class WorkloadType(enum.StrEnum):
    TRAIN = "train"
    INTERACTIVE = "interactive"
    INFERENCE = "inference"
