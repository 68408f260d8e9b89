"""Allocation vs utilization over time, from the history store."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpupool.api.schemas import DeviceHistoryOut, HistoryOut, HistoryRange, ProjectSeries
from gpupool.server.errors import ERROR_RESPONSES
from gpupool.server.history import Bucket, read_with_unwritten
from gpupool.server.services import history
from gpupool.server.state import Caller, State

router = APIRouter(prefix="/api/v1", tags=["history"], responses=ERROR_RESPONSES)

RangeQuery = Annotated[
    HistoryRange,
    Query(alias="range", description="How far back from now, when start is not given."),
]
StartQuery = Annotated[
    float | None, Query(description="Epoch seconds; with end, an explicit window (zooming).")
]
EndQuery = Annotated[float | None, Query(description="Epoch seconds; default now.")]


@router.get("/history")
def get_history(
    state: State,
    caller: Caller,
    range_: RangeQuery = HistoryRange.DAY,
    start: StartQuery = None,
    end: EndQuery = None,
    project_series: Annotated[
        list[ProjectSeries] | None,
        Query(
            description="Each project's series to answer (repeat the parameter; default all "
            "three); the others are null. A chart of allocation alone asks for `allocated`."
        ),
    ] = None,
) -> HistoryOut:
    """The cluster's capacity, allocation, utilization and pending work, and each project's
    allocation, utilization and demand, averaged per step (at most about 360 points). A
    researcher sees their projects by name and every other project summed into one series,
    "other projects"."""
    now = state.clock.now_s()
    window = history.window(range_, start, end, now)
    series = frozenset(project_series) if project_series else history.ALL_SERIES

    def read(unwritten: list[Bucket]) -> HistoryOut:
        with state.read() as session:
            return history.history(session, window, now, caller, unwritten, series)

    return read_with_unwritten(state.loop.history, read, devices=False)


@router.get("/history/devices")
def get_device_history(
    state: State,
    caller: Caller,
    range_: RangeQuery = HistoryRange.DAY,
    start: StartQuery = None,
    end: EndQuery = None,
) -> DeviceHistoryOut:
    """Each device over the window: average allocation, average utilization where measured,
    peak memory used and allocated GPU-hours (no project names: everyone may read it)."""
    now = state.clock.now_s()
    window = history.window(range_, start, end, now)

    def read(unwritten: list[Bucket]) -> DeviceHistoryOut:
        with state.read() as session:
            return history.devices(session, window, now, unwritten)

    return read_with_unwritten(state.loop.history, read)
