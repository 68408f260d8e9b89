"""A real Kubernetes control plane for gpupool's tests, built from Go modules, run on loopback.

`build` compiles, once per machine and version, kube-apiserver, kube-controller-manager,
kube-scheduler and etcd (the Go module in `kube/`, which requires `k8s.io/kubernetes` and pins
its staging modules to their published versions) and KWOK (`kwok/`), into
`~/.cache/gpupool/kube/<versions>-<hash>/`. `up` starts etcd, the API server (generated CA,
serving certificate, service-account keys and a static admin token, all in a temporary
directory), a controller manager with the controllers a small cluster needs (service accounts,
namespaces, garbage collection, Jobs, ReplicaSets, pod GC, node lifecycle) and KWOK, which plays
the kubelets of fake nodes (annotation `kwok.x-k8s.io/node: fake`): pods go Running, finish when
their `test.gpupool.dev/complete-after` annotation says, and are removed when their deletion
grace period has passed. kube-scheduler runs only when asked (the benchmark's peer).

Standard library only: `scripts/kube-testenv` runs this file with any Python 3.11, and the tests
import it. Needs Go (the version the go.mod files name, or GOTOOLCHAIN) and openssl. One file on
purpose (longer than 500 lines): it must run without gpupool or anything else installed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

HERE = Path(__file__).resolve().parent
KUBE_MODULE = HERE / "kube"
KWOK_MODULE = HERE / "kwok"
KWOK_STAGES = HERE / "kwok-stages.yaml"
BUILD_RECIPE = 3
"""Bump when the way binaries are built changes: it is part of the cache key."""

BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kwok")
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
CONTROLLERS = (
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "job-controller",
    "replicaset-controller",
    "deployment-controller",
    "pod-garbage-collector-controller",
    "node-lifecycle-controller",
)


class TestEnvError(RuntimeError):
    """The control plane cannot be built or started here; the message says why and the fix."""


def log(message: str) -> None:
    print(f"kube-testenv: {message}", file=sys.stderr, flush=True)


# --- versions and the binary cache ---------------------------------------------------------


def _required_version(go_mod: Path, module: str) -> str:
    for line in go_mod.read_text().splitlines():
        parts = line.strip().split()
        if parts[:1] == ["require"]:
            parts = parts[1:]
        if len(parts) >= 2 and parts[0] == module:
            return parts[1]
    raise TestEnvError(f"{go_mod} does not require {module}")


@dataclass(frozen=True, slots=True)
class Versions:
    kubernetes: str
    etcd: str
    kwok: str
    go: str

    @staticmethod
    def read() -> Versions:
        kube_mod = KUBE_MODULE / "go.mod"
        go = "go1.26"
        for line in kube_mod.read_text().splitlines():
            if line.startswith("go "):
                go = "go" + line.split()[1]
        return Versions(
            kubernetes=_required_version(kube_mod, "k8s.io/kubernetes"),
            etcd=_required_version(kube_mod, "go.etcd.io/etcd/server/v3"),
            kwok=_required_version(KWOK_MODULE / "go.mod", "sigs.k8s.io/kwok"),
            go=go,
        )

    def cache_key(self) -> str:
        digest = hashlib.sha256(str(BUILD_RECIPE).encode())
        for path in (
            KUBE_MODULE / "go.mod",
            KUBE_MODULE / "go.sum",
            KWOK_MODULE / "go.mod",
            KWOK_MODULE / "go.sum",
        ):
            digest.update(path.read_bytes())
        return f"k8s-{self.kubernetes}_etcd-{self.etcd}_kwok-{self.kwok}_{digest.hexdigest()[:10]}"


def cache_root() -> Path:
    base = os.environ.get("GPUPOOL_CACHE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "gpupool"


def bin_dir(versions: Versions | None = None) -> Path:
    return cache_root() / "kube" / (versions or Versions.read()).cache_key() / "bin"


def binaries_ready(directory: Path | None = None) -> bool:
    directory = directory or bin_dir()
    return all((directory / name).is_file() for name in BINARIES)


def missing_prerequisite() -> str | None:
    """Why binaries cannot be built here, or None. Cached binaries need no Go."""
    if binaries_ready():
        return (
            None
            if shutil.which("openssl")
            else "openssl is not installed (apt-get install openssl)"
        )
    if shutil.which("go") is None:
        return (
            "Go is not installed, and the Kubernetes test binaries are not cached in "
            f"{bin_dir()}: install Go (https://go.dev/doc/install), then run "
            "scripts/kube-testenv build"
        )
    if shutil.which("openssl") is None:
        return "openssl is not installed (apt-get install openssl)"
    return None


KUBE_TOOLS = (
    "k8s.io/kubernetes/cmd/kube-apiserver",
    "k8s.io/kubernetes/cmd/kube-controller-manager",
    "k8s.io/kubernetes/cmd/kube-scheduler",
    "go.etcd.io/etcd/server/v3",
)


def pin(kubernetes: str) -> None:
    """Rewrite `kube/go.mod` for `k8s.io/kubernetes` at `kubernetes` (like v1.37.2).

    Its go.mod requires each staging module (`k8s.io/api`, ...) at v0.0.0 and replaces it by a
    directory of its own repository. A dependency's replace directives do not apply to us and
    v0.0.0 is not published, so we replace each by its published version (v1.37.2 -> v0.37.2),
    reading the list from the downloaded go.mod so that it follows the version.
    """
    if shutil.which("go") is None:
        raise TestEnvError("Go is needed to pin versions")
    found = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{kubernetes}"],
        capture_output=True, text=True, check=False, cwd=KUBE_MODULE,
    )  # fmt: skip
    if found.returncode != 0:
        raise TestEnvError(f"k8s.io/kubernetes@{kubernetes}: {found.stdout}{found.stderr}")
    upstream = Path(json.loads(found.stdout)["GoMod"]).read_text()
    staging = sorted(
        line.split()[0]
        for line in upstream.splitlines()
        if "=> ./staging/" in line and line.strip().startswith("k8s.io/")
    )
    go_line = next(line for line in upstream.splitlines() if line.startswith("go "))
    published = "v0." + kubernetes.removeprefix("v1.")
    lines = [
        "module gpupool.dev/kubetest/kube",
        "",
        go_line,
        "",
        f"require k8s.io/kubernetes {kubernetes}",
        "",
        "replace (",
        *(f"\t{module} => {module} {published}" for module in staging),
        ")",
        "",
    ]
    (KUBE_MODULE / "go.mod").write_text("\n".join(lines))
    (KUBE_MODULE / "go.sum").unlink(missing_ok=True)
    got = subprocess.run(
        ["go", "get", "-tool", *KUBE_TOOLS],
        capture_output=True, text=True, check=False, cwd=KUBE_MODULE,
    )  # fmt: skip
    if got.returncode != 0:
        raise TestEnvError(f"go get -tool failed:\n{got.stdout}{got.stderr}")
    log(f"pinned k8s.io/kubernetes {kubernetes} with {len(staging)} staging modules at {published}")


def _version_ldflags(version: str) -> str:
    major, minor = version.removeprefix("v").split(".")[:2]
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return " ".join(flags)


def build(force: bool = False) -> Path:
    """The binaries' directory, building what is missing (minutes, cold; seconds, warm)."""
    versions = Versions.read()
    target = bin_dir(versions)
    if binaries_ready(target) and not force:
        log(f"binaries cached in {target}")
        return target
    if shutil.which("go") is None:
        raise TestEnvError(missing_prerequisite() or "Go is not installed")
    began = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent))
    # A build cache of its own, deleted afterwards: a cold build of these leaves 2-3 GB.
    go_cache = Path(tempfile.mkdtemp(prefix="gocache-", dir=target.parent))
    env = {**os.environ, "GOCACHE": str(go_cache), "GOFLAGS": "-mod=readonly -buildvcs=false"}
    try:
        log(
            f"building Kubernetes {versions.kubernetes}, etcd {versions.etcd} and "
            f"KWOK {versions.kwok} from Go modules (5-10 minutes the first time) ..."
        )
        _go_build(
            KUBE_MODULE,
            staging,
            _version_ldflags(versions.kubernetes),
            list(KUBE_TOOLS),
            env,
        )
        (staging / "server").rename(staging / "etcd")
        _go_build(
            KWOK_MODULE,
            staging,
            f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={versions.kwok}",
            ["sigs.k8s.io/kwok/cmd/kwok"],
            env,
        )
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        subprocess.run(["chmod", "-R", "u+w", str(go_cache)], check=False)
        shutil.rmtree(go_cache, ignore_errors=True)
    log(f"built in {time.monotonic() - began:.0f} s into {target}")
    return target


