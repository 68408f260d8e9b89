"""Tasks as an attacker would write them (issue 14): a real `gpupool server` with the local
executor, run as root with bubblewrap, a victim project's task running, and one attacker
workload per attack. Each attempt prints `ESCAPED what: ...` when it got anywhere and `BLOCKED
what: ...` when it failed; every one must be blocked, the victim must still run and the server
still answer. Needs root and bubblewrap (CI has both: .ci/run installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gpupool.api.schemas import ProjectIn, TaskOut, WorkloadIn
from gpupool.client.http import ApiError, GpupoolClient
from gpupool.executors.isolation import bubblewrap_problem, remove_account
from gpupool.executors.local_recovery import group_members, live_shims
from gpupool.server.process import ServerProcess
from liveserver import unique, wait_for

SECRET = "hunter2-server-only-secret"
MAX_PROCESSES = 40
"""--task-max-processes for this server: the fork bomb's ceiling."""

PRELUDE = """\
import glob, json, os, signal, sys, time
def tried(what, action):
    try:
        got = action()
    except Exception as error:
        print(f"BLOCKED {what}: {type(error).__name__}: {error}", flush=True)
        return
    if not got:
        print(f"BLOCKED {what}: nothing found", flush=True)
    else:
        print(f"ESCAPED {what}: {got!r}"[:400], flush=True)
def read(path):
    with open(path, "rb") as handle:
        return handle.read(200)
def maybe(path):
    try:
        return read(path)
    except OSError:
        return b""
"""


@dataclass
class Scene:
    server: ServerProcess
    client: GpupoolClient
    data_dir: Path
    task_root: Path
    victim_project: str
    attacker_project: str
    victim_workdir: Path
    victim_pids: list[int]


def _problem() -> str | None:
    return bubblewrap_problem()


@pytest.fixture(scope="module")
def scene() -> Iterator[Scene]:
    problem = _problem()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the hostile-task suite: {problem}")
        pytest.skip(f"tasks cannot be isolated here: {problem}")
    # Outside /tmp (which every task gets empty), as a data directory usually is, in a 0700
    # directory like a home (which tasks must still reach their directories through).
    base = Path(tempfile.mkdtemp(prefix="gpupool-hostile-", dir="/var/tmp"))
    data_dir = base / "data"
    task_root = base / "roots"
    task_root.mkdir()
    victim, attacker = unique("victim"), unique("attacker")
    args = ("--executor", "local", "--fake-gpus", "4x80G", "--isolation", "bubblewrap")
    args += ("--task-root", str(task_root), "--task-max-processes", str(MAX_PROCESSES))
    args += ("--stop-tasks-on-exit",)
    server = ServerProcess(data_dir, simulated_nodes="0x0", extra_args=args)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUPOOL_HOSTILE_SECRET", SECRET)
        patch.setenv("GPUPOOL_DATABASE_URL", f"sqlite:///{data_dir / 'gpupool.db'}?{SECRET}=1")
        server.start(timeout_s=60)
    client = GpupoolClient(server.url, server.admin_token)
    try:
        for project in (victim, attacker):
            client.create_project(ProjectIn.model_validate({"name": project, "quota": {"gpu": 2}}))
        code = (
            "import time; open('victim-file.txt', 'w').write('victim-data'); "
            "print('victim-log-line', flush=True); time.sleep(600)"
        )
        body = {
            "name": "victim",
            "project": victim,
            "gpu": 1,
            "command": [sys.executable, "-c", code],
        }
        client.submit(WorkloadIn.model_validate(body))
        wait_for(lambda: "victim-log-line" in _log(client, victim, "victim"), 30, "the victim")
        workdir = data_dir / "work" / victim / "victim"
        shim = next(pid for launch, pid in live_shims(data_dir / "local").items())
        pids = sorted(group_members({shim})[shim])
        yield Scene(server, client, data_dir, task_root, victim, attacker, workdir, pids)
        assert client.describe(victim, "victim").status == "running"
    finally:
        client.close()
        server.stop()
        for project in (victim, attacker):
            remove_account(project)
        shutil.rmtree(base, ignore_errors=True)


def _log(client: GpupoolClient, project: str, name: str) -> str:
    try:
        return client.logs(project, name, 0, 0).text
    except ApiError:
        return ""


def _attack(scene: Scene, code: str, **fields: object) -> str:
    """Run `code` (after PRELUDE) as an attacker workload; its log once it has ended."""
    name = unique("attack")
    command = [sys.executable, "-c", PRELUDE + textwrap.dedent(code)]
    body = {"name": name, "project": scene.attacker_project, "gpu": 1, "command": command}
    scene.client.submit(WorkloadIn.model_validate({**body, **fields}))
    ended = ("completed", "failed")
    wait_for(
        lambda: scene.client.describe(scene.attacker_project, name).status in ended,
        60,
        f"attack {name}",
    )
    return _log(scene.client, scene.attacker_project, name)


