"""The FastAPI application: `create_app(settings)` wires database, executor, loop and routes."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

import gpupool
from gpupool.api.limits import MAX_BODY_BYTES
from gpupool.api.schemas import ErrorDetail, ErrorOut, validation_error_out
from gpupool.clock import Clock, SystemClock
from gpupool.executors.base import Executor
from gpupool.executors.gpus import open_backend
from gpupool.executors.isolation import choose_isolation
from gpupool.executors.kubernetes.dcgm import UtilizationSource
from gpupool.executors.kubernetes.leader import LeaderElector
from gpupool.executors.kubernetes.settings import KubeSettings
from gpupool.executors.local import LocalExecutor
from gpupool.executors.simulated import SimulatedExecutor, parse_simulated_nodes
from gpupool.private import private_dir, tighten_file, touch_private
from gpupool.server import dbfaults, migrate, openapi_links, readiness
from gpupool.server.auth import TokenCache
from gpupool.server.batcher import SubmitBatcher
from gpupool.server.body_limit import BodyLimit, BodyTooLargeError
from gpupool.server.db import make_engine, make_sessionmakers
from gpupool.server.errors import ApiError
from gpupool.server.metrics import ServerMetrics
from gpupool.server.routers import cluster, history, projects, session, web, workloads
from gpupool.server.scheduler import SchedulingLoop
from gpupool.server.services.users import bootstrap_admin
from gpupool.server.settings import ServerSettings
from gpupool.server.state import ServerState

Announce = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def default_executor(settings: ServerSettings, clock: Clock, announce: Announce) -> Executor:
    """The executor `settings` ask for; `ValueError` with the fix for a bad choice."""
    private_dir(settings.data_dir)
    if settings.executor == "simulated":
        nodes = parse_simulated_nodes(settings.simulated_nodes or "0x0")
        return SimulatedExecutor(nodes, clock, journal_path=settings.data_dir / "simulated.jsonl")
    if settings.executor == "local":
        report_dir = settings.data_dir / "gpu-reports" if settings.fake_gpus else None
        if report_dir is not None:
            report_dir.mkdir(parents=True, exist_ok=True)
        backend, note = open_backend(settings.fake_gpus, report_dir)
        if note is not None:
            announce(
                f"gpupool: no NVIDIA GPU found ({note}); running with no GPUs: "
                "use --fake-gpus 4x80G to declare some"
            )
        isolation, warning = choose_isolation(
            settings.isolation,
            settings.data_dir,
            settings.task_roots,
            settings.task_max_processes,
        )
        if warning is not None:
            announce(warning)
        return LocalExecutor(
            settings.data_dir, backend, clock, report=announce, isolation=isolation
        )
    if settings.executor == "kubernetes":
        from gpupool.executors.kubernetes.executor import (
            KubernetesExecutor,
            KubernetesUnavailableError,
        )

        kube = settings.kube or KubeSettings()
        try:
            return KubernetesExecutor(
                kube,
                clock,
                utilization=utilization_source(kube, announce),
                report=announce,
            )
        except KubernetesUnavailableError as error:
            raise ValueError(str(error)) from None
    raise ValueError(
        f"executor {settings.executor!r} is not known: use local (processes on this machine), "
        "simulated (declared nodes) or kubernetes (a cluster's nodes and pods)"
    )


def leader_elector(
    settings: ServerSettings, executor: Executor, announce: Announce
) -> LeaderElector | None:
    """With --leader-elect on Kubernetes: the Lease that decides which replica schedules. The
    executor acts (binds, evicts, creates) only while this replica leads."""
    kube = settings.kube
    if settings.executor != "kubernetes" or kube is None or not kube.leader_election:
        return None
    from gpupool.executors.kubernetes.client import sync_client
    from gpupool.executors.kubernetes.executor import KubernetesExecutor
    from gpupool.executors.kubernetes.leader import KubeLeaseStore

    store = KubeLeaseStore(sync_client(kube), kube.system_namespace, kube.lease_name)
    elector = LeaderElector(
        store,
        kube.identity,
        lease_duration_s=kube.lease_duration_s,
        renew_deadline_s=kube.renew_deadline_s,
        retry_period_s=kube.retry_period_s,
        report=announce,
    )
    if isinstance(executor, KubernetesExecutor):
        executor.set_leader_check(elector.is_leader)
    return elector


def utilization_source(kube: KubeSettings, announce: Announce) -> UtilizationSource | None:
    """DCGM metrics through Prometheus when a URL is given; else none (utilization unknown)."""
    if kube.prometheus_url is None:
        return None
    from gpupool.executors.kubernetes.dcgm import PrometheusUtilization

    return PrometheusUtilization(kube.prometheus_url, warn=announce)


def secure_data_dir(settings: ServerSettings, announce: Announce) -> None:
    """The data directory 0700; the SQLite database (created here, so its -wal and -shm
    files take its mode), the admin token and the server log 0600. What an older version left
    open to other users is tightened, and the log says so."""
    old = private_dir(settings.data_dir)
    if old is not None:
        announce(
            f"gpupool: the data directory {settings.data_dir} was open to other users "
            f"(mode {old:04o}): made it 0700"
        )
    files = [settings.data_dir / "admin-token", settings.data_dir / "server.log"]
    url = make_url(settings.effective_database_url)
    database = url.database if url.get_backend_name() == "sqlite" else None
    if database and database != ":memory:" and not database.startswith("file:"):
        path = Path(database)
        if path.parent.is_dir():
            touch_private(path)
        files += [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    for file in files:
        old = tighten_file(file)
        if old is not None:
            announce(f"gpupool: {file} was readable by other users (mode {old:04o}): made it 0600")


def create_app(
    settings: ServerSettings,
    executor: Executor | None = None,
    clock: Clock | None = None,
    announce: Announce = _stderr,
) -> FastAPI:
    """The app. Nothing starts until its lifespan: migrations, first admin, the loop."""
    clock = clock or SystemClock()
    secure_data_dir(settings, announce)
    engine = make_engine(
        settings.effective_database_url,
        connect_timeout_s=settings.database_connect_timeout_s,
        statement_timeout_s=settings.database_statement_timeout_s,
    )
    writer, reader = make_sessionmakers(engine)
    executor = executor or default_executor(settings, clock, announce)
    metrics = ServerMetrics()

    def report(error: BaseException) -> None:
        announce(f"scheduling loop: {type(error).__name__}: {error}")

    elector = leader_elector(settings, executor, announce)
    loop = SchedulingLoop(
        writer,
        executor,
        clock,
        settings.scheduler,
        metrics,
        interval_s=settings.cycle_interval_s,
        min_gap_s=settings.min_cycle_gap_s,
        on_error=report,
        reader=reader,
        is_leader=elector.is_leader if elector is not None else None,
        announce=lambda message: announce(f"scheduling loop: {message}"),
    )
    submitter = SubmitBatcher(writer, clock, loop.wake)
    state = ServerState(
        settings, engine, writer, reader, executor, clock, metrics, loop, TokenCache(), submitter
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        migrate.upgrade(engine)
        with writer.begin() as session:
            migrate.lock_for_startup(session.connection())
            token_file = bootstrap_admin(session, settings.data_dir, clock.now_s())
        if token_file is not None:
            announce(
                f"gpupool: first start: created user 'admin'; its token is in {token_file}\n"
                f"  log in with: gpupool login --server http://{settings.host}:{settings.port} "
                f"--token-file {token_file}"
            )
        submitter.start()
        if elector is not None:
            elector.start()
        if settings.run_scheduler:
            loop.start()
        try:
            yield
        finally:
            submitter.stop()
            loop.stop()
            if elector is not None:
                elector.stop(release=True)
            if settings.stop_tasks_on_shutdown:
                executor.stop_all(timeout_s=30)
                loop.collect_exits()
            executor.close()
            engine.dispose()

    app = FastAPI(
        title="gpupool",
        version=gpupool.__version__,
        description="Pool the GPUs of many machines and share them by policy.",
        lifespan=lifespan,
    )
    app.state.gpupool = state
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    app.include_router(cluster.router)
    app.include_router(cluster.api)
    app.include_router(projects.router)
    app.include_router(workloads.router)
    app.include_router(history.router)
    app.include_router(session.router)
    app.include_router(web.router)
    app.include_router(readiness.router)
    _error_handlers(app)
    dbfaults.install_handlers(app)
    openapi_links.install(app)
    return app


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, error: ApiError) -> JSONResponse:
        errors = [ErrorDetail(field=error.field, message=error.detail)] if error.field else []
        body = ErrorOut(detail=error.detail, errors=errors)
        return JSONResponse(body.model_dump(), status_code=error.status)

    @app.exception_handler(BodyTooLargeError)
    async def _too_large(request: Request, error: BodyTooLargeError) -> JSONResponse:
        return JSONResponse(ErrorOut(detail=error.detail).model_dump(), status_code=413)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        body = validation_error_out(error.errors())
        return JSONResponse(body.model_dump(), status_code=422)

    @app.exception_handler(IntegrityError)
    async def _integrity(request: Request, error: IntegrityError) -> JSONResponse:
        body = ErrorOut(
            detail="the change conflicts with existing data (a name already taken, or a row "
            "changed meanwhile): check the names and try again"
        )
        return JSONResponse(body.model_dump(), status_code=409)
