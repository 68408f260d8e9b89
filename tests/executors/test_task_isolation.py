"""Task isolation on the local executor: what each mode gives a task (its environment, its
account, its directories), that stopping and recovery work inside bubblewrap, and the loud
warning when tasks are not isolated. The attacks themselves are in test_hostile_tasks.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpupool.clock import FakeClock
from gpupool.executors.base import Exit, Launch, Stop
from gpupool.executors.gpus.declared import DeclaredBackend
from gpupool.executors.isolation import (
    Account,
    Bubblewrap,
    NoIsolation,
    account_name,
    bubblewrap_problem,
    choose_isolation,
    remove_account,
    unwrap,
)
from gpupool.executors.local import LocalExecutor
from gpupool.executors.taskenv import inherited_environment
from gpupool.server.process import free_port

PY = sys.executable
SECRET = "s3cret-of-the-server"


def _launch(launch_id: str, code: str, project: str = "iso-team", **fields: object) -> Launch:
    values: dict[str, object] = {
        "launch_id": launch_id,
        "project": project,
        "workload": f"w-{launch_id}",
        "task_index": 0,
        "node": "local",
        "devices": (0,),
        "gpu_milli": 1000,
        "gpu_memory_mib": 1024,
        "command": (PY, "-c", code),
        "grace_period_s": 5,
    }
    values.update(fields)
    return Launch(**values)  # type: ignore[arg-type]


def _until(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


class Node:
    """A LocalExecutor on declared GPUs, isolated as `mode` asks."""

    def __init__(self, base: Path, mode: str) -> None:
        self.data_dir = base / "data"
        self.clock = FakeClock()
        self.mode = mode
        self.executor = self.new()

    def new(self) -> LocalExecutor:
        isolation, _ = choose_isolation(self.mode, self.data_dir, max_processes=64)
        gpus = DeclaredBackend("2x80G", self.data_dir / "gpu-reports")
        return LocalExecutor(
            self.data_dir, gpus, self.clock, node_name="local", isolation=isolation
        )

    def ended(self, launch_id: str) -> Exit:
        found: list[Exit] = []

        def check() -> bool:
            found[:] = [e for e in self.executor.exits() if e.launch_id == launch_id]
            return bool(found)

        _until(check)
        return found[0]

    def log(self, launch_id: str) -> str:
        return self.executor.read_log(launch_id, 0, 1 << 20)[0].decode()


def _isolating() -> None:
    problem = bubblewrap_problem()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must test task isolation: {problem}")
        pytest.skip(f"tasks cannot be isolated here: {problem}")


@pytest.fixture
def sandboxed() -> Iterator[Node]:
    _isolating()
    base = Path(tempfile.mkdtemp(prefix="gpupool-iso-", dir="/var/tmp"))
    node = Node(base, "bubblewrap")
    yield node
    node.executor.stop_all(timeout_s=2)
    node.executor.close()
    remove_account("iso-team")
    shutil.rmtree(base, ignore_errors=True)


SHOW = (
    "import os, json; print(json.dumps({'uid': os.getuid(), 'cwd': os.getcwd(), "
    "'env': dict(os.environ)}), flush=True)"
)


def test_without_isolation_a_task_gets_none_of_the_servers_other_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPOOL_TEST_SECRET", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("GPUPOOL_DATABASE_URL", f"postgresql://admin:{SECRET}@db/gpupool")
    monkeypatch.setenv("LC_TIME", "C.UTF-8")
    node = Node(tmp_path, "none")
    try:
        node.executor.start([_launch("e1", SHOW, env=(("MINE", "declared"),))])
        assert node.ended("e1").exit_code == 0
        seen = json.loads(node.log("e1").splitlines()[0])
    finally:
        node.executor.close()
    env = seen["env"]
    assert SECRET not in json.dumps(env)
    assert env["MINE"] == "declared"
    assert env["PATH"] == os.environ["PATH"]
    assert env["LC_TIME"] == "C.UTF-8"
    assert env["GPUPOOL_ISOLATION"] == "none"
    assert env["GPUPOOL_LAUNCH_ID"] == "e1"


def test_the_inherited_environment_is_an_allow_list() -> None:
    server = {"PATH": "/bin", "HOME": "/root", "TOKEN": "x", "GPUPOOL_DATABASE_URL": "y"}
    server |= {"LC_ALL": "C", "LD_LIBRARY_PATH": "/cuda", "lc_odd": "z"}
    assert inherited_environment(server, isolated=True) == {
        "PATH": "/bin",
        "LC_ALL": "C",
        "LD_LIBRARY_PATH": "/cuda",
    }
    assert inherited_environment(server, isolated=False)["HOME"] == "/root"
    assert inherited_environment({}, isolated=True)["PATH"].startswith("/usr/local/sbin")


def test_account_names_are_stable_valid_and_distinct() -> None:
    names = {account_name(p) for p in ("team-a", "Team A", "team_a", "x" * 200, "é")}
    assert len(names) == 5
    for name in names:
        assert len(name) <= 32 and name.startswith("gpupool-")
        assert name.replace("-", "").isalnum() and name.islower()
    assert account_name("team-a") == account_name("team-a")


def test_isolated_tasks_run_as_the_projects_account_in_their_own_directory(
    sandboxed: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPOOL_TEST_SECRET", SECRET)
    write = "open('out.txt', 'w').write('x'); "
    write += "open(os.environ['GPUPOOL_CHECKPOINT_DIR'] + '/ckpt', 'w').write('c'); "
    sandboxed.executor.start([_launch("i1", "import os; " + write + SHOW)])
    assert sandboxed.ended("i1").exit_code == 0, sandboxed.log("i1")
    seen = json.loads(sandboxed.log("i1").splitlines()[0])
    workdir = sandboxed.data_dir / "work" / "iso-team" / "w-i1"
    account = account_name("iso-team")
    assert seen["uid"] == workdir.stat().st_uid != 0
    assert seen["cwd"] == str(workdir)
    assert oct(workdir.stat().st_mode & 0o777) == "0o700"
    assert (workdir / "out.txt").exists()
    assert (sandboxed.data_dir / "checkpoints" / "iso-team" / "w-i1" / "ckpt").exists()
    env = seen["env"]
    assert SECRET not in json.dumps(env)
    assert (env["USER"], env["HOME"], env["GPUPOOL_ISOLATION"]) == (
        account,
        str(workdir),
        "bubblewrap",
    )


def test_a_stop_reaches_an_isolated_task_with_its_grace_then_kills_every_process(
    sandboxed: Node,
) -> None:
    # The task leaves its process group (setsid) with a child and ignores SIGTERM: only the
    # PID namespace, ended with bwrap, still takes that child down.
    code = (
        "import os, signal, subprocess, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('got SIGTERM', flush=True))\n"
        "subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    sandboxed.executor.start([_launch("k1", code)])
    _until(lambda: "ready" in sandboxed.log("k1"))
    uid = (sandboxed.data_dir / "work" / "iso-team" / "w-k1").stat().st_uid
    assert len(_processes_of(uid)) == 2
    sandboxed.executor.stop([Stop("k1", 5, "reclaimed")])
    _until(lambda: "got SIGTERM" in sandboxed.log("k1"))
    assert sandboxed.executor.alive() == {"k1"}  # within its grace it runs on
    sandboxed.clock.advance(6)
    end = sandboxed.ended("k1")
    assert (end.exit_code, end.stopped) == (137, True)
    _until(lambda: not _processes_of(uid))


def test_a_restarted_executor_adopts_an_isolated_task_even_without_its_journal(
    sandboxed: Node,
) -> None:
    code = "import time; print('ready', flush=True); time.sleep(600)"
    sandboxed.executor.start([_launch("r1", code)])
    _until(lambda: "ready" in sandboxed.log("r1"))
    sandboxed.executor.close()
    (sandboxed.data_dir / "local" / "journal.jsonl").unlink()
    sandboxed.executor = sandboxed.new()
    assert sandboxed.executor.alive() == {"r1"}
    adopted = sandboxed.executor._runs["r1"].launch
    assert adopted.command == (PY, "-c", code)
    assert adopted.project == "iso-team"
    sandboxed.executor.stop([Stop("r1", 0, "done")])
    assert sandboxed.ended("r1").stopped


def test_unwrap_leaves_a_plain_command_alone() -> None:
    assert unwrap(["env", "X=1", "python"]) == ["env", "X=1", "python"]


def test_a_working_dir_outside_the_task_roots_is_refused_at_launch(sandboxed: Node) -> None:
    sandboxed.executor.start([_launch("w1", "print('ran')", working_dir="/etc")])
    end = sandboxed.ended("w1")
    assert end.exit_code == 127 and "outside the task roots" in end.reason
    assert "ran" not in sandboxed.log("w1")


def _processes_of(uid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                status = Path(f"/proc/{entry.name}/status").read_text()
            except OSError:
                continue
            uids = next(line for line in status.splitlines() if line.startswith("Uid:"))
            state = next(line for line in status.splitlines() if line.startswith("State:"))
            if int(uids.split()[1]) == uid and "zombie" not in state:
                found.append(int(entry.name))
    return found


# -- without isolation: said loudly -----------------------------------------------------------


def test_isolation_none_is_warned_about_and_bubblewrap_refuses_without_it(
    tmp_path: Path,
) -> None:
    isolation, warning = choose_isolation("none", tmp_path)
    assert isinstance(isolation, NoIsolation)
    assert warning is not None and "tasks are NOT isolated" in warning
    assert "docs/security.md#tasks" in warning
    with pytest.raises(ValueError, match=r"--isolation bubblewrap: .*not found"):
        choose_isolation("bubblewrap", tmp_path, bwrap="/nonexistent/bwrap")
    isolation, warning = choose_isolation("auto", tmp_path, bwrap="/nonexistent/bwrap")
    assert isolation.mode == "none" and warning is not None and "not found" in warning
    with pytest.raises(ValueError, match="not known"):
        choose_isolation("chroot", tmp_path)
    for root in (Path("/"), tmp_path, tmp_path / "data" / "roots", tmp_path / "missing"):
        (tmp_path / "data" / "roots").mkdir(parents=True, exist_ok=True)
        with pytest.raises(ValueError, match="--task-root"):
            choose_isolation("none", tmp_path / "data", task_roots=[root])


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory another user can reach (pytest's tmp_path is under a 0700 one)."""
    base = Path(tempfile.mkdtemp(prefix="gpupool-iso-", dir="/var/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_a_server_that_is_not_root_says_tasks_are_not_isolated(open_dir: Path) -> None:
    """As an unprivileged user (setpriv from root), `gpupool server --executor local` logs the
    warning and serves; `--isolation bubblewrap` refuses to start."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root (and setpriv) to run the server as another user")
    data_dir = open_dir / "data"
    data_dir.mkdir()
    os.chown(data_dir, 65534, 65534)
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    server = [PY, "-m", "gpupool", "server", "--executor", "local", "--fake-gpus", "1x8G"]
    server += ["--data-dir", str(data_dir), "--port", str(free_port())]
    refused = subprocess.run(
        [*drop, *server, "--isolation", "bubblewrap"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(data_dir)},
    )
    assert refused.returncode == 2, refused
    assert "--isolation bubblewrap: the server does not run as root" in refused.stderr
    warned = subprocess.Popen(
        [*drop, *server],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HOME": str(data_dir)},
    )
    try:
        assert warned.stdout is not None
        line = ""
        deadline = time.monotonic() + 60
        while "NOT isolated" not in line and time.monotonic() < deadline:
            line = warned.stdout.readline()
            assert line or warned.poll() is None, "the server ended without the warning"
        assert "tasks are NOT isolated" in line and "does not run as root" in line
    finally:
        warned.terminate()
        warned.wait(timeout=30)


def test_gpupool_up_says_loudly_that_tasks_are_not_isolated(tmp_path: Path) -> None:
    env = {**os.environ, "GPUPOOL_CONFIG": str(tmp_path / "config.json")}
    data_dir = tmp_path / "data"

    def gpupool(*args: str) -> subprocess.CompletedProcess[str]:
        command = [PY, "-m", "gpupool", *args, "--data-dir", str(data_dir)]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    port = str(free_port())
    try:
        up = gpupool("up", "--isolation", "none", "--fake-gpus", "1x8G", "--port", port)
        assert up.returncode == 0, up
        assert "WARNING: tasks are NOT isolated" in " ".join(up.stderr.split()), up.stderr
        assert "--isolation none was asked for" in " ".join(up.stderr.split())
        log = (data_dir / "server.log").read_text()
        assert "tasks are NOT isolated" in log
    finally:
        gpupool("down")


class FixedAccounts:
    """The Accounts seam's fake: every project runs as one given account (no useradd)."""

    def account_for(self, project: str) -> Account:
        return Account("gpupool-test", 4321, 4321)


def test_the_sandbox_command_line_hides_then_binds_back_in_order(open_dir: Path) -> None:
    """What `wrap` asks bwrap for, built without root: the data directory hidden after the
    closed parent above it, the task's directories bound back writable with reachable
    parents, privileges dropped last, the task's command unchanged."""
    closed = open_dir / "home"  # outside /tmp, which every task gets empty anyway
    data_dir = closed / "data"
    work = data_dir / "work" / "p" / "w"
    work.mkdir(parents=True)
    closed.chmod(0o700)
    sandbox = Bubblewrap(data_dir, accounts=FixedAccounts(), max_processes=7)
    launch = _launch("x1", "pass", project="p")
    args = sandbox.wrap(launch, ["python", "-c", "pass"], [work], work)
    text = " ".join(args)
    assert text.index(f"--tmpfs {closed} ") < text.index(f"--tmpfs {data_dir} ")
    assert text.index(f"--tmpfs {data_dir} ") < text.index(f"--bind {work} {work}")
    assert f"--perms 0755 --dir {data_dir / 'work' / 'p'} " in text
    assert "--unshare-pid" in args and "--die-with-parent" in args
    assert "prlimit --nproc=7:7 -- setpriv --reuid=4321 --regid=4321 --clear-groups" in text
    assert args[-4:] == ["--", "python", "-c", "pass"]
    assert unwrap(args) == ["python", "-c", "pass"]
    assert sandbox.working_dir(launch, open_dir) == data_dir / "work" / "p" / "w-x1"
    problem = sandbox.working_dir_problem("/etc")
    assert problem is not None and "outside the task roots (none configured)" in problem
