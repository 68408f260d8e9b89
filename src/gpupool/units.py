"""Parsing of user-written amounts into the core's integer units, once, at the edge.

Users write GPU amounts the way they think of them (`2`, `0.5`); inside gpupool every GPU amount
is an integer in milli-GPU (1000 = one device) so that no float comparison ever decides
admission. The conversion goes through `Decimal(str(value))`: `0.1` becomes exactly 100 milli,
not 100.00000000000000555.

Every function raises `ValueError` with a message that says what was wrong and how to fix it; the
callers (scenario loader, API) add the file, line and key.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from gpupool.core.model import MILLI_PER_GPU, GpuRequest

__all__ = [
    "GpuAmount",
    "format_gpu_milli",
    "parse_gpu",
    "parse_gpu_limit",
    "parse_gpu_quota",
    "parse_memory_mib",
]

_MILLI = Decimal(MILLI_PER_GPU)

MAX_AMOUNT = 2**31 - 1
"""The largest amount in milli-GPU or MiB of one task or node: what the service's database
stores there (32-bit integer columns on PostgreSQL). Larger ones are refused here, with a
message, rather than by the database with an error."""

MAX_QUOTA = 2**53 - 1
"""The largest quota or limit in milli-GPU, millicores or MiB. A department's sums its nodes
(10,000 nodes of 1 TiB are 10^10 MiB, past `MAX_AMOUNT`), so these are 64-bit columns; 2^53 - 1
is the largest integer a browser reads exactly from JSON."""


@dataclass(frozen=True, slots=True)
class GpuAmount:
    """A per-task GPU request: either `devices` whole devices, or `milli` of one device.

    Exactly one of the two shapes holds: `devices >= 1 and milli == devices * 1000`, or
    `devices == 0 and 0 < milli < 1000`.
    """

    devices: int
    milli: int

    @staticmethod
    def whole(devices: int) -> GpuAmount:
        return GpuAmount(devices=devices, milli=devices * MILLI_PER_GPU)

    @staticmethod
    def fraction(milli: int) -> GpuAmount:
        return GpuAmount(devices=0, milli=milli)

    @property
    def is_whole(self) -> bool:
        return self.devices > 0

    def to_request(self, limit_milli: int | None = None) -> GpuRequest:
        """The core's request for one task; `limit_milli` (dynamic fraction) only for fractions."""
        if self.is_whole:
            if limit_milli is not None:
                raise ValueError("gpu_limit applies to a fractional gpu only (like gpu: 0.5)")
            return GpuRequest.whole(self.devices)
        return GpuRequest.fraction(self.milli, limit_milli)


