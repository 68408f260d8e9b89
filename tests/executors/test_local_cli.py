"""The local executor through the CLI, with real processes on declared GPUs: what issue 5
promises a team with one workstation. Each test runs `gpupool up` in its own data directory
and `gpupool down` at the end, and checks that no task process is left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupool.api.schemas import WorkloadIn
from gpupool.client.config import read_config
from gpupool.client.http import GpupoolClient
from gpupool.executors.local import live_task_groups
from gpupool.server.process import ServerProcess, free_port
from liveserver import wait_for


class Cli:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.data_dir = tmp / "data"
        self.env = dict(os.environ, GPUPOOL_CONFIG=str(tmp / "config.json"))
        self.port = free_port()

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "gpupool", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.tmp,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"gpupool {' '.join(args)} -> {result.returncode}\n{result}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)

    def up(self) -> None:
        self.run(
            "up", "--data-dir", str(self.data_dir), "--port", str(self.port), "--fake-gpus", "4x80G"
        )

    def _client(self) -> GpupoolClient:
        server, token = read_config(self.tmp / "config.json").login()
        return GpupoolClient(server, token)

    def status(self, name: str, project: str = "default") -> str:
        """The workload's status through the API: the polls of `wait_for` must not cost a CLI
        start each (seconds on a loaded machine, while the tasks under test run on)."""
        with self._client() as client:
            return str(client.describe(project, name).status)

    def log(self, name: str, project: str = "default") -> str:
        """Task 0's whole log through the API (as `gpupool logs` prints it)."""
        text, offset = [], 0
        with self._client() as client:
            while True:
                chunk = client.logs(project, name, 0, offset)
                text.append(chunk.text)
                offset = chunk.next_offset
                if chunk.complete or not chunk.text:
                    return "".join(text)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    c = Cli(tmp_path)
    c.up()
    yield c
    c.run("down", "--data-dir", str(c.data_dir), check=False)
    assert live_task_groups(c.data_dir) == [], "task processes left behind"


def test_two_half_gpu_workloads_share_one_device(cli: Cli) -> None:
    show = "import os; print('devices=' + os.environ['CUDA_VISIBLE_DEVICES'], flush=True)"
    for name in ("half-a", "half-b"):
        cli.run(
            "submit",
            name,
            "--gpu",
            "0.5",
            "--",
            sys.executable,
            "-c",
            f"{show}; import time; time.sleep(300)",  # ends with the test, even on a slow machine
        )
    wait_for(lambda: "devices=" in cli.log("half-a") and "devices=" in cli.log("half-b"))
    first = cli.log("half-a").splitlines()[0]
    assert first == cli.log("half-b").splitlines()[0]
    top = cli.json("top")
    shared = [d for n in top["nodes"] for d in n["devices"] if d["allocated_milli"]]
    assert [d["allocated_milli"] for d in shared] == [1000]
    assert first == f"devices={shared[0]['index']}"


@pytest.mark.slow  # waits out a real grace period: about 19 s
def test_a_workload_that_ignores_sigterm_is_killed_after_its_grace(cli: Cli) -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, "
        "lambda *a: print('SIGTERM ignored', flush=True)); print('up', flush=True); "
        "time.sleep(120)"
    )
    cli.run(
        "submit",
        "stubborn",
        "--gpu",
        "1",
        "--grace-period",
        "15",  # long enough to see it stopping on a loaded machine
        "--",
        sys.executable,
        "-c",
        stubborn,
    )
    wait_for(lambda: "up" in cli.log("stubborn"))
    cli.run("delete", "stubborn")
    wait_for(lambda: "SIGTERM ignored" in cli.log("stubborn"), timeout_s=10)
    assert cli.json("describe", "stubborn")["task_list"][0]["state"] == "stopping"
    wait_for(lambda: cli.run("describe", "stubborn", check=False).returncode == 3, 45)
    events = cli.json("list", "--all")
    assert "stubborn" not in [w["name"] for w in events["items"]]