def _all_blocked(log: str, attempts: int) -> None:
    assert "ESCAPED" not in log, log
    assert log.count("BLOCKED") == attempts, log


def _victim_alive(scene: Scene) -> None:
    assert all(Path(f"/proc/{pid}").exists() for pid in scene.victim_pids)
    assert scene.client.describe(scene.victim_project, "victim").status == "running"
    assert httpx.get(scene.server.url + "/health", timeout=5).status_code == 200


def test_a_task_cannot_read_the_admin_token_or_the_database(scene: Scene) -> None:
    data = scene.data_dir
    log = _attack(
        scene,
        f"""
        tried("admin token", lambda: read({str(data / "admin-token")!r}))
        tried("database", lambda: read({str(data / "gpupool.db")!r}))
        tried("server log", lambda: read({str(data / "server.log")!r}))
        tried("executor journal", lambda: read({str(data / "local" / "journal.jsonl")!r}))
        # What it sees of the data directory: the path to its own directories, nothing else.
        own = {{"work", "checkpoints", "gpu-reports"}}
        tried("data dir listing", lambda: set(os.listdir({str(data)!r})) - own)
        for part in ("work", "checkpoints"):
            path = os.path.join({str(data)!r}, part)
            mine = {{{scene.attacker_project!r}}}
            tried(f"{{part}}/ listing", lambda: set(os.listdir(path)) - mine)
        """,
    )
    _all_blocked(log, 7)


def test_a_task_cannot_see_the_server_or_its_environment(scene: Scene) -> None:
    pid = scene.server.pid
    log = _attack(
        scene,
        f"""
        tried("server environ", lambda: read("/proc/{pid}/environ"))
        tried("server cwd", lambda: os.readlink("/proc/{pid}/cwd"))
        tried("other processes", lambda: [p for p in os.listdir("/proc") if p.isdigit()
                                          and int(p) > 1 and int(p) != os.getpid()])
        tried("secret in any environ", lambda: [p for p in glob.glob("/proc/*/environ")
                                                if {SECRET!r}.encode() in maybe(p)])
        tried("secret in own env", lambda: [k for k, v in os.environ.items()
                                            if {SECRET!r} in v or k in ("GPUPOOL_DATABASE_URL",
                                            "GPUPOOL_HOSTILE_SECRET")])
        tried("init's root", lambda: os.listdir("/proc/1/root/"))
        """,
    )
    _all_blocked(log, 6)


def test_a_task_cannot_read_another_projects_files_or_logs(scene: Scene) -> None:
    victim = scene.victim_workdir
    checkpoints = scene.data_dir / "checkpoints" / scene.victim_project / "victim"
    log = _attack(
        scene,
        f"""
        tried("victim's working dir", lambda: os.listdir({str(victim)!r}))
        tried("victim's file", lambda: read({str(victim / "victim-file.txt")!r}))
        tried("victim's checkpoints", lambda: os.listdir({str(checkpoints)!r}))
        tried("task logs", lambda: [read(p) for p in glob.glob({str(scene.data_dir)!r}
                                                            + "/logs/*.log")])
        tried("victim's /tmp files", lambda: glob.glob("/tmp/**/victim-file.txt",
                                                       recursive=True))
        """,
    )
    _all_blocked(log, 5)


def test_a_task_cannot_signal_other_tasks_or_the_server(scene: Scene) -> None:
    targets = [*scene.victim_pids, scene.server.pid]
    log = _attack(
        scene,
        f"""
        for pid in {targets!r}:
            tried(f"kill {{pid}}", lambda: os.kill(pid, signal.SIGKILL) or "killed")
        def everyone():
            os.kill(-1, signal.SIGKILL)  # every process it may signal, bar itself
            return [p for p in {targets!r} if not os.path.exists(f"/proc/{{p}}")]
        tried("kill -1", everyone)
        """,
    )
    _all_blocked(log, len(targets) + 1)
    _victim_alive(scene)