def _to_decimal(value: object, what: str, example: str) -> Decimal:
    """`value` as an exact Decimal; bools, non-numbers, NaN and infinities are rejected."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ValueError(f"{what} must be a number like {example} (got {_show(value)})")
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"{what} must be a number like {example} (got {_show(value)})") from None
    if not number.is_finite():
        raise ValueError(f"{what} must be a finite number like {example} (got {_show(value)})")
    return number


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, int | float | Decimal):
        return str(value)
    return type(value).__name__


def _plain(number: Decimal) -> str:
    """`1.50` -> `1.5`, `2.0` -> `2`, `1E+1` -> `10`: how a user would write it."""
    return format(number.normalize(), "f")


def _milli_exact(number: Decimal, what: str) -> int:
    scaled = number * _MILLI
    if scaled != scaled.to_integral_value():
        raise ValueError(
            f"{what} must be a whole number of milli-GPU (1/1000 of a device), "
            f"so at most 3 decimals (got {_plain(number)})"
        )
    return int(scaled)


def parse_gpu(value: object) -> GpuAmount:
    """A per-task GPU request: an integer >= 1 (whole devices) or a fraction 0 < x < 1.

    >>> parse_gpu(2)
    GpuAmount(devices=2, milli=2000)
    >>> parse_gpu(0.5)
    GpuAmount(devices=0, milli=500)
    """
    number = _to_decimal(value, "gpu", "1, 2 or 0.5")
    if number <= 0:
        raise ValueError(
            f"gpu must be more than 0 (got {_plain(number)}): use a whole number of devices "
            "like 1 or 2, or a fraction of one like 0.5"
        )
    if number >= 1:
        if number != number.to_integral_value():
            low = int(number)
            raise ValueError(
                f"a fraction must be between 0 and 1 (got {_plain(number)}): a task takes "
                f"either whole GPUs or a fraction of one: use gpu: {low} or gpu: {low + 1}, "
                "or split into tasks"
            )
        if number * _MILLI > MAX_AMOUNT:
            raise ValueError(
                f"gpu must be at most {MAX_AMOUNT // MILLI_PER_GPU} devices per task "
                f"(got {_plain(number)})"
            )
        return GpuAmount.whole(int(number))
    return GpuAmount.fraction(_milli_exact(number, "a fractional gpu"))


def parse_gpu_limit(value: object, request: GpuAmount) -> int:
    """The dynamic-fraction limit for a fractional `request`, in milli: request <= limit <= 1."""
    if request.is_whole:
        raise ValueError(
            "gpu_limit applies to a fractional gpu only (like gpu: 0.25 with gpu_limit: 0.8); "
            "a whole-GPU task already has its devices to itself"
        )
    number = _to_decimal(value, "gpu_limit", "0.8 or 1")
    if number <= 0 or number > 1:
        raise ValueError(
            f"gpu_limit must be more than 0 and at most 1 device (got {_plain(number)})"
        )
    limit = _milli_exact(number, "gpu_limit")
    if limit < request.milli:
        raise ValueError(
            f"gpu_limit ({_plain(number)}) must be at least the request "
            f"(gpu: {format_gpu_milli(request.milli)}): the request is guaranteed, the limit is "
            "what the task may use on top while it is idle"
        )
    return limit


def parse_gpu_quota(value: object) -> int:
    """A GPU amount for a quota, limit or share, in milli: >= 0, may be fractional (`2.5`)."""
    number = _to_decimal(value, "gpu", "4 or 2.5")
    if number < 0:
        raise ValueError(f"gpu must be 0 or more (got {_plain(number)})")
    if number * _MILLI > MAX_QUOTA:
        raise ValueError(
            f"gpu must be at most {format_gpu_milli(MAX_QUOTA)} (got {_plain(number)})"
        )
    return _milli_exact(number, "gpu")


def format_gpu_milli(milli: int) -> str:
    """Milli-GPU as a user writes GPUs: 2000 -> `2`, 500 -> `0.5`, 2250 -> `2.25`."""
    return _plain(Decimal(milli) / _MILLI)


_MEMORY_UNITS_MIB = {"M": 1, "MI": 1, "MIB": 1, "G": 1024, "GI": 1024, "GIB": 1024, "T": 1024**2}


def parse_memory_mib(value: object, maximum: int = MAX_AMOUNT) -> int:
    """A memory amount in MiB: `8G`, `8Gi`, `512M`, `81920` (a bare number is MiB), at most
    `maximum` (a quota's: `MAX_QUOTA`).

    >>> parse_memory_mib("8G")
    8192
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"memory must be like 8G, 512M or 81920 (MiB) (got {_show(value)})")
    text = str(value).strip().upper().replace(" ", "")
    digits = text.rstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = text[len(digits) :] or "M"
    if unit not in _MEMORY_UNITS_MIB:
        raise ValueError(
            f"memory unit {unit!r} is not known (got {_show(value)}): write 8G, 8Gi, 512M or "
            "a number of MiB"
        )
    number = _to_decimal(digits, "memory", "8G or 512M") if digits else Decimal(-1)
    mib = number * _MEMORY_UNITS_MIB[unit]
    if mib <= 0 or mib != mib.to_integral_value():
        raise ValueError(
            f"memory must be a positive whole number of MiB (got {_show(value)}): "
            "write 8G, 1.5G or 512M"
        )
    if mib > maximum:
        raise ValueError(
            f"memory must be at most {maximum} MiB, about {maximum // 1024**2}T "
            f"(got {_show(value)})"
        )
    return int(mib)
