"""API bodies of departments and projects: quotas and limits, and a project as listed."""

from __future__ import annotations

from pydantic import Field, field_validator

from gpupool.api import limits
from gpupool.api.fields import Name, NonNeg, Priority, Quantity, QuotaAmount, _In, _Out
from gpupool.units import MAX_QUOTA, parse_gpu_quota, parse_memory_mib


def _gpu_quota(value: object) -> int:
    return parse_gpu_quota(value)


class AmountsIn(_In):
    """A quota or limit: `gpu` in GPUs as written (`4`, `2.5`), CPU in millicores, memory as
    `64G` or MiB."""

    gpu: float | Quantity | None = Field(default=None, examples=[4, 2.5])
    cpu_milli: QuotaAmount | None = None
    memory: Quantity | int | None = Field(default=None, examples=["64G"])

    _short = field_validator("gpu", "memory", mode="before")(limits.quantity_text)

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, value: float | str | None) -> float | str | None:
        if value is not None:
            parse_gpu_quota(value)
        return value

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            parse_memory_mib(value, MAX_QUOTA)
        return value

    @property
    def gpu_milli(self) -> int | None:
        return None if self.gpu is None else parse_gpu_quota(self.gpu)

    @property
    def memory_mib(self) -> int | None:
        return None if self.memory is None else parse_memory_mib(self.memory, MAX_QUOTA)


class Amounts(_Out):
    gpu_milli: int | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None


class DepartmentIn(_In):
    name: Name
    quota: AmountsIn = AmountsIn()
    over_quota_weight: NonNeg = 1
    limit: AmountsIn | None = None
    priority: Priority = 0


class ProjectIn(_In):
    name: Name
    department: Name | None = None
    quota: AmountsIn = AmountsIn()
    over_quota_weight: NonNeg = 1
    limit: AmountsIn | None = None
    priority: Priority = 0
    min_runtime_s: NonNeg = 0


class ProjectPatch(_In):
    """Fields to change; a field left out keeps its value. `limit: null` removes the limit."""

    quota: AmountsIn | None = None
    over_quota_weight: NonNeg | None = None
    limit: AmountsIn | None = None
    priority: Priority | None = None
    min_runtime_s: NonNeg | None = None


class ProjectOut(_Out):
    name: str
    kind: str
    """`department` or `project`."""
    department: str | None
    quota: Amounts
    over_quota_weight: int
    limit: Amounts | None
    priority: int
    min_runtime_s: int
    fair_share: Amounts | None = None
    """From the last scheduling cycle; null before the first."""
    holding: Amounts | None = None
    demand: Amounts | None = None
    warnings: list[str] = []
