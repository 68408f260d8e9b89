"""The history store's tables in the database: their resolutions and retention, and adding
buckets' sums into their rows (`write`, `apply_retention`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, delete
from sqlalchemy.orm import Session

from gpupool.server import upsert
from gpupool.server.db import ClusterHistoryRow, DeviceHistoryRow, ProjectHistoryRow
from gpupool.server.history_sums import Bucket, Sums, bucket_of

MINUTE_S = 60
HOUR_S = 3600
MINUTE_RETENTION_S = 7 * 86_400
HOUR_RETENTION_S = 365 * 86_400

CLUSTER = cast(Table, ClusterHistoryRow.__table__)
PROJECTS = cast(Table, ProjectHistoryRow.__table__)
DEVICES = cast(Table, DeviceHistoryRow.__table__)


_COMMON = ("samples", "allocated_milli_sum", "utilized_milli_sum", "utilized_samples")
"""The sums every history table has, in the order `_common` gives them."""


def _common(sums: Sums) -> tuple[int, int, int, int]:
    return (sums.samples, sums.allocated, sums.utilized, sums.utilized_samples)


def write(session: Session, minutes: Sequence[Bucket], now_s: float) -> None:
    """Add `minutes` into the per-minute rows and into their hours' rows, then drop rows past
    their retention (once per call)."""
    if not minutes:
        return
    hours: dict[float, Bucket] = {}
    for minute in minutes:
        hour = bucket_of(minute.bucket_s, HOUR_S)
        hours.setdefault(hour, Bucket(hour)).merge(minute)
    for resolution_s, buckets in ((MINUTE_S, list(minutes)), (HOUR_S, list(hours.values()))):
        _add_rows(
            session,
            CLUSTER,
            (),
            (*_COMMON, "capacity_milli_sum", "pending_workloads_sum", "pending_milli_sum"),
            resolution_s,
            [
                (
                    b.bucket_s,
                    (),
                    (
                        *_common(b.cluster),
                        b.cluster.capacity,
                        b.cluster.pending_workloads,
                        b.cluster.pending_milli,
                    ),
                )
                for b in buckets
                if b.cluster.samples
            ],
        )
        _add_rows(
            session,
            PROJECTS,
            ("project_id",),
            (*_COMMON, "requested_milli_sum"),
            resolution_s,
            [
                (b.bucket_s, (project_id,), (*_common(s), s.requested))
                for b in buckets
                for project_id, s in b.projects.items()
            ],
        )
        _add_rows(
            session,
            DEVICES,
            ("node", "device_index"),
            _COMMON,
            resolution_s,
            [
                (b.bucket_s, key, (*_common(s), s.memory_max_mib))
                for b in buckets
                for key, s in b.devices.items()
            ],
            peaks=("memory_used_max_mib",),
        )
    apply_retention(session, now_s)


def apply_retention(session: Session, now_s: float) -> None:
    for table in (CLUSTER, PROJECTS, DEVICES):
        for resolution_s, keep_s in ((MINUTE_S, MINUTE_RETENTION_S), (HOUR_S, HOUR_RETENTION_S)):
            session.execute(
                delete(table).where(
                    table.c.resolution_s == resolution_s, table.c.bucket_s < now_s - keep_s
                )
            )


def _add_rows(
    session: Session,
    table: Table,
    key_columns: tuple[str, ...],
    sums: tuple[str, ...],
    resolution_s: int,
    rows: list[tuple[float, tuple[Any, ...], tuple[int, ...]]],
    peaks: tuple[str, ...] = (),
) -> None:
    """Insert each row (bucket, key, values of `sums` then `peaks`), or add its sums to the row
    already there (the larger of each peak), in one statement (`upsert.add_rows`: at 10,000
    nodes a minute is 80,000 device rows)."""
    if not rows:
        return
    upsert.add_rows(
        session.connection(),
        table,
        [(resolution_s, bucket, *key, *values) for bucket, key, values in rows],
        keys=("resolution_s", "bucket_s", *key_columns),
        sums=sums,
        peaks=peaks,
    )
