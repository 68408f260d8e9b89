"""`gpupool events`: the event log, the scheduler's decisions and the admins' changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpupool.cli.common import JsonOption, clock, connect, show, table

if TYPE_CHECKING:
    from gpupool.api.schemas import EventOut

__all__ = ["events"]


def event_table(rows: Sequence[EventOut]) -> Table:
    view = table("ID>", "TIME", "KIND", "PROJECT", "WORKLOAD", "BY", "MESSAGE")
    for e in rows:
        view.add_row(
            str(e.id),
            clock(e.at),
            e.kind,
            e.project or "-",
            e.workload or "-",
            e.actor or "-",
            escape(e.message),
        )
    return view


def events(
    project: Annotated[
        str | None,
        typer.Option(
            "--project", "-p", metavar="NAME", help="Only this project's (default: all you see)."
        ),
    ] = None,
    workload: Annotated[
        str | None, typer.Option("--workload", "-w", metavar="NAME", help="Only this workload's.")
    ] = None,
    after: Annotated[
        int, typer.Option(min=0, metavar="ID", help="Only events after this id (to page on).")
    ] = 0,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many.")] = 100,
    json_output: JsonOption = False,
) -> None:
    """The event log, oldest first: what the scheduler decided and who changed what. Admins
    see every event (the changes admins made too); a researcher, their projects' events."""
    with connect() as client:
        rows = client.events(project, workload, after_id=after or None, limit=limit)
    show(rows, json_output, lambda: event_table(rows))
