"""How a local task is kept from the server and from other tasks (docs/security.md#tasks).

`Bubblewrap` (the server runs as root, Debian's `bwrap` is installed): each task runs

- as its project's unprivileged account (`gpupool-<project>-<hash>`, created with `useradd
  --system` on the project's first launch; no home, no login shell, no supplementary groups),
  with no capabilities and `no_new_privs` (`setpriv`), and at most `max_processes` processes
  per account (`RLIMIT_NPROC`, `prlimit`): a fork bomb stops there;
- in its own PID namespace (`bwrap --unshare-pid`): it sees, and can signal, only its own
  processes; `/proc` shows nothing else, the server included;
- on a read-only view of the host (`--ro-bind / /`) with a private `/tmp` and `/dev/shm`,
  a minimal `/dev` (the NVIDIA device nodes passed through), and the data directory and each
  task root hidden under an empty tmpfs, with only its own working and checkpoint directories
  bound back in, writable.

The shim stays outside, as the server's user: it writes the task's pid and exit files and
leads the process group the executor signals. bwrap's own processes ignore SIGTERM (`env
--ignore-signal`), the task gets it back (`env --default-signal`), so a stop reaches the task
with its grace period; SIGKILL of the group ends bwrap, and with it (`--die-with-parent`,
the PID namespace) every process of the task.

`NoIsolation`: tasks run as the server's user, as before; the server says so loudly at start.
"""

from __future__ import annotations

import glob
import grp
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpupool.executors.base import Launch

ISOLATION_MODES = ("auto", "bubblewrap", "none")
DEFAULT_MAX_PROCESSES = 4096
"""Processes (threads count too) one project's account may have at once."""

NOT_ISOLATED = (
    "gpupool: WARNING: tasks are NOT isolated: they run as this server's user ({user}) and "
    "can read its data directory (database, admin token, every task's logs) and signal each "
    "other; {why}. To isolate them, run the server as root with bubblewrap installed "
    "(apt-get install bubblewrap): see docs/security.md#tasks"
)


@dataclass(frozen=True, slots=True)
class Account:
    """The unprivileged account a project's tasks run as."""

    name: str
    uid: int
    gid: int


class Accounts(Protocol):
    """Where project accounts come from: `SystemAccounts` (useradd) or a fixed one in tests."""

    def account_for(self, project: str) -> Account: ...


def account_name(project: str) -> str:
    """A stable, valid user name for `project`: `gpupool-<slug>-<hash>`, at most 29 characters
    (the hash keeps two projects whose slugs agree apart)."""
    slug = re.sub(r"[^a-z0-9]+", "-", project.lower()).strip("-")[:12].strip("-") or "p"
    digest = hashlib.sha256(project.encode()).hexdigest()[:6]
    return f"gpupool-{slug}-{digest}"


class SystemAccounts:
    """System accounts of this machine, created on first use (needs root)."""

    def account_for(self, project: str) -> Account:
        name = account_name(project)
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            result = subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--home-dir",
                    "/nonexistent",
                    "--shell",
                    "/usr/sbin/nologin",
                    "--user-group",
                    "--comment",
                    f"gpupool project {project[:64]}",
                    name,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                raise OSError(
                    f"cannot create the account {name} for project {project!r}: "
                    f"useradd: {result.stderr.strip() or result.returncode}"
                ) from None
        return Account(name, entry.pw_uid, entry.pw_gid)


def remove_account(project: str) -> None:
    """Delete `project`'s account and group if they exist (tests clean up with it)."""
    name = account_name(project)
    subprocess.run(["userdel", name], capture_output=True, check=False)
    try:
        grp.getgrnam(name)
    except KeyError:
        return
    subprocess.run(["groupdel", name], capture_output=True, check=False)


class Isolation(Protocol):
    """How the local executor runs a task's command: `NoIsolation` or `Bubblewrap`."""

    @property
    def mode(self) -> str:
        """`bubblewrap` or `none`: given to tasks as `GPUPOOL_ISOLATION`."""
        ...

    def working_dir(self, launch: Launch, fallback: Path) -> Path:
        """Where the task runs; `ValueError` (the reason) when it may not run where it asked."""
        ...

    def working_dir_problem(self, working_dir: str | None) -> str | None:
        """Why a workload may not ask for `working_dir` (checked at submit); None if it may."""
        ...

    def prepare(self, launch: Launch, directories: Sequence[Path]) -> dict[str, str]:
        """Make `directories` (working and checkpoint) the task's own; returns variables for
        its environment (who it runs as)."""
        ...

    def wrap(
        self, launch: Launch, command: Sequence[str], writable: Sequence[Path], cwd: Path
    ) -> list[str]:
        """The command line that runs `command` isolated, with `writable` bound in."""
        ...


