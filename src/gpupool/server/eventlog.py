"""Rows of the event log: what happened, to which project and workload (by id, never reused
for projects), and who did it. Readers decide who may see a row by its `project_id`."""

from __future__ import annotations

from sqlalchemy import insert
from sqlalchemy.orm import Session

from gpupool.server.db import EventRow

INSERT = insert(EventRow)


def event_row(
    at_s: float,
    kind: str,
    message: str,
    *,
    project: str | None = None,
    project_id: int | None = None,
    workload: str | None = None,
    workload_id: int | None = None,
    node: str | None = None,
    actor: str | None = None,
) -> dict[str, object]:
    """One row's values, for `session.execute(INSERT, [rows...])`."""
    return {
        "at": at_s,
        "kind": kind,
        "project": project,
        "project_id": project_id,
        "workload": workload,
        "workload_id": workload_id,
        "node": node,
        "actor": actor,
        "message": message,
    }


def add(
    session: Session,
    at_s: float,
    kind: str,
    message: str,
    *,
    project: str | None = None,
    project_id: int | None = None,
    workload: str | None = None,
    workload_id: int | None = None,
    node: str | None = None,
    actor: str | None = None,
) -> None:
    session.execute(
        INSERT,
        event_row(
            at_s,
            kind,
            message,
            project=project,
            project_id=project_id,
            workload=workload,
            workload_id=workload_id,
            node=node,
            actor=actor,
        ),
    )