def _go_build(
    module: Path, out: Path, ldflags: str, packages: Sequence[str], env: dict[str, str]
) -> None:
    command = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", f"{out}/", *packages]
    started = time.monotonic()
    completed = subprocess.run(
        command, cwd=module, env=env, capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise TestEnvError(
            f"go build in {module} failed ({completed.returncode}):\n"
            f"{completed.stdout}{completed.stderr}"
        )
    log(
        f"  {', '.join(p.rsplit('/', 1)[-1] for p in packages)}: {time.monotonic() - started:.0f} s"
    )


# --- running a control plane -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    completed = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise TestEnvError(f"openssl {' '.join(args)} failed:\n{completed.stderr}")


def make_certificates(directory: Path) -> None:
    """A CA, the API server's serving certificate (loopback names) and service-account keys."""
    days = "30"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", days, "-subj", "/CN=gpupool-kube-testenv-ca", cwd=directory,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out",
        "apiserver.csr", "-subj", "/CN=kube-apiserver", cwd=directory,
    )  # fmt: skip
    (directory / "apiserver.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,IP:10.96.0.1\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "apiserver.crt", "-days", days, "-extfile", "apiserver.ext",
        cwd=directory,
    )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    for name in ("ca.key", "apiserver.key", "sa.key"):
        (directory / name).chmod(0o600)


