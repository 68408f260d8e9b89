"""The cluster's machines and what they hold: `nodes`, and `top` (live allocation by project
and by node)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Group
from rich.table import Table

from gpupool.cli.common import JsonOption, age, connect, gpus, memory_text, show, stdout, table

if TYPE_CHECKING:
    from gpupool.api.schemas import TopOut

__all__ = ["nodes", "top", "top_view"]


def nodes(json_output: JsonOption = False) -> None:
    """Nodes: GPUs, allocated, model and state."""
    with connect() as client:
        rows = client.nodes()

    def render() -> Table:
        view = table("NODE", "STATE", "GPUS>", "ALLOCATED>", "MODEL", "MEMORY/GPU>", "EXECUTOR")
        for n in rows:
            memory = memory_text(n.gpu_memory_mib)
            model = n.gpu_model or "-"
            allocated = gpus(n.allocated_gpu_milli)
            view.add_row(n.name, n.state, str(n.gpu_count), allocated, model, memory, n.executor)
        return view

    show(rows, json_output, render)


def top(
    watch_s: Annotated[
        float | None,
        typer.Option("--watch", min=0.1, metavar="SECONDS", help="Refresh every SECONDS."),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Live GPU allocation by project and by node; --watch refreshes until Ctrl-C."""
    with connect() as client:
        snapshot = client.top()
        if watch_s is None:
            show(snapshot, json_output, lambda: top_view(snapshot))
        elif json_output:  # one JSON document per line
            while True:
                typer.echo(snapshot.model_dump_json())
                time.sleep(watch_s)
                snapshot = client.top()
        else:
            from rich.live import Live

            with Live(top_view(snapshot), console=stdout(), auto_refresh=False) as live:
                while True:
                    time.sleep(watch_s)
                    live.update(top_view(client.top()), refresh=True)


def top_view(top: TopOut) -> Group:
    share = 100 * top.allocated_gpu_milli / top.capacity_gpu_milli if top.capacity_gpu_milli else 0
    cycle = "no scheduling cycle yet"
    if top.last_cycle_at is not None:
        cycle = f"last cycle {age(top.last_cycle_at)} ago, {top.last_cycle_ms or 0:.0f} ms"
    header = (
        f"[bold]{gpus(top.allocated_gpu_milli)} of {gpus(top.capacity_gpu_milli)} GPUs "
        f"allocated ({share:.0f}%)[/]; {cycle}"
    )
    projects = table(
        "PROJECT", "QUOTA>", "FAIR SHARE>", "ALLOCATED>", "UTILIZED 5m>", "REQUESTED>",
        "RUNNING>", "PENDING>",
        title="By project (GPUs)",
    )  # fmt: skip
    for p in top.projects:
        projects.add_row(
            p.name,
            gpus(p.quota_gpu_milli),
            gpus(p.fair_share_gpu_milli),
            gpus(p.allocated_gpu_milli),
            gpus(p.utilized_gpu_milli),
            gpus(p.requested_gpu_milli),
            str(p.running),
            str(p.pending),
        )
    nodes = table(
        "NODE", "GPUS>", "ALLOCATED>", "DEVICES (index:allocated, utilization 5m)",
        title="By node",
    )  # fmt: skip
    for n in top.nodes:
        devices = " ".join(
            f"{d.index}:{gpus(d.allocated_milli)}"
            + (f",{d.utilization_percent}%" if d.utilization_percent is not None else "")
            for d in n.devices
        )
        nodes.add_row(n.name, str(n.gpu_count), gpus(n.allocated_gpu_milli), devices)
    return Group(header, projects, nodes)
