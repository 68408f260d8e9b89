"""`gpupool server`: the control-plane service."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpupool.executors.isolation import DEFAULT_MAX_PROCESSES


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
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on; other than loopback needs --tls-cert/--tls-key or "
            "--insecure."
        ),
    ] = "127.0.0.1",
    tls_cert: Annotated[
        Path | None, typer.Option(help="Serve HTTPS with this PEM certificate (chain).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The certificate's PEM private key.")] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            help="Serve plain HTTP on a non-loopback --host (TLS ends in front of gpupool)."
        ),
    ] = False,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    executor: Annotated[
        str,
        typer.Option(
            help="simulated (declared nodes; tasks only pretend), local (processes) or "
            "kubernetes (a cluster's nodes and pods)."
        ),
    ] = "simulated",
    fake_gpus: Annotated[
        str | None,
        typer.Option(help="Local executor: declare devices (4x80G) instead of using NVML."),
    ] = None,
    isolation: Annotated[
        str,
        typer.Option(
            help="Local executor: bubblewrap (each task sandboxed as its project's account; "
            "needs root and bwrap), none (tasks run as this user; a warning) or auto "
            "(bubblewrap where it works). docs/security.md#tasks",
        ),
    ] = "auto",
    task_root: Annotated[
        list[Path] | None,
        typer.Option(
            help="Local executor, isolated: a workload's working_dir may lie under this "
            "directory (repeatable; default: none, tasks run in their own directory).",
        ),
    ] = None,
    task_max_processes: Annotated[
        int,
        typer.Option(help="Local executor, isolated: processes a project's tasks may have."),
    ] = DEFAULT_MAX_PROCESSES,
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
    placement: Annotated[
        str,
        typer.Option(
            envvar="GPUPOOL_PLACEMENT",
            help="Placement policy: default (FGD with stranding and planned device fills), "
            "fgd, binpack, spread, best-fit, ... (docs/packing.md).",
        ),
    ] = "default",
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = False,
    metrics_public: Annotated[
        bool,
        typer.Option(
            "--metrics-public",
            help="Serve /metrics without a token (for Prometheus); by default it needs one.",
        ),
    ] = False,
    db_connect_timeout: Annotated[
        float,
        typer.Option(help="Seconds a new PostgreSQL connection may take before it fails."),
    ] = 5.0,
    db_statement_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds a PostgreSQL statement may run (SQLite: a write waits for the lock); "
            "past it the API answers 503 with Retry-After."
        ),
    ] = 30.0,
    kubernetes: Annotated[
        bool,
        typer.Option(
            "--kubernetes",
            help="Schedule a Kubernetes cluster's GPU pods (same as --executor kubernetes).",
            rich_help_panel="Kubernetes",
        ),
    ] = False,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="Kubeconfig file; default: in-cluster, else $KUBECONFIG or ~/.kube/config.",
            rich_help_panel="Kubernetes",
        ),
    ] = None,
    kube_context: Annotated[
        str | None, typer.Option(help="Kubeconfig context.", rich_help_panel="Kubernetes")
    ] = None,
    namespace_template: Annotated[
        str,
        typer.Option(
            help="A project's namespace; an existing namespace joins project P when labelled "
            "gpupool.dev/project=P.",
            rich_help_panel="Kubernetes",
        ),
    ] = "gpupool-{project}",
    default_image: Annotated[
        str,
        typer.Option(
            help="Image of workloads submitted without --image.", rich_help_panel="Kubernetes"
        ),
    ] = "python:3.12-slim",
    reservation_image: Annotated[
        str,
        typer.Option(
            help="Image of the reservation pods (gpupool's own image).",
            rich_help_panel="Kubernetes",
        ),
    ] = "gpupool/gpupool:latest",
    system_namespace: Annotated[
        str,
        typer.Option(
            help="gpupool's namespace: reservation pods and the leader-election lease.",
            rich_help_panel="Kubernetes",
        ),
    ] = "gpupool-system",
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            help="Prometheus with NVIDIA DCGM exporter metrics (GPU utilization); without it "
            "utilization is unknown.",
            rich_help_panel="Kubernetes",
        ),
    ] = None,
    kube_node_selector: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=VALUE",
            help="Only nodes with this label are gpupool's (repeatable; default: all GPU nodes).",
            rich_help_panel="Kubernetes",
        ),
    ] = None,
    leader_elect: Annotated[
        bool,
        typer.Option(
            help="Run as one of several replicas: only the holder of a Lease schedules "
            "(needs a shared PostgreSQL).",
            rich_help_panel="Kubernetes",
        ),
    ] = False,
) -> None:
    """Run the control-plane service: API, database and scheduling loop."""
    from gpupool.core.model import SchedulerSettings
    from gpupool.core.policies import canonical_name
    from gpupool.server.serve import serve  # FastAPI and SQLAlchemy load only for this command
    from gpupool.server.settings import ServerSettings

    if kubernetes:
        executor = "kubernetes"
    kube = None
    if executor == "kubernetes":
        from gpupool.executors.kubernetes.settings import KubeSettings

        selector = []
        for item in kube_node_selector or []:
            key, equals, value = item.partition("=")
            if not equals or not key:
                typer.secho(
                    f"error: --kube-node-selector takes KEY=VALUE (got {item!r})",
                    fg="red",
                    err=True,
                )
                raise typer.Exit(2)
            selector.append((key, value))
        kube = KubeSettings(
            node_selector=tuple(selector),
            kubeconfig=kubeconfig,
            context=kube_context,
            namespace_template=namespace_template,
            default_image=default_image,
            reservation_image=reservation_image,
            system_namespace=system_namespace,
            prometheus_url=prometheus_url,
            leader_election=leader_elect,
        )
    try:
        if "{project}" not in namespace_template:
            raise ValueError(
                f"--namespace-template {namespace_template!r} must contain {{project}}, like "
                "gpupool-{project}"
            )
        settings = ServerSettings(
            data_dir=data_dir.resolve(),
            database_url=database_url,
            host=host,
            port=port,
            tls_cert=tls_cert,
            tls_key=tls_key,
            insecure=insecure,
            cycle_interval_s=cycle_interval,
            executor=executor,
            simulated_nodes=simulated_nodes,
            fake_gpus=fake_gpus,
            isolation=isolation,
            task_roots=tuple(root.resolve() for root in task_root or ()),
            task_max_processes=task_max_processes,
            stop_tasks_on_shutdown=stop_tasks_on_exit,
            scheduler=SchedulerSettings(
                placement=canonical_name(placement),
                max_reclaim_attempts_per_cycle=max_reclaims_per_cycle,
            ),
            kube=kube,
            metrics_public=metrics_public,
            database_connect_timeout_s=db_connect_timeout,
            database_statement_timeout_s=db_statement_timeout,
        )
        serve(settings, access_log=access_log)
    except ValueError as error:
        typer.secho(f"error: {error}", fg="red", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    app.command("server")(server)