def kubeconfig_text(server: str, ca_path: Path, token: str, user: str = "admin") -> str:
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: gpupool-testenv\n  cluster:\n    server: {server}\n"
        f"    certificate-authority: {ca_path}\n"
        f"users:\n- name: {user}\n  user:\n    token: {token}\n"
        "contexts:\n- name: gpupool-testenv\n  context:\n"
        f"    cluster: gpupool-testenv\n    user: {user}\n"
        "current-context: gpupool-testenv\n"
    )


# Run by the watchdog process: when the process that started the control plane dies (its stdin
# reaches EOF without "done"), kill every component and delete the directory.
_WATCHDOG = """
import json, os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
directory = sys.argv[1]
if sys.stdin.read() != "done":
    try:
        with open(os.path.join(directory, "state.json")) as f:
            pids = json.load(f)["pids"].values()
    except Exception:
        pids = []
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.5)
    shutil.rmtree(directory, ignore_errors=True)
"""


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + KWOK (+ kube-scheduler) on loopback.

    As a context manager (tests): everything stops and the directory goes when the block ends
    or the process dies. `detach()` leaves it running for `scripts/kube-testenv up`.
    """

    def __init__(self, directory: Path | None = None, binaries: Path | None = None) -> None:
        self.binaries = binaries or bin_dir()
        self.directory = directory or Path(tempfile.mkdtemp(prefix="gpupool-kube-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.admin_token = ""
        self._watchdog: subprocess.Popen[str] | None = None

    # -- paths -------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def ca_path(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, scheduler: bool = False, watchdog: bool = True) -> Self:
        if not binaries_ready(self.binaries):
            raise TestEnvError(
                f"the Kubernetes test binaries are not in {self.binaries}: "
                "run scripts/kube-testenv build"
            )
        began = time.monotonic()
        make_certificates(self.directory)
        self.admin_token = os.urandom(16).hex()
        (self.directory / "tokens.csv").write_text(
            f'{self.admin_token},gpupool-testenv-admin,0,"system:masters"\n'
        )
        self.ports = {
            "etcd": free_port(),
            "etcd_peer": free_port(),
            "apiserver": free_port(),
            "kwok": free_port(),
        }
        self.kubeconfig.write_text(kubeconfig_text(self.server, self.ca_path, self.admin_token))
        self.kubeconfig.chmod(0o600)
        if watchdog:
            self._start_watchdog()
        self._start_etcd()
        self.start_apiserver()
        self._start("controller-manager", self._controller_manager_command())
        self._start("kwok", self._kwok_command())
        if scheduler:
            self.start_scheduler()
        self._save_state()
        log(f"control plane up in {time.monotonic() - began:.1f} s at {self.server}")
        return self

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd_peer']}"
        self._start(
            "etcd",
            [
                str(self.binaries / "etcd"),
                "--name=testenv",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=testenv={peer}",
                "--quota-backend-bytes=4294967296",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait_http(f"{client}/health", "etcd", 30)

    def start_apiserver(self) -> None:
        d = self.directory
        self._start(
            "apiserver",
            [
                str(self.binaries / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['apiserver']}",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--client-ca-file={d / 'ca.crt'}",
                f"--token-auth-file={d / 'tokens.csv'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--authorization-mode=Node,RBAC",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--endpoint-reconciler-type=none",
                f"--cert-dir={d / 'apiserver-certs'}",
                "--max-requests-inflight=800",
                "--max-mutating-requests-inflight=400",
                "--v=0",
            ],
        )
        self.wait_ready(60)

    def stop_apiserver(self) -> None:
        self._stop_one("apiserver")

    def restart_apiserver(self) -> None:
        self.stop_apiserver()
        self.start_apiserver()
        self._save_state()

    def start_scheduler(self) -> None:
        """kube-scheduler with client limits raised to what gpupool's client may use."""
        config = self.directory / "scheduler.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            f"clientConnection:\n  kubeconfig: {self.kubeconfig}\n  qps: 5000\n  burst: 5000\n"
            "leaderElection:\n  leaderElect: false\n"
        )
        self._start(
            "scheduler",
            [
                str(self.binaries / "kube-scheduler"),
                f"--config={config}",
                "--secure-port=0",
                "--v=0",
            ],
        )
        self._save_state()

    def stop_scheduler(self) -> None:
        self._stop_one("scheduler")
        self._save_state()

    def _controller_manager_command(self) -> list[str]:
        d = self.directory
        return [
            str(self.binaries / "kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={d / 'sa.key'}",
            f"--root-ca-file={d / 'ca.crt'}",
            "--secure-port=0",
            "--node-monitor-grace-period=40s",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
            "--v=0",
        ]

    @property
    def task_log(self) -> Path:
        """What KWOK serves as the log of every container named `task` (gpupool's tasks)."""
        return self.directory / "task.log"

    def _kwok_command(self) -> list[str]:
        key, value = FAKE_NODE_ANNOTATION
        # KWOK also serves the kubelet API (on the node's port, over TLS, with the API server's
        # certificate: it is for 127.0.0.1), so that the pod log API answers through the API
        # server with the file below, as a kubelet would with a container's log.
        self.task_log.write_text(  # in the CRI log format, as kubelets keep container logs
            "2026-11-24T10:00:00.000000000Z stdout F hello from a task on a KWOK node\n"
            "2026-11-24T10:00:01.000000000Z stdout F step 1 done\n"
        )
        logs = self.directory / "kwok-logs.yaml"
        logs.write_text(
            "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterLogs\nmetadata:\n  name: tasks\n"
            f"spec:\n  logs:\n  - containers: [task]\n    logsFile: {self.task_log}\n"
            "    follow: false\n"
        )
        return [
            str(self.binaries / "kwok"),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={KWOK_STAGES}",
            f"--config={logs}",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            "--node-ip=127.0.0.1",
            f"--node-port={self.ports['kwok']}",
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{self.ports['kwok']}",
            f"--tls-cert-file={self.directory / 'apiserver.crt'}",
            f"--tls-private-key-file={self.directory / 'apiserver.key'}",
            "--cidr=10.244.0.0/16",
        ]

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self._stop_one(name)
        shutil.rmtree(self.directory, ignore_errors=True)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                watchdog.communicate("done", timeout=10)

    def detach(self) -> None:
        """Leave it running (scripts/kube-testenv up); `down` stops it from the state file."""
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.communicate("done", timeout=10)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- helpers -----------------------------------------------------------------------------

    def _start(self, name: str, command: list[str]) -> None:
        log_file = (self.directory / f"{name}.log").open("ab")
        # Each in its own process group, so that a stop reaches anything it started.
        self.processes[name] = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
            start_new_session=True,
        )
        log_file.close()
        self._save_state()

    def _stop_one(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)

    def _start_watchdog(self) -> None:
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(self.directory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            text=True,
            start_new_session=True,
        )

    def _save_state(self) -> None:
        state = {
            "server": self.server if "apiserver" in self.ports else None,
            "kubeconfig": str(self.kubeconfig),
            "ports": self.ports,
            "pids": {name: p.pid for name, p in self.processes.items()},
        }
        (self.directory / "state.json").write_text(json.dumps(state, indent=2))

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_path))

    def _wait_http(self, url: str, name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        context = self._ssl_context() if url.startswith("https") else None
        headers = {"Authorization": f"Bearer {self.admin_token}"} if context else {}
        last = "no answer"
        while time.monotonic() < deadline:
            process = self.processes.get(name)
            if process is not None and process.poll() is not None:
                raise TestEnvError(
                    f"{name} exited with {process.returncode}; its log:\n{self.log_tail(name)}"
                )
            try:
                request = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(request, timeout=2, context=context) as answer:
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.URLError) as error:
                last = str(error)
            time.sleep(0.2)
        raise TestEnvError(
            f"{name} not ready after {timeout_s:.0f} s ({last}):\n{self.log_tail(name)}"
        )

    def wait_ready(self, timeout_s: float = 60) -> None:
        self._wait_http(f"{self.server}/readyz", "apiserver", timeout_s)

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.directory / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def default_run_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"gpupool-kube-testenv-{os.getuid()}"