class NoIsolation:
    """Tasks run as the server's user, where they ask (or in their checkpoint directory)."""

    mode = "none"

    def working_dir(self, launch: Launch, fallback: Path) -> Path:
        if launch.working_dir and Path(launch.working_dir).is_dir():
            return Path(launch.working_dir)
        return fallback

    def working_dir_problem(self, working_dir: str | None) -> str | None:
        return None

    def prepare(self, launch: Launch, directories: Sequence[Path]) -> dict[str, str]:
        return {}

    def wrap(
        self, launch: Launch, command: Sequence[str], writable: Sequence[Path], cwd: Path
    ) -> list[str]:
        return list(command)


class Bubblewrap:
    """Each task in a bubblewrap sandbox as its project's account (the module's docstring)."""

    mode = "bubblewrap"

    def __init__(
        self,
        data_dir: Path,
        task_roots: Sequence[Path] = (),
        accounts: Accounts | None = None,
        max_processes: int = DEFAULT_MAX_PROCESSES,
        bwrap: str = "bwrap",
    ) -> None:
        self._data_dir = data_dir.resolve()
        self._task_roots = tuple(root.resolve() for root in task_roots)
        self._accounts = accounts or SystemAccounts()
        self._max_processes = max_processes
        self._bwrap = bwrap
        self._readable = toolchain_dirs(os.environ)
        self.work_dir = self._data_dir / "work"

    def working_dir_problem(self, working_dir: str | None) -> str | None:
        if not working_dir:
            return None
        asked = Path(working_dir).resolve()
        if any(asked.is_relative_to(root) for root in self._task_roots):
            return None
        roots = ", ".join(str(root) for root in self._task_roots) or "none configured"
        return (
            f"working_dir {working_dir} is outside the task roots ({roots}) of this server, "
            "which isolates tasks: submit without a working directory (the task runs in its "
            "own one under the data directory), or ask an admin to allow a root with "
            "`gpupool server --task-root DIR`"
        )

    def working_dir(self, launch: Launch, fallback: Path) -> Path:
        if not launch.working_dir:
            return self.work_dir / launch.project / launch.workload
        problem = self.working_dir_problem(launch.working_dir)
        if problem is not None:
            raise ValueError(problem)
        asked = Path(launch.working_dir).resolve()
        if not asked.is_dir():
            raise ValueError(f"working_dir {launch.working_dir} is not a directory")
        return asked

    def prepare(self, launch: Launch, directories: Sequence[Path]) -> dict[str, str]:
        account = self._accounts.account_for(launch.project)
        for directory in directories:
            if directory.is_relative_to(self._data_dir):
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.chown(directory, account.uid, account.gid)
                directory.chmod(0o700)
        return {"USER": account.name, "LOGNAME": account.name}

    def wrap(
        self, launch: Launch, command: Sequence[str], writable: Sequence[Path], cwd: Path
    ) -> list[str]:
        account = self._accounts.account_for(launch.project)
        args = ["env", "--ignore-signal=TERM", self._bwrap, "--die-with-parent"]
        args += ["--unshare-pid", "--unshare-ipc", "--ro-bind", "/", "/"]
        args += ["--dev", "/dev", *_gpu_devices()]
        args += ["--proc", "/proc"]
        args += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm"]
        args += _layout(
            hide=[self._data_dir, *self._task_roots],
            readable=self._readable,
            writable=writable,
        )
        args += ["--chdir", str(cwd), "--"]
        args += ["env", "--default-signal=TERM"]
        args += ["prlimit", f"--nproc={self._max_processes}:{self._max_processes}", "--"]
        args += ["setpriv", f"--reuid={account.uid}", f"--regid={account.gid}"]
        args += ["--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"]
        return [*args, "--", *command]


def _layout(hide: Sequence[Path], readable: Sequence[Path], writable: Sequence[Path]) -> list[str]:
    """bwrap's mounts after the private /tmp: the first parent that others may not enter of
    every path the task needs (like a 0700 `/root` holding `.gpupool`) covered by an empty
    tmpfs (the account could neither pass it nor see anything in it); `readable` bound back
    read-only; `hide` (data directory, task roots) covered; `writable` bound back writable.
    Missing parents on a tmpfs are made 0755 (bwrap would make them 0700, root's)."""
    args: list[str] = []
    hidden = [Path("/tmp")]
    made: set[Path] = set()

    def reach(path: Path) -> None:
        for parent in _parents_below(path, hidden):
            if parent not in made:
                made.add(parent)
                args.extend(["--perms", "0755", "--dir", str(parent)])

    for closed in _closed_parents([*readable, *hide, *writable]):
        if not any(closed.is_relative_to(h) for h in hidden):
            hidden.append(closed)
            args.extend(["--tmpfs", str(closed)])
    for path in readable:
        if any(path.is_relative_to(h) for h in hidden) and not any(
            path.is_relative_to(h) for h in hide
        ):
            reach(path)
            args.extend(["--ro-bind", str(path), str(path)])
    for path in hide:
        if path.is_dir():
            reach(path)
            hidden.append(path)
            args.extend(["--tmpfs", str(path)])
    for path in dict.fromkeys(writable):
        reach(path)
        args.extend(["--bind", str(path), str(path)])
    return args


