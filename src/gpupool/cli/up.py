"""`gpupool up`, `gpupool down`, `gpupool demo`: the whole product on this machine.

`up` starts `gpupool server` in the background with the local executor (processes on this
machine, on its GPUs, or on declared ones when it has none), logs the CLI in as the first
admin, makes a `default` project, and says how to submit. `down` stops the server, which stops
every task first. Their state (database, logs, checkpoints) stays in the data directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpupool.cli.common import connect, fail, handled, stdout

DEFAULT_DATA_DIR = Path(".gpupool")
DEFAULT_FAKE_GPUS = "4x80G"

DataDirOption = Annotated[Path, typer.Option(help="Where the database, logs and checkpoints live.")]


def _pid_file(data_dir: Path) -> Path:
    return data_dir / "server.pid"


def _running_pid(data_dir: Path) -> int | None:
    try:
        pid = int(_pid_file(data_dir).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    return None if state == "Z" else pid


def _url_of(data_dir: Path) -> str | None:
    try:
        return _pid_file(data_dir).read_text().split()[1]
    except (OSError, IndexError):
        return None


def _gpu_choice(fake_gpus: str | None) -> tuple[str | None, str]:
    """(fake spec or None for NVML, a sentence saying which)."""
    if fake_gpus:
        return fake_gpus, f"declared GPUs {fake_gpus} (--fake-gpus)"
    from gpupool.executors.gpus import open_backend

    backend, note = open_backend(None)
    count = len(backend.devices())
    backend.close()
    if note is None and count:
        return None, f"{count} NVIDIA GPU(s) found by NVML"
    return DEFAULT_FAKE_GPUS, (
        f"no NVIDIA GPU here ({note}); declared {DEFAULT_FAKE_GPUS} instead: tasks run as real "
        "processes, with fake devices"
    )


def up(
    data_dir: DataDirOption = DEFAULT_DATA_DIR,
    port: Annotated[int, typer.Option(help="Port of the API on 127.0.0.1.")] = 8000,
    fake_gpus: Annotated[
        str | None,
        typer.Option(help="Declare devices (4x80G) instead of this machine's GPUs."),
    ] = None,
    demo: Annotated[bool, typer.Option(help="Then run the founding-story demo.")] = False,
    isolation: Annotated[
        str,
        typer.Option(
            help="auto: tasks sandboxed (bubblewrap, one account per project) when run as root "
            "with bwrap installed, else not, with a warning; bubblewrap: refuse to start "
            "without; none. docs/security.md#tasks",
        ),
    ] = "auto",
    placement: Annotated[
        str,
        typer.Option(
            envvar="GPUPOOL_PLACEMENT",
            help="Placement policy (gpupool server --help); default: default.",
        ),
    ] = "default",
) -> None:
    """Start gpupool on this machine: server, scheduler and local executor in the background."""
    from gpupool.server.process import ServerProcess

    data_dir = data_dir.resolve()
    console = stdout()
    pid = _running_pid(data_dir)
    if pid is not None:
        url = _url_of(data_dir) or f"http://127.0.0.1:{port}"
        console.print(f"gpupool is already up (pid {pid}) at {url}.")
    else:
        taken = _port_taken(port)
        if taken is not None:
            fail(taken, code=1)
        spec, gpus = _gpu_choice(fake_gpus)
        _say_isolation(isolation, data_dir)
        args = ["--executor", "local", "--stop-tasks-on-exit", "--cycle-interval", "0.5"]
        args += ["--isolation", isolation]
        args += ["--placement", placement]
        if spec:
            args += ["--fake-gpus", spec]
        server = ServerProcess(data_dir, port=port, extra_args=tuple(args))
        server.simulated_nodes = "0x0"
        try:
            server.start(timeout_s=60)
        except (RuntimeError, TimeoutError) as error:
            server.kill()
            if "address already in use" in str(error):  # taken since the check above
                fail(
                    _port_taken(port) or f"port {port} is in use: pick another with --port", code=1
                )
            fail(f"the server did not start: {error}", code=1)
        url = server.url
        _pid_file(data_dir).write_text(f"{server.pid} {url}\n")
        console.print(f"gpupool is up at {url} (pid {server.pid}) with {gpus}.")
        console.print(f"  data, logs and checkpoints: {data_dir}; server log: {server.log_path}")
    _login(data_dir, url)
    with connect() as client:
        from gpupool.api.schemas import ProjectIn

        if not client.projects():
            gpus_total = sum(node.gpu_count for node in client.nodes())
            body = {"name": "default", "quota": {"gpu": gpus_total}}
            client.create_project(ProjectIn.model_validate(body))
    from gpupool.client.config import config_path, read_config, write_config

    config = read_config(config_path())
    if config.project is None:
        write_config(replace(config, project="default"), config_path())
    console.print(
        f"Dashboard: {url}/ (log in with the token in {data_dir / 'admin-token'}, "
        "or open the link `gpupool dashboard` prints)\n"
        "Logged in as admin. Try:\n"
        "  gpupool submit hello --gpu 0.5 -- python -c \"print('hello from a GPU share')\"\n"
        "  gpupool list; gpupool logs hello; gpupool top\n"
        "  gpupool demo      (the founding story: preemption and resume, about a minute)\n"
        "  gpupool down      (stops every task and the server)"
    )
    if demo:
        run_demo()


def _say_isolation(isolation: str, data_dir: Path) -> None:
    """Say whether tasks will be isolated: loudly when they will not; fail for a bad choice."""
    from gpupool.executors.isolation import choose_isolation

    try:
        chosen, warning = choose_isolation(isolation, data_dir)
    except ValueError as error:
        fail(str(error), code=2)
    if warning is not None:
        Console(stderr=True).print(warning, style="bold red", markup=False, highlight=False)
    else:
        stdout().print(f"Tasks are isolated ({chosen.mode}: one unprivileged account per project).")


def _port_taken(port: int) -> str | None:
    """None if `gpupool up` can serve on 127.0.0.1:`port`, else the error to print: what is
    there and what to do."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as error:
            if error.errno == errno.EACCES:
                return (
                    f"port {port} needs privileges this user lacks: pick one above 1023 with --port"
                )
        else:
            return None
    from gpupool.server.process import free_port

    what = "another program listens there"
    import httpx  # here, not at the top: every gpupool command would pay for it

    with contextlib.suppress(httpx.HTTPError, ValueError, TypeError, KeyError):
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).json()
        what = f"another gpupool (version {health['version']}) already answers there"
    return (
        f"port {port} is in use: {what} (http://127.0.0.1:{port}). Start this one on another "
        f"port with `gpupool up --port {free_port()}`, or stop that one first (`gpupool down "
        "--data-dir DIR` with the data directory it was started with)"
    )