@pytest.mark.slow  # about 45 s; CI's quick start runs the same story (`up --demo`) too
def test_founding_story_preempted_jobs_checkpoint_and_resume(cli: Cli) -> None:
    """Bob's four jobs fill four GPUs; Patty submits two; two of Bob's are preempted,
    checkpoint, and resume after Patty's finish, continuing from their checkpoints."""
    for name, quota in (("bob", "2"), ("patty", "2")):
        cli.run("project", "create", name, "--quota-gpu", quota)
    train = [
        sys.executable,
        "-m",
        "gpupool.demo.train",
        "--step-s",
        "0.1",  # Bob's jobs run 40 s: Patty comes before they end, even on a loaded machine
        "--checkpoint-every",
        "5",
    ]
    for index in range(1, 5):
        cli.run(
            "submit",
            f"bob-{index}",
            "--project",
            "bob",
            "--gpu",
            "1",
            "--",
            *train,
            "--steps",
            "400",
        )
    wait_for(lambda: all(cli.status(f"bob-{i}", "bob") == "running" for i in range(1, 5)))
    wait_for(
        lambda: all("starting from scratch" in cli.log(f"bob-{i}", "bob") for i in range(1, 5))
    )
    # Both of Patty's jobs through the API, back to back: a CLI start each (seconds on a loaded
    # machine) could let her first job finish before the second is submitted, and Bob's job
    # preempted for it would resume and be preempted again for the second (right, but another
    # story).
    with cli._client() as client:
        for index in range(1, 3):
            body = {"name": f"patty-{index}", "project": "patty", "gpu": 1, "grace_period_s": 30,
                    "command": [*train, "--steps", "20"]}  # fmt: skip
            client.submit(WorkloadIn.model_validate(body))
    wait_for(
        lambda: all(
            cli.status(f"patty-{i}", "patty") in ("running", "completed") for i in range(1, 3)
        ),
        timeout_s=30,
    )
    bob = {w["name"]: w for w in cli.json("list", "--project", "bob")["items"]}
    preempted = sorted(name for name, w in bob.items() if w["preemptions"] == 1)
    assert len(preempted) == 2, {n: (w["status"], w["preemptions"]) for n, w in bob.items()}
    for name in preempted:
        assert "stop requested: checkpointed at step" in cli.log(name, "bob")
    wait_for(
        lambda: all(cli.status(f"bob-{i}", "bob") == "completed" for i in range(1, 5)),
        timeout_s=150,
    )
    for name in preempted:
        log = cli.log(name, "bob")
        stopped_at = int(log.split("checkpointed at step ")[1].split()[0])
        resumed_at = int(log.split("resumed from checkpoint at step ")[1].split()[0])
        assert 0 < resumed_at <= stopped_at
        assert "task 0 started again (run 2)" in log
        assert "done: step 400" in log
        first = cli.run("logs", name, "--project", "bob", "--run", "1").stdout
        again = cli.run("logs", name, "--project", "bob", "--run", "2").stdout
        assert "checkpointed at step" in first and "done: step 400" not in first
        assert "resumed from checkpoint" in again and "started again" not in again
        assert log == f"{first}--- gpupool: task 0 started again (run 2) ---\n{again}"
    # No preempted job came back while Patty held her quota (later, a GPU may also come free
    # from one of Bob's own jobs finishing).
    patty_finished = sorted(
        cli.json("describe", f"patty-{i}", "--project", "patty")["task_list"][-1]["finished_at"]
        for i in range(1, 3)
    )
    bob_restarted = sorted(
        cli.json("describe", name, "--project", "bob")["task_list"][-1]["started_at"]
        for name in preempted
    )
    assert bob_restarted[0] >= patty_finished[0]