def _closed_parents(paths: Sequence[Path]) -> list[Path]:
    """For each of `paths`, its first parent that others may not enter, top down."""
    found = set()
    for path in paths:
        for parent in reversed(path.parents):
            try:
                closed = not os.stat(parent).st_mode & 0o001
            except OSError:
                break
            if closed:
                found.add(parent)
                break
    return sorted(found, key=lambda path: len(path.parts))


def toolchain_dirs(server_env: Mapping[str, str]) -> list[Path]:
    """What a task may need to read wherever it lies (under /tmp, a 0700 home): the server's
    Python environment, gpupool's own code, and the directories of its `PATH` and
    `PYTHONPATH` (a task's `python` is the server's)."""
    import gpupool

    found = [Path(sys.prefix), Path(sys.base_prefix), Path(gpupool.__file__).parent.parent]
    for name in ("PATH", "PYTHONPATH"):
        found += [Path(part) for part in server_env.get(name, "").split(os.pathsep) if part]
    return [path.resolve() for path in dict.fromkeys(found) if path.is_absolute() and path.is_dir()]


def _parents_below(path: Path, hidden: Sequence[Path]) -> list[Path]:
    """The parents of `path` below the deepest of `hidden` that holds it, top down."""
    roots = [root for root in hidden if path.is_relative_to(root) and path != root]
    if not roots:
        return []
    root = max(roots, key=lambda r: len(r.parts))
    return [parent for parent in reversed(path.parents) if parent.is_relative_to(root)][1:]


def _gpu_devices() -> list[str]:
    """`--dev-bind` of each NVIDIA device node of this machine (none without a driver)."""
    args: list[str] = []
    for path in sorted(glob.glob("/dev/nvidia*")):
        args += ["--dev-bind", path, path]
    return args


def bubblewrap_problem(bwrap: str = "bwrap") -> str | None:
    """Why tasks cannot be isolated here (not root, no bubblewrap, a sandbox that does not
    start); None when they can: a real sandbox is started once to be sure."""
    if os.geteuid() != 0:
        return "the server does not run as root, so it cannot switch tasks to other accounts"
    missing = [tool for tool in (bwrap, "setpriv", "prlimit", "useradd") if not shutil.which(tool)]
    if missing:
        return f"{', '.join(missing)} not found (apt-get install bubblewrap util-linux passwd)"
    probe = ["env", "--ignore-signal=TERM", bwrap, "--die-with-parent", "--unshare-pid"]
    probe += ["--unshare-ipc", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    probe += ["--", "env", "--default-signal=TERM", "prlimit", "--nproc=64:64", "--"]
    probe += ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs"]
    probe += ["--inh-caps=-all", "--bounding-set=-all", "--", "true"]
    try:
        result = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap did not run: {error}"
    if result.returncode != 0:
        return f"a bubblewrap sandbox does not start here: {result.stderr.strip()[:300]}"
    return None


def unwrap(command: Sequence[str]) -> list[str]:
    """The task's own command in a command line `Bubblewrap.wrap` made (others unchanged)."""
    if list(command[:2]) != ["env", "--ignore-signal=TERM"] or "setpriv" not in command:
        return list(command)
    rest = list(command[command.index("setpriv") :])
    return rest[rest.index("--") + 1 :] if "--" in rest else list(command)


def choose_isolation(
    mode: str,
    data_dir: Path,
    task_roots: Sequence[Path] = (),
    max_processes: int = DEFAULT_MAX_PROCESSES,
    bwrap: str = "bwrap",
) -> tuple[Isolation, str | None]:
    """(the isolation for `mode`, the warning to print or None). `auto`: bubblewrap where it
    works, else none with the warning; `bubblewrap` where it does not: `ValueError` (the
    server refuses to start); `none`: asked for, still warned about."""
    if mode not in ISOLATION_MODES:
        raise ValueError(f"--isolation {mode!r} is not known: use auto, bubblewrap or none")
    if max_processes < 1:
        raise ValueError(f"--task-max-processes must be at least 1 (got {max_processes})")
    for root in task_roots:
        resolved, data = root.resolve(), data_dir.resolve()
        if not resolved.is_dir():
            raise ValueError(f"--task-root {root} is not a directory")
        if resolved == Path("/") or data.is_relative_to(resolved) or resolved.is_relative_to(data):
            raise ValueError(
                f"--task-root {root} holds or lies in the data directory {data_dir} (or is /): "
                "name a directory of its own for tasks' working directories"
            )
    problem = None if mode == "none" else bubblewrap_problem(bwrap)
    if mode == "bubblewrap" and problem is not None:
        raise ValueError(f"--isolation bubblewrap: {problem}")
    if mode != "none" and problem is None:
        return Bubblewrap(data_dir, task_roots, max_processes=max_processes, bwrap=bwrap), None
    why = problem or "--isolation none was asked for"
    return NoIsolation(), NOT_ISOLATED.format(user=_user(), why=why)


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"
