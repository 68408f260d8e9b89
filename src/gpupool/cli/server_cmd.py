"""`gpupool server`: the control-plane service."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpupool.core.model import SchedulerSettings
from gpupool.server.settings import ServerSettings


def server(
    data_dir: Annotated[
        Path, typer.Option(help="Database (SQLite), first admin token and executor state.")
    ] = Path(".gpupool"),
    database_url: Annotated[
        str | None,
        typer.Option(
            envvar="GPUPOOL_DATABASE_URL",
            help="SQLAlchemy URL, e.g. postgresql://user@host/db; default SQLite in DATA_DIR.",
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    executor: Annotated[
        str,
        typer.Option(help="simulated (declared nodes; tasks only pretend) or local (processes)."),
    ] = "simulated",
    fake_gpus: Annotated[
        str | None,
        typer.Option(help="Local executor: declare devices (4x80G) instead of using NVML."),
    ] = None,
    stop_tasks_on_exit: Annotated[
        bool,
        typer.Option(
            help="On SIGTERM stop every task (gpupool down); by default they keep running and "
            "the next start adopts them."
        ),
    ] = False,
    simulated_nodes: Annotated[
        str,
        typer.Option(
            help="Nodes of the simulated executor: NODESxGPUS[:MEMORY][:MODEL], comma-separated."
        ),
    ] = "4x8",
    cycle_interval: Annotated[
        float, typer.Option(help="Seconds between scheduling cycles when nothing changes.")
    ] = 1.0,
    max_reclaims_per_cycle: Annotated[
        int, typer.Option(help="Reclaim attempts per cycle (bounds one cycle's work).")
    ] = 1024,
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = False,
) -> None:
    """Run the control-plane service: API, database and scheduling loop."""
    from gpupool.server.serve import serve  # FastAPI and SQLAlchemy load only for this command

    try:
        settings = ServerSettings(
            data_dir=data_dir.resolve(),
            database_url=database_url,
            host=host,
            port=port,
            cycle_interval_s=cycle_interval,
            executor=executor,
            simulated_nodes=simulated_nodes,
            fake_gpus=fake_gpus,
            stop_tasks_on_shutdown=stop_tasks_on_exit,
            scheduler=SchedulerSettings(max_reclaim_attempts_per_cycle=max_reclaims_per_cycle),
        )
        serve(settings, access_log=access_log)
    except ValueError as error:
        typer.secho(f"error: {error}", fg="red", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    app.command("server")(server)