def test_a_task_cannot_write_outside_its_directories(scene: Scene) -> None:
    marker = f"hostile-{os.getpid()}"
    places = [
        scene.data_dir / marker,
        scene.data_dir / "logs" / marker,
        scene.victim_workdir / marker,
        scene.task_root / marker,
        Path("/etc") / marker,
        Path("/usr/local/bin") / marker,
        Path(sys.executable).parent / marker,
    ]
    lines = "\n".join(
        f"tried({str(place)!r}, lambda: open({str(place)!r}, 'w').write('x'))" for place in places
    )
    log = _attack(
        scene,
        lines
        + """
tried("become root", lambda: os.setuid(0) or "root")
tried("/etc/shadow", lambda: read("/etc/shadow"))
open("/tmp/" + "private-marker", "w").write("x")  # its own /tmp: allowed, seen by no one
open("mine.txt", "w").write("x")  # its own working directory: allowed
""",
    )
    _all_blocked(log, len(places) + 2)
    assert not any(place.exists() for place in places)
    assert not Path("/tmp/private-marker").exists()


def test_a_task_cannot_escape_its_working_dir_through_the_api(scene: Scene) -> None:
    link = scene.task_root / "escape"
    link.symlink_to("/etc")
    for outside in ("/etc", str(scene.task_root / ".." / "data"), str(link)):
        body = {"name": unique("escape"), "project": scene.attacker_project, "gpu": 1,
                "command": ["true"], "working_dir": outside}  # fmt: skip
        with pytest.raises(ApiError) as refused:
            scene.client.submit(WorkloadIn.model_validate(body))
        assert refused.value.status == 422
        assert "outside the task roots" in str(refused.value)


def test_a_working_dir_under_a_task_root_is_the_tasks_and_only_its(scene: Scene) -> None:
    allowed = scene.task_root / unique("team")
    allowed.mkdir()
    (allowed / "input.txt").write_text("data")
    os.chmod(allowed, 0o777)
    sibling = scene.task_root / "sibling"
    sibling.mkdir(exist_ok=True)
    (sibling / "other.txt").write_text("someone else's")
    log = _attack(
        scene,
        f"""
        print("cwd", os.getcwd(), open("input.txt").read(), flush=True)
        tried("sibling under the root", lambda: os.listdir({str(sibling)!r}))
        """,
        working_dir=str(allowed),
    )
    assert f"cwd {allowed} data" in log
    _all_blocked(log, 1)


def test_a_fork_bomb_stops_at_the_project_limit(scene: Scene) -> None:
    log = _attack(
        scene,
        """
        children = 0
        try:
            for _ in range(10 * 40):
                if os.fork() == 0:
                    time.sleep(3)
                    os._exit(0)
                children += 1
        except OSError as error:
            print(f"BLOCKED fork bomb after {children} children: {error}", flush=True)
        else:
            print(f"ESCAPED fork bomb: {children} children", flush=True)
        """,
    )
    _all_blocked(log, 1)
    children = int(log.split("after ")[1].split()[0])
    assert children < MAX_PROCESSES
    _victim_alive(scene)


def test_a_stopped_isolated_task_gets_sigterm_and_its_grace(scene: Scene) -> None:
    name = unique("graceful")
    code = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    print('got SIGTERM, checkpointing', flush=True); time.sleep(0.5); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    body = {"name": name, "project": scene.attacker_project, "gpu": 1, "grace_period_s": 20,
            "command": [sys.executable, "-c", code]}  # fmt: skip
    scene.client.submit(WorkloadIn.model_validate(body))
    wait_for(lambda: "ready" in _log(scene.client, scene.attacker_project, name), 30, "ready")
    scene.client.suspend(scene.attacker_project, name)

    def last_task() -> TaskOut:
        return scene.client.describe(scene.attacker_project, name).task_list[-1]

    wait_for(lambda: last_task().finished_at is not None, 30, "the task's end")
    # It ended by itself after its handler's work (exit 0), not killed with bwrap (137).
    assert last_task().exit_code == 0, last_task()
    assert "got SIGTERM, checkpointing" in _log(scene.client, scene.attacker_project, name)


def test_the_cli_sends_no_default_working_dir_to_an_isolating_server(
    scene: Scene, tmp_path: Path
) -> None:
    assert httpx.get(scene.server.url + "/health").json()["task_isolation"] == "bubblewrap"
    env = {
        **os.environ,
        "GPUPOOL_CONFIG": str(tmp_path / "config.json"),
        "GPUPOOL_SERVER": scene.server.url,
        "GPUPOOL_TOKEN": scene.server.admin_token,
    }
    name = unique("cli")
    submit = [sys.executable, "-m", "gpupool", "submit", name, "--project"]
    submit += [scene.attacker_project, "--gpu", "1", "--", "pwd"]
    result = subprocess.run(submit, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result
    wait_for(
        lambda: scene.client.describe(scene.attacker_project, name).status == "completed",
        60,
        "the CLI's workload",
    )
    assert scene.client.describe(scene.attacker_project, name).working_dir is None
    own = scene.data_dir / "work" / scene.attacker_project / name
    assert _log(scene.client, scene.attacker_project, name).startswith(f"{own}\n")
