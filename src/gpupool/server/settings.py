"""How a server instance is set up: where its data lives, which database, which executor."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpupool.core.model import SchedulerSettings
from gpupool.executors.isolation import DEFAULT_MAX_PROCESSES
from gpupool.executors.kubernetes.settings import KubeSettings


@dataclass(frozen=True, slots=True)
class ServerSettings:
    data_dir: Path
    """Holds the SQLite database, the first admin's token and executor state."""
    database_url: str | None = None
    """SQLAlchemy URL; None means SQLite at `data_dir/gpupool.db`."""
    host: str = "127.0.0.1"
    port: int = 8000
    tls_cert: Path | None = None
    """PEM certificate (chain) to serve HTTPS with; with `tls_key`."""
    tls_key: Path | None = None
    insecure: bool = False
    """Serve plain HTTP on an address other than loopback (TLS ends in front of gpupool)."""
    cycle_interval_s: float = 1.0
    """Longest time between scheduling cycles; submissions and changes wake the loop sooner."""
    min_cycle_gap_s: float = 0.05
    """Shortest time between cycles, so a burst of submissions is scheduled in batches."""
    executor: str = "simulated"
    """`simulated` (declared nodes, tasks only pretend), `local` (processes on this host) or
    `kubernetes` (a cluster's nodes and pods)."""
    kube: KubeSettings | None = None
    """The cluster, when `executor` is `kubernetes`."""
    simulated_nodes: str | None = "4x8"
    """Nodes of the simulated executor (`NODESxGPUS[:MEMORY][:MODEL]`); None for none."""
    fake_gpus: str | None = None
    """Local executor: declared devices (`4x80G`) instead of the machine's (NVML)."""
    isolation: str = "auto"
    """Local executor: `bubblewrap` (each task sandboxed as its project's account), `none` (as
    the server's user, with a warning) or `auto` (bubblewrap where it works)."""
    task_roots: tuple[Path, ...] = ()
    """Local executor, isolated: directories under which a workload's `working_dir` may lie."""
    task_max_processes: int = DEFAULT_MAX_PROCESSES
    """Local executor, isolated: processes one project's tasks may have at once."""
    stop_tasks_on_shutdown: bool = False
    """On a clean shutdown (SIGTERM, `gpupool down`) stop every task; a killed server leaves
    them running and adopts them when it starts again."""
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    run_scheduler: bool = True
    """False serves the API only (tests of the API alone, read replicas)."""
    metrics_public: bool = False
    """Serve `/metrics` without a token (for a Prometheus that scrapes without one)."""
    database_connect_timeout_s: float = 5.0
    """PostgreSQL: how long opening a connection may take before it fails."""
    database_statement_timeout_s: float = 30.0
    """PostgreSQL: how long one statement may run; SQLite: how long a write waits for the
    lock. Past either, the API answers 503 and the loop backs off."""

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'gpupool.db'}"