def _read_state(directory: Path) -> dict[str, object] | None:
    path = directory / "state.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def down(directory: Path) -> bool:
    state = _read_state(directory)
    if state is None:
        return False
    pids = state.get("pids")
    if isinstance(pids, dict):
        for pid in pids.values():
            with contextlib.suppress(OSError):
                os.killpg(int(pid), signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(int(p)) for p in pids.values()):
            time.sleep(0.2)
        for pid in pids.values():
            with contextlib.suppress(OSError):
                os.killpg(int(pid), signal.SIGKILL)
    shutil.rmtree(directory, ignore_errors=True)
    return True


@contextlib.contextmanager
def running(scheduler: bool = False) -> Iterator[ControlPlane]:
    """A control plane for the length of a `with` block (binaries built first if needed)."""
    build()
    plane = ControlPlane()
    try:
        plane.start(scheduler=scheduler)
        yield plane
    finally:
        plane.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kube-testenv",
        description="A real Kubernetes API server (with etcd, a controller manager and KWOK's "
        "fake kubelets) on loopback, for gpupool's tests.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or find cached) the binaries")
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    u = sub.add_parser("up", help="start a control plane in the background")
    u.add_argument("--dir", type=Path, default=default_run_dir())
    u.add_argument("--scheduler", action="store_true", help="also run kube-scheduler")
    d = sub.add_parser("down", help="stop it and delete its files")
    d.add_argument("--dir", type=Path, default=default_run_dir())
    e = sub.add_parser("env", help="print `export KUBECONFIG=...` for a running one")
    e.add_argument("--dir", type=Path, default=default_run_dir())
    sub.add_parser("versions", help="print the pinned versions and the cache directory")
    p = sub.add_parser("pin", help="rewrite kube/go.mod for another Kubernetes version")
    p.add_argument("version", help="a k8s.io/kubernetes version, like v1.37.2")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build(force=args.force))
        elif args.command == "versions":
            versions = Versions.read()
            report = {
                "kubernetes": versions.kubernetes,
                "etcd": versions.etcd,
                "kwok": versions.kwok,
                "go": versions.go,
                "bin_dir": str(bin_dir(versions)),
                "cached": binaries_ready(),
            }
            print(json.dumps(report, indent=2))
        elif args.command == "pin":
            pin(args.version)
        elif args.command == "up":
            if _read_state(args.dir) is not None:
                raise TestEnvError(f"one is already running in {args.dir}: run down first")
            build()
            if args.dir.exists():
                shutil.rmtree(args.dir)
            args.dir.mkdir(parents=True)
            plane = ControlPlane(args.dir)
            try:
                plane.start(scheduler=args.scheduler, watchdog=False)
            except BaseException:
                plane.stop()
                raise
            plane.detach()
            print(plane.kubeconfig)
        elif args.command == "down":
            if down(args.dir):
                log(f"stopped and removed {args.dir}")
            else:
                log(f"nothing running in {args.dir}")
        elif args.command == "env":
            state = _read_state(args.dir)
            if state is None:
                raise TestEnvError(f"none running in {args.dir}: run scripts/kube-testenv up")
            print(f"export KUBECONFIG={state['kubeconfig']}")
    except TestEnvError as error:
        log(f"error: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
