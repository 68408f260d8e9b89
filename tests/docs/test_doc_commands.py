"""Every command that README.md and docs/*.md show is run here, in order, page by page.

What counts as a command (fenced blocks only; inline `code` in prose is not run):

- in a ```bash, ```sh or ```shell block: every line that is not blank and not a `# comment`;
  a line ending in `\\` goes on with the next one, and a here-document (`<<'EOF'`) takes the
  lines up to its delimiter;
- in a ```console block: every line starting with `$ ` (the prompt is dropped); the lines after
  it, up to the next `$ `, are what it prints. When that output starts with `error:`, the
  command is shown failing on purpose: it must exit non-zero and print that line.

Every other block (no language, `text`, `yaml`, `python`, ...) is output, a file or a synopsis
(`gpupool up [--port 8000]`) and is not run; a line there that starts with `$ `, or that starts
like a command (`gpupool `, `.venv/bin/`, `python `) and has no placeholder (`[`, `|`, `...`,
an upper-case word such as FILE), fails `test_commands_are_only_in_command_blocks`: a concrete
command belongs in a bash or console block, where it is run.

How a page runs: in a fresh copy of the repository's files (what a newcomer's clone holds), with
a fresh HOME (so the CLI's config is `~/.config/gpupool/config.json` there), each command in
its own `bash -c`, in the page's order, stopping at the first that fails. `.venv/bin/` in that
copy holds `gpupool` (this checkout's `python -m gpupool`), `python` (this interpreter), the
dev tools and `activate`, and is first on PATH, as after `source .venv/bin/activate`, so bare
`gpupool` and `python` are the same. The one rewrite: port 8000, the docs' default, is a free
port instead (`gpupool up` and `gpupool server` get `--port`, and `127.0.0.1:8000` in any
argument becomes it), so that the tests never meet another server on this machine. A line
ending in `&` starts in the background, and the next one runs once something answers on that
port (as a person typing the next line would wait). Afterwards every server a page started is
stopped.

Commands that cannot run here are in NOT_RUN, keyed by the exact line, with the reason and the
test that covers them in a shorter form. A listed line that no page shows any more fails
`test_every_listed_line_is_still_in_the_docs`; any other doc command is run, so a new one cannot
go untested.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_LANGUAGES = {"bash", "sh", "shell"}
CONSOLE = "console"
DOC_PORT = "8000"
COMMAND_TIMEOUT_S = 120
DEV_TOOLS = ("ruff", "mypy", "lint-imports", "pip")

# Doc lines that are not run here: the exact line -> why, and which test covers it instead.
NOT_RUN: dict[str, str] = {
    # README: Quick start
    "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/gpupool up --demo": (
        "the Quick start builds a venv and installs gpupool: .ci/run runs exactly this line "
        "first (CI); `gpupool up` and `gpupool demo` also run on the README and daily-use pages"
    ),
    ".venv/bin/python -m pytest": "runs the whole test suite, this one included: .ci/run (CI)",
    # python-client.md: install
    "python3 -m venv .venv && .venv/bin/pip install -e .   # from a checkout of this repository": (
        "builds a venv and installs gpupool over the page's own .venv (which holds the test's "
        "gpupool on its own port): .ci/run's first line does the same install (CI)"
    ),
    # local-executor.md: On a real GPU
    ".venv/bin/python scripts/gpu_live_check.py --out live.json             # on a GPU machine": (
        "needs an NVIDIA GPU (exit 2 without one); the line before it on the page runs the same "
        "steps on a declared device (--fake-gpus)"
    ),
    ".venv/bin/python scripts/gpu_live_check.py --mps --out live-mps.json   # the same, with MPS": (
        "needs an NVIDIA GPU and its MPS daemon; the --fake-gpus line before it runs the steps"
    ),
    # README: gpupool bench packing
    ".venv/bin/gpupool bench packing --all            # every openb variant x 10 seeds vs the "
    "published FGD (about 13 min)": (
        "about 13 min on 2 cores; tests/sim/test_packing_all.py::"
        "test_cli_all_writes_the_table_json_and_png runs --all on a tiny trace"
    ),
    # README: Run on Kubernetes
    ".venv/bin/gpupool server --kubernetes --kubeconfig ~/.kube/config &     # or in the "
    "cluster: deploy/kubernetes": (
        "needs a Kubernetes cluster; tests/kubernetes (a real API server with KWOK nodes, "
        "scripts/kube-testenv) run the server on one: test_founding_story_reclaims_through_eviction"
    ),
    ".venv/bin/gpupool login --server http://127.0.0.1:8000 --token-file .gpupool/admin-token"
    "   # the token the server wrote": (
        "needs the Kubernetes server of the line above; the same login runs in the README's "
        "service section"
    ),
    ".venv/bin/gpupool project create team-a --quota-gpu 8": (
        "on the Kubernetes server above; `project create` runs in the README's service section"
    ),
    ".venv/bin/gpupool submit train --project team-a --gpu 1 --tasks 4 --image "
    "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime -- torchrun train.py": (
        "pods need a Kubernetes cluster: tests/kubernetes/test_scheduling.py::"
        "test_gang_is_all_or_nothing_and_gets_its_rendezvous"
    ),
    ".venv/bin/gpupool submit nb --project team-a --type interactive --gpu 0.5 --image "
    "jupyter/base-notebook -- start-notebook.py": (
        "pods need a Kubernetes cluster: tests/kubernetes/test_scheduling.py::"
        "test_two_fractions_share_one_reserved_device"
    ),
    "kubectl -n gpupool-team-a get pods                                      # one pod per "
    "task, bound by gpupool": (
        "needs a Kubernetes cluster: tests/kubernetes/test_scheduling.py::"
        "test_kubectl_style_pods_are_workloads"
    ),
    # README: Benchmarks (the figures need the full runs)
    ".venv/bin/python benchmarks/cycle.py            # one cycle at 100, 1,000 and 10,000 "
    "nodes x 8 GPUs": (
        "minutes at 10,000 nodes; the README's `benchmarks/cycle.py --nodes 100` runs, and "
        "tests/test_benchmark_smoke.py::test_one_cycle_makes_consistent_decisions"
    ),
    ".venv/bin/python benchmarks/cycle.py --settled  # the cycle of a cluster run to rest first": (
        "up to 60 cycles at each size first (minutes at 10,000 nodes); "
        "tests/test_benchmark_smoke.py::test_settling_runs_the_cluster_to_rest settles one"
    ),
    ".venv/bin/python benchmarks/cycle_instructions.py # instructions of one 1,000-node cycle "
    "(valgrind)": (
        "minutes under valgrind, which CI does not install; "
        "tests/test_cycle_instructions.py::test_a_real_count_is_positive runs it at 3 nodes"
    ),
    ".venv/bin/python benchmarks/packing.py          # every packing policy on the openb trace, "
    "5 seeds": (
        "tens of minutes; tests/sim/test_packing_bench.py::test_run_packing_curve runs each "
        "policy on a small trace"
    ),
    ".venv/bin/python benchmarks/api.py              # the service under a burst: 4,000 "
    "submissions, then a reclaim": (
        "a minute of full load; tests/test_api_benchmark_smoke.py::test_quick_mode_completes "
        "runs its --quick mode"
    ),
    ".venv/bin/python benchmarks/kubernetes.py       # gpupool vs kube-scheduler on one real "
    "API server, 500 KWOK nodes": (
        "needs scripts/kube-testenv (Go, about 6 min to build) and minutes of load; "
        "tests/kubernetes cover the same server"
    ),
    # performance.md: the compiled core
    "GPUPOOL_COMPILE_CORE=1 .venv/bin/pip install .   # from a checkout, not -e; about 2 "
    "CPU-minutes": (
        "would replace the test's own install; tests/test_compile_core.py::"
        "test_the_compiled_core_makes_the_recorded_decisions builds the same wheel "
        "(benchmarks/compile_core.py), installs it aside and runs the core's tests on it"
    ),
    # README: Development. CI runs these four lines as they are (.ci/run, after the tests); here
    # they would fail this test for any file of the checkout, and mypy takes a minute cold.
    ".venv/bin/ruff check .            # lint": "CI runs this exact line: .ci/run, ruff check",
    ".venv/bin/ruff format --check .   # formatting": (
        "CI runs this exact line: .ci/run, ruff format --check"
    ),
    ".venv/bin/mypy                    # strict type check of src/gpupool": (
        "CI runs this exact line: .ci/run, mypy (a minute with a cold cache)"
    ),
    ".venv/bin/lint-imports            # layering: the core imports no driver, no I/O": (
        "CI runs this exact line: .ci/run, lint-imports"
    ),
    ".ci/run                           # everything CI runs, starting from the Quick start": (
        "is CI itself (builds a venv, runs every test, this one included)"
    ),
    # docs/simulator.md
    ".venv/bin/gpupool simulate                     # synthetic lab workload, default cluster, "
    "both policies": (
        "about a minute (four weeks, two policies); the page's `--weeks 1` line runs the same "
        "in a quarter of it, and tests/sim/test_sim_cli.py::"
        "test_smoke_writes_a_self_contained_report_and_json checks the report"
    ),
}


@dataclass(frozen=True)
class Command:
    page: str  # relative to the repository
    line: int  # 1-based line of the command in the page
    text: str  # as shown (continuations joined with newlines)
    expected_error: str | None  # a console block shows it failing with this line

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass(frozen=True)
class Block:
    language: str
    first_line: int  # 1-based line of the first line inside the fence
    lines: list[str]


def fenced_blocks(text: str) -> Iterator[Block]:
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = re.match(r"^\s*(`{3,})\s*([\w+-]*)", lines[index])
        if opening is None:
            index += 1
            continue
        fence, language = opening.group(1), opening.group(2).lower()
        start = index + 1
        end = start
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        yield Block(language, start + 1, lines[start:end])
        index = end + 1


# `COMMAND &`, maybe with a comment after it, but not `a && b`.
BACKGROUND = re.compile(r"^(.*[^&])&(?:\s+#.*)?$", re.DOTALL)
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")


def _continued(lines: list[str], index: int, first: str) -> tuple[str, int]:
    """The command starting at lines[index] (text `first`): joined over trailing backslashes
    and here-documents; returns it and the index of the next line after it."""
    parts = [first]
    index += 1
    while parts[-1].endswith("\\") and index < len(lines):
        parts.append(lines[index].removeprefix("> "))
        index += 1
    heredoc = HEREDOC.search("\n".join(parts))
    if heredoc is not None:
        while index < len(lines):
            parts.append(lines[index])
            index += 1
            if lines[index - 1].strip() == heredoc.group(1):
                break
    return "\n".join(parts), index


def commands_in(page: Path, name: str | None = None) -> list[Command]:
    name = name or page.relative_to(ROOT).as_posix()
    found: list[Command] = []
    for block in fenced_blocks(page.read_text(encoding="utf-8")):
        lines = block.lines
        index = 0
        while index < len(lines):
            line = lines[index]
            number = block.first_line + index
            if block.language in RUN_LANGUAGES:
                stripped = line.strip()
                if not stripped or stripped.startswith("#"):
                    index += 1
                    continue
                text, index = _continued(lines, index, stripped)
                found.append(Command(name, number, text, None))
            elif block.language == CONSOLE and line.startswith("$ "):
                text, index = _continued(lines, index, line[2:].strip())
                output: list[str] = []
                while index < len(lines) and not lines[index].startswith("$ "):
                    output.append(lines[index])
                    index += 1
                shown = [out.strip() for out in output if out.strip()]
                error = shown[0] if shown and shown[0].startswith("error:") else None
                found.append(Command(name, number, text, error))
            else:
                index += 1
    return found


PLACEHOLDER = re.compile(r"[\[\]|]|\.\.\.|\b[A-Z][A-Z0-9_]*\b")
LOOKS_LIKE_A_COMMAND = re.compile(r"^(\$ |gpupool |\.venv/bin/|python3? )")


def stray_commands(page: Path, name: str | None = None) -> list[str]:
    """Concrete commands in blocks that are not run (see the module's docstring)."""
    name = name or page.relative_to(ROOT).as_posix()
    stray = []
    for block in fenced_blocks(page.read_text(encoding="utf-8")):
        if block.language in RUN_LANGUAGES or block.language == CONSOLE:
            continue
        for offset, line in enumerate(block.lines):
            stripped = line.strip()
            if not LOOKS_LIKE_A_COMMAND.match(stripped):
                continue
            code = stripped.split(" #", 1)[0]
            if stripped.startswith("$ ") or not PLACEHOLDER.search(code):
                stray.append(f"{name}:{block.first_line + offset}: {stripped}")
    return stray


ALL_COMMANDS = [command for page in PAGES for command in commands_in(page)]
RUN_PAGES = sorted({c.page for c in ALL_COMMANDS if c.text not in NOT_RUN})


SAMPLE = """\
```bash
gpupool up   # a comment stays
# a comment line is skipped

gpupool submit a --gpu 1 \\
  -- python train.py
cat > f.yaml <<'EOF'
name: x
EOF
gpupool server &
```

```console
$ gpupool list
 NAME
$ gpupool submit b --gpu 1.5 -- true
error: gpu: a fraction must be between 0 and 1
```

```
gpupool up [--port 8000]
gpupool down
$ gpupool top
```
"""


def test_the_rule_for_what_counts_as_a_command(tmp_path: Path) -> None:
    page = tmp_path / "sample.md"
    page.write_text(SAMPLE)
    found = [(c.line, c.text, c.expected_error) for c in commands_in(page, "sample.md")]
    assert found == [
        (2, "gpupool up   # a comment stays", None),
        (5, "gpupool submit a --gpu 1 \\\n  -- python train.py", None),
        (7, "cat > f.yaml <<'EOF'\nname: x\nEOF", None),
        (10, "gpupool server &", None),
        (14, "gpupool list", None),
        (
            16,
            "gpupool submit b --gpu 1.5 -- true",
            "error: gpu: a fraction must be between 0 and 1",
        ),
    ]
    assert BACKGROUND.match("gpupool server &  # note") is not None
    assert BACKGROUND.match("a && b") is None
    assert stray_commands(page, "sample.md") == [
        "sample.md:22: gpupool down",
        "sample.md:23: $ gpupool top",
    ]


def test_commands_are_only_in_command_blocks() -> None:
    stray = [line for page in PAGES for line in stray_commands(page)]
    assert not stray, (
        "concrete commands outside ```bash/```console blocks (they would never be run); put "
        "them in such a block, or write them as a synopsis with placeholders:\n" + "\n".join(stray)
    )


def test_every_listed_line_is_still_in_the_docs() -> None:
    shown = {command.text for command in ALL_COMMANDS}
    gone = [line for line in NOT_RUN if line not in shown]
    assert not gone, "NOT_RUN lists lines that no page shows any more:\n" + "\n".join(gone)


# -- running a page ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


GPUPOOL_SHIM = """\
#!{python}
# `gpupool` for the doc tests: this checkout's gpupool, on the test's port instead of 8000.
import os, runpy, sys
port = os.environ["GPUPOOL_DOC_TEST_PORT"]
args = [arg.replace("127.0.0.1:{doc_port}", "127.0.0.1:" + port) for arg in sys.argv[1:]]
if args[:1] in (["up"], ["server"]) and not any(a.startswith("--port") for a in args):
    args[1:1] = ["--port", port]
sys.argv = ["gpupool", *args]
runpy.run_module("gpupool", run_name="__main__", alter_sys=True)
"""


def _checkout(work: Path) -> None:
    """A copy of the repository's files as a clone has them (tracked and new, not ignored),
    and `.venv/bin` with gpupool, python and the dev tools."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if not source.is_file():  # deleted in the working tree
            continue
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    bin_dir = work / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    shim = bin_dir / "gpupool"
    shim.write_text(GPUPOOL_SHIM.format(python=sys.executable, doc_port=DOC_PORT))
    for name in ("python", "python3"):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for path in [shim, *(bin_dir / n for n in ("python", "python3"))]:
        path.chmod(0o755)
    (bin_dir / "activate").write_text(  # PATH already starts with it (see _environment)
        f'export VIRTUAL_ENV="{work / ".venv"}"\nexport PATH="$VIRTUAL_ENV/bin:$PATH"\n'
    )
    for tool in DEV_TOOLS:
        real = Path(sys.executable).parent / tool
        if real.exists():
            (bin_dir / tool).symlink_to(real)


def _environment(work: Path, port: int) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GPUPOOL_", "PYTEST_", "VIRTUAL_ENV"))
    }
    home = work.parent / "home"
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        PATH=f"{work / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(ROOT / "src"),
        GPUPOOL_DOC_TEST_PORT=str(port),
        COLUMNS="200",
    )
    return env


def _wait_for_port(port: int, background: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if background.poll() is not None:
            exited = background.returncode
            pytest.fail(f"the background command exited {exited}:\n{log.read_text()}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    pytest.fail(f"nothing answered on port {port} within 60 s:\n{log.read_text()}")


def _run(text: str, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`bash -c TEXT` in its own process group, all of which is killed if it overruns."""
    with subprocess.Popen(
        ["bash", "-c", text],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            stderr += f"\n(killed after {COMMAND_TIMEOUT_S} s)"
        return subprocess.CompletedProcess(process.args, process.wait(), stdout, stderr)


def _report(command: Command, result: subprocess.CompletedProcess[str], what: str) -> str:
    def tail(text: str) -> str:
        return textwrap.indent(text[-4000:], "    ")

    return (
        f"{command.where}: {what}\n  $ {command.text}\n  exit {result.returncode}\n"
        f"  stdout:\n{tail(result.stdout)}\n  stderr:\n{tail(result.stderr)}"
    )


def _squash(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_commands_run(page: str, tmp_path: Path) -> None:
    work = tmp_path / "checkout"
    work.mkdir()
    _checkout(work)
    port = _free_port()
    env = _environment(work, port)
    background: list[subprocess.Popen[bytes]] = []
    try:
        for number, command in enumerate(c for c in ALL_COMMANDS if c.page == page):
            if command.text in NOT_RUN:
                continue
            in_background = BACKGROUND.match(command.text)
            if in_background is not None:
                log = tmp_path / f"background-{number}.log"
                with log.open("wb") as out:
                    started = subprocess.Popen(
                        ["bash", "-c", in_background.group(1)],
                        cwd=work,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                background.append(started)
                _wait_for_port(port, started, log)
                continue
            result = _run(command.text, work, env)
            if command.expected_error is None:
                assert result.returncode == 0, _report(command, result, "failed")
            else:
                assert result.returncode != 0, _report(command, result, "was shown failing")
                printed = _squash(result.stderr + result.stdout)
                assert _squash(command.expected_error) in printed, _report(
                    command, result, f"did not print {command.expected_error!r}"
                )
    finally:
        for started in background:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(started.pid, signal.SIGTERM)
            try:
                started.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(started.pid, signal.SIGKILL)
                started.wait()
        if (work / ".gpupool" / "server.pid").exists():
            subprocess.run(
                ["bash", "-c", "gpupool down"],
                cwd=work,
                env=env,
                capture_output=True,
                timeout=120,
            )