def _login(data_dir: Path, url: str) -> None:
    from gpupool.client.config import ClientConfig, config_path, read_config, write_config

    token = (data_dir / "admin-token").read_text(encoding="utf-8").strip()
    current = read_config(config_path())
    project = current.project if current.server == url else None
    write_config(ClientConfig(server=url, token=token, project=project), config_path())


def down(data_dir: DataDirOption = DEFAULT_DATA_DIR) -> None:
    """Stop every task and the server that `gpupool up` started."""
    data_dir = data_dir.resolve()
    pid = _running_pid(data_dir)
    console = stdout()
    if pid is None:
        _pid_file(data_dir).unlink(missing_ok=True)
        console.print(f"gpupool is not running (no server for {data_dir}).")
        _kill_leftovers(data_dir)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _running_pid(data_dir) == pid:
        time.sleep(0.1)
    if _running_pid(data_dir) == pid:
        os.kill(pid, signal.SIGKILL)
        console.print("the server did not stop in 90 s: killed it")
    left = _kill_leftovers(data_dir)
    _pid_file(data_dir).unlink(missing_ok=True)
    extra = f"; killed {left} leftover task process group(s)" if left else ""
    console.print(f"gpupool is down{extra}.")


def _kill_leftovers(data_dir: Path) -> int:
    """Backstop after the server: SIGKILL any task process group still alive. A journal that
    cannot be read is said, not fatal: the tasks are then also found by their log files."""
    from gpupool.executors.local_recovery import find_task_groups

    found = find_task_groups(data_dir)
    if found.journal_problem is not None:
        journal = data_dir / "local" / "journal.jsonl"
        Console(stderr=True, highlight=False, markup=False).print(
            f"warning: the local executor's journal {journal} is unreadable "
            f"({found.journal_problem}); looked for leftover tasks by their log files instead. "
            "Move it aside before the next gpupool up, which cannot replay it.",
            soft_wrap=True,
        )
    for group in found.groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    return len(found.groups)


def demo(
    bob_steps: Annotated[int, typer.Option(help="Steps of each of Bob's jobs.")] = 60,
) -> None:
    """The founding story on the running server: preemption, checkpoint, resume."""
    run_demo(bob_steps)


def run_demo(bob_steps: int = 60) -> None:
    from gpupool.demo.story import DemoRefusedError, run_story

    console = stdout()
    run_id = time.strftime("%H%M%S")
    with connect() as client:
        try:
            result = run_story(client, console.print, run_id, bob_steps=bob_steps)
        except DemoRefusedError as refused:
            fail(f"{refused} (nothing was submitted)", code=1)
        except TimeoutError as late:
            fail(f"{late}: see `gpupool list --all` and the server log", code=1)
        console.print(
            f"Demo done in {result.seconds:.0f} s. See: gpupool list --all; "
            f"gpupool describe {result.preempted[0].split('/')[1]} --project bob"
            if result.preempted
            else f"Demo done in {result.seconds:.0f} s."
        )
        usage = client.usage(by="project", minutes=10, bucket_s=60)
        for point in usage.summary:
            console.print(
                f"  {point.key}: {point.allocated_gpu_milli / 1000:.2f} GPU allocated, "
                f"{point.utilized_gpu_milli / 1000:.2f} utilized on average (last 10 min)"
            )


def dashboard(
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open it in this machine's web browser.")
    ] = False,
) -> None:
    """Print a link that opens the web dashboard logged in as you (it holds your token)."""
    from gpupool.client.config import effective_config

    with handled():
        server, token = effective_config().login()
    link = f"{server.rstrip('/')}/#login={token}"
    console = stdout()
    console.print(link, soft_wrap=True)
    console.print(
        "  The link holds your token: do not share it. The part after '#' never reaches the "
        "server; the page exchanges it for a session cookie and removes it from the address.",
        style="dim",
    )
    if open_browser:
        import webbrowser

        webbrowser.open(link)


def register(app: typer.Typer) -> None:
    app.command("up")(up)
    app.command("dashboard")(dashboard)
    app.command("down")(down)
    app.command("demo")(demo)