def test_a_killed_server_adopts_its_running_tasks(cli: Cli) -> None:
    code = "import time; print('working', flush=True); time.sleep(60)"
    cli.run("submit", "long", "--gpu", "1", "--", sys.executable, "-c", code)
    wait_for(lambda: "working" in cli.log("long"))
    launch = cli.json("describe", "long")["task_list"][0]["launch_id"]
    pid_file = cli.data_dir / "server.pid"
    server_pid = int(pid_file.read_text().split()[0])
    os.kill(server_pid, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{server_pid}").exists() or _zombie(server_pid))
    assert live_task_groups(cli.data_dir), "the task must outlive the server"

    restarted = ServerProcess(
        cli.data_dir,
        port=cli.port,
        extra_args=("--executor", "local", "--fake-gpus", "4x80G", "--stop-tasks-on-exit"),
    )
    restarted.start()
    pid_file.write_text(f"{restarted.pid} {restarted.url}\n")
    detail = cli.json("describe", "long")
    assert detail["status"] == "running"
    assert [t["launch_id"] for t in detail["task_list"]] == [launch]
    assert cli.log("long").count("working") == 1


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except OSError:
        return True


RENDEZVOUS = """
import os, socket
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
assert (os.environ["GPUPOOL_RANK"], os.environ["GPUPOOL_WORLD_SIZE"]) == (str(rank), str(world))
assert (os.environ["GPUPOOL_MASTER_ADDR"], os.environ["GPUPOOL_MASTER_PORT"]) == (addr, str(port))
print(f"rank {rank} of {world} local_rank {os.environ['LOCAL_RANK']} at {addr}:{port}", flush=True)
if rank == 0:
    server = socket.create_server((addr, port))
    peer, _ = server.accept()
    message = peer.makefile().readline().strip()
    peer.sendall(b"hello from rank 0\\n")
else:
    while True:  # rank 0 may not listen yet
        try:
            peer = socket.create_connection((addr, port), timeout=60)
            break
        except ConnectionRefusedError:
            import time; time.sleep(0.05)
    peer.sendall(b"hello from rank 1\\n")
    message = peer.makefile().readline().strip()
print(f"rank {rank} got: {message}", flush=True)
"""


def test_a_gang_meets_through_master_addr_and_port(cli: Cli) -> None:
    # Inline: an isolated task (root with bubblewrap) sees none of the submitter's files.
    cli.run("submit", "meet", "--tasks", "2", "--gpu", "1", "--", sys.executable, "-c", RENDEZVOUS)
    wait_for(lambda: cli.status("meet") in ("completed", "failed"), timeout_s=60)
    logs = cli.run("logs", "meet", "--all-tasks").stdout
    assert cli.status("meet") == "completed", logs
    assert "[0] rank 0 got: hello from rank 1" in logs
    assert "[1] rank 1 got: hello from rank 0" in logs
    ports = {line.rsplit(":", 1)[1] for line in logs.splitlines() if " at 127.0.0.1:" in line}
    assert len(ports) == 1, logs
    assert "[0] rank 0 of 2 local_rank 0" in logs and "[1] rank 1 of 2 local_rank 0" in logs


def test_the_torch_distributed_example_runs_as_a_gang(cli: Cli) -> None:
    try:
        import torch.distributed  # noqa: F401
    except ImportError as error:
        pytest.skip(f"torch is not installed here ({error}); the example needs it")
    example = Path(__file__).parents[2] / "examples" / "ddp_gloo.py"
    cli.run("submit", "ddp", "--tasks", "2", "--gpu", "1", "--", sys.executable, str(example))
    wait_for(lambda: cli.status("ddp") in ("completed", "failed"), timeout_s=120)
    logs = cli.run("logs", "ddp", "--all-tasks").stdout
    assert cli.status("ddp") == "completed", logs
    assert "[0] rank 0/2: all_reduce sum = 3.0" in logs
    assert "weights identical across ranks: True" in logs
    assert "[1] rank 1/2: all_reduce sum = 3.0" in logs


BIG_LOG = """
import os, sys
for i in range(30_000):  # 3 MB: three pages of the API; é is two bytes, cut at some page ends
    print(f"line {i:06d} " + "é" * 44)
print("waiting for go", flush=True)
while not os.path.exists(os.path.join(os.environ["GPUPOOL_CHECKPOINT_DIR"], "go")):
    import time; time.sleep(0.02)
for i in range(2_000):  # written right before the task exits, in one buffered burst
    sys.stdout.write(f"late {i:04d}\\n")
sys.stdout.write("the last line\\n")
"""


@pytest.mark.slow
def test_logs_page_past_1_mib_tail_and_follow_to_the_last_line(cli: Cli) -> None:
    # Inline, and told to go through its checkpoint directory: an isolated task (root with
    # bubblewrap) sees none of the submitter's files.
    cli.run("submit", "big", "--gpu", "1", "--", sys.executable, "-u", "-c", BIG_LOG)
    followed = cli.tmp / "followed.txt"
    with followed.open("w") as out:
        follower = subprocess.Popen(
            [sys.executable, "-m", "gpupool", "logs", "big", "-f"],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            env=cli.env,
            cwd=cli.tmp,
        )
        try:
            with cli._client() as client:
                wait_for(
                    lambda: "waiting for go" in client.logs("default", "big", tail=1).text,
                    timeout_s=60,
                )
            tail = cli.run("logs", "big", "--tail", "2").stdout
            assert tail == f"line 029999 {'é' * 44}\nwaiting for go\n"
            (cli.data_dir / "checkpoints" / "default" / "big" / "go").touch()
            assert follower.wait(timeout=60) == 0, follower.stderr
        finally:
            follower.kill()
    text = followed.read_text()
    lines = text.splitlines()
    assert len(text.encode()) > 2 << 20 and "\ufffd" not in text
    assert lines[0] == f"line 000000 {'é' * 44}" and lines[29_999].startswith("line 029999")
    assert lines[-3:] == ["late 1999", "the last line", "gpupool: task ended: completed"]
    assert len(lines) == 30_000 + 1 + 2_000 + 2
    assert cli.run("logs", "big").stdout == text
    assert cli.run("logs", "big", "--run", "1").stdout == text
    assert cli.run("logs", "big", "--since", "1h").stdout == text
    assert cli.run("logs", "big", "--since", "0s").stdout == ""  # its one run ended before
    assert cli.run("logs", "big", "--tail", "1", "-f").stdout == "gpupool: task ended: completed\n"
    missing = cli.run("logs", "big", "--run", "2", check=False)
    assert missing.returncode != 0 and "task 0 has runs 1..1" in missing.stderr


def test_up_on_a_port_another_gpupool_answers_says_so(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    other = Cli(tmp_path / "other")
    other.port = cli.port
    result = other.run(
        "up", "--data-dir", str(other.data_dir), "--port", str(cli.port), check=False
    )
    assert result.returncode == 1, result
    assert f"error: port {cli.port} is in use: another gpupool (version " in result.stderr
    assert "gpupool up --port " in result.stderr and "gpupool down" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (other.data_dir / "server.pid").exists()
    assert cli.json("top")["nodes"], "the first gpupool still serves"


def test_up_on_a_port_another_program_holds_says_so(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        result = cli.run("up", "--data-dir", str(cli.data_dir), "--port", str(port), check=False)
    assert result.returncode == 1, result
    assert f"error: port {port} is in use: another program listens there" in result.stderr
    assert "--port" in result.stderr and "Traceback" not in result.stderr + result.stdout


def _corrupt(journal: Path) -> None:
    # four bad lines, then a last one cut short (as by a crash: not counted as corrupt)
    journal.write_bytes(b'\xff\xfe not json\n[1, 2]\n{"op": "pid"}\n\x00\x00\n{"op"')


def test_down_with_a_corrupt_journal_still_stops_the_server(cli: Cli) -> None:
    server_pid = int((cli.data_dir / "server.pid").read_text().split()[0])
    _corrupt(cli.data_dir / "local" / "journal.jsonl")
    result = cli.run("down", "--data-dir", str(cli.data_dir), check=False)
    assert result.returncode == 0, result
    assert "journal.jsonl is unreadable (4 of its 4 lines are not valid records)" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "gpupool is down" in result.stdout
    assert _zombie(server_pid)


def test_down_with_a_corrupt_journal_kills_leftover_tasks(cli: Cli) -> None:
    code = "import time; print('working', flush=True); time.sleep(120)"
    cli.run("submit", "left", "--gpu", "1", "--", sys.executable, "-c", code)
    wait_for(lambda: "working" in cli.log("left"))
    server_pid = int((cli.data_dir / "server.pid").read_text().split()[0])
    os.kill(server_pid, signal.SIGKILL)  # the task outlives it
    wait_for(lambda: _zombie(server_pid))
    (group,) = live_task_groups(cli.data_dir)
    _corrupt(cli.data_dir / "local" / "journal.jsonl")
    result = cli.run("down", "--data-dir", str(cli.data_dir), check=False)
    assert result.returncode == 0, result
    assert "journal.jsonl is unreadable" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    wait_for(lambda: _zombie(group), what="the leftover task to be killed")
