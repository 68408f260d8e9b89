"""The openb trace loaders: every shipped file loads exactly, and malformed rows are rejected
with file, line and column. The expected numbers are those of the trace's README (data/openb)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gpupool.core.model import Node
from gpupool.sim import openb
from gpupool.sim.openb import (
    ALL_NODE_LIST_FILE,
    DEFAULT_GPU_MEMORY_MIB,
    DEFAULT_POD_LIST_FILE,
    GPU_NODE_LIST_FILE,
    NODE_COLUMNS,
    POD_COLUMNS,
    TraceError,
    TraceNode,
    TracePod,
    default_data_dir,
    load_nodes,
    load_pods,
    to_core_node,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "openb"

NODE_ROWS = {
    ALL_NODE_LIST_FILE: 1523,
    GPU_NODE_LIST_FILE: 1213,
}
POD_ROWS = {
    "openb_pod_list_cpu0.csv": 7064,
    "openb_pod_list_cpu050.csv": 7439,
    "openb_pod_list_cpu100.csv": 7853,
    DEFAULT_POD_LIST_FILE: 8152,
    "openb_pod_list_gpushare40.csv": 8152,
    "openb_pod_list_gpushare60.csv": 8152,
    "openb_pod_list_gpushare80.csv": 8152,
    "openb_pod_list_gpuspec10.csv": 8152,
    "openb_pod_list_multigpu20.csv": 8324,
    "openb_pod_list_multigpu30.csv": 8508,
}


# --- the shipped files ---------------------------------------------------------------------------


def test_default_data_dir_is_the_repository_copy() -> None:
    assert default_data_dir() == DATA
    assert (DATA / "README.md").is_file()
    assert (DATA / "SOURCE.md").is_file()


def test_default_data_dir_outside_a_checkout_says_where_the_trace_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openb, "__file__", str(tmp_path / "site-packages" / "openb.py"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"checkout \(the trace lives in data/openb\)"):
        default_data_dir()


def test_an_installed_package_run_in_a_checkout_finds_its_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A non-editable install (the compiled core's wheel) lives in site-packages: the checkout
    # the command runs in, or one of its subfolders, holds the trace.
    monkeypatch.setattr(openb, "__file__", str(tmp_path / "site-packages" / "openb.py"))
    monkeypatch.chdir(DATA.parent.parent / "docs")
    assert default_data_dir() == DATA


def test_the_shipped_files_are_exactly_the_known_ones() -> None:
    assert sorted(p.name for p in DATA.glob("*.csv")) == sorted(NODE_ROWS | POD_ROWS)


@pytest.mark.parametrize(("name", "rows"), sorted(NODE_ROWS.items()))
def test_every_node_list_loads(name: str, rows: int) -> None:
    nodes = load_nodes(DATA / name)
    assert len(nodes) == rows
    assert len({n.name for n in nodes}) == rows


@pytest.mark.parametrize(("name", "rows"), sorted(POD_ROWS.items()))
def test_every_pod_list_loads(name: str, rows: int) -> None:
    pods = load_pods(DATA / name)
    assert len(pods) == rows
    assert all(0 <= p.gpu_milli <= 1000 and 0 <= p.num_gpu <= 8 for p in pods)


def test_gpu_node_list_capacity() -> None:
    nodes = load_nodes(DATA / GPU_NODE_LIST_FILE)
    assert nodes[0] == TraceNode("openb-node-0000", 64000, 262144, 2, "P100")
    gpus: Counter[str | None] = Counter()
    for n in nodes:
        gpus[n.gpu_model] += n.gpu_count
    assert gpus == {
        "G2": 4392,
        "T4": 842,
        "G3": 312,
        "P100": 265,
        "V100M32": 204,
        "V100M16": 195,
        "A10": 2,
    }
    assert Counter(n.gpu_model for n in nodes) == {
        "G2": 549,
        "T4": 404,
        "G3": 39,
        "P100": 134,
        "V100M32": 30,
        "V100M16": 55,
        "A10": 2,
    }
    assert sum(n.gpu_count for n in nodes) == 6212
    assert sum(n.cpu_milli for n in nodes) == 107_018_000  # 107,018 cores
    assert sum(n.memory_mib for n in nodes) == 503_828_480  # 480.5 TiB
    assert Counter(n.gpu_count for n in nodes) == {8: 617, 2: 518, 4: 54, 1: 24}


def test_all_node_list_adds_the_cpu_only_nodes() -> None:
    nodes = load_nodes(DATA / ALL_NODE_LIST_FILE)
    cpu_only = [n for n in nodes if n.gpu_count == 0]
    assert len(cpu_only) == 310
    assert all(n.gpu_model is None for n in cpu_only)
    assert nodes[0] == TraceNode("openb-node-0000", 32000, 262144, 0, None)
    assert sum(n.gpu_count for n in nodes) == 6212
    assert sum(n.cpu_milli for n in nodes) == 125_514_000


def test_default_pod_list_shape_mix() -> None:
    pods = load_pods(DATA / DEFAULT_POD_LIST_FILE)
    total = len(pods)
    cpu_only = sum(p.num_gpu == 0 for p in pods)
    fractional = sum(p.is_fractional for p in pods)
    assert (cpu_only, fractional) == (1088, 3078)
    assert round(100 * cpu_only / total, 1) == 13.3
    assert round(100 * fractional / total, 1) == 37.8
    assert Counter(p.num_gpu for p in pods if not p.is_fractional) == {
        0: 1088,
        1: 3911,
        2: 16,
        4: 15,
        8: 44,
    }
    assert sum(p.total_gpu_milli for p in pods) == 6_086_800  # 6,086.8 GPUs
    fraction_milli = sum(p.gpu_milli for p in pods if p.is_fractional)
    assert round(100 * fraction_milli / 6_086_800, 1) == 28.5
    assert Counter(p.gpu_milli for p in pods if p.is_fractional).most_common(5) == [
        (810, 1078),
        (470, 750),
        (320, 328),
        (650, 253),
        (230, 140),
    ]
    assert all(p.gpu_spec == () for p in pods)


def test_default_pod_list_qos_phases_and_times() -> None:
    pods = load_pods(DATA / DEFAULT_POD_LIST_FILE)
    assert pods[0] == TracePod(
        name="openb-pod-0000",
        cpu_milli=12000,
        memory_mib=16384,
        num_gpu=1,
        gpu_milli=1000,
        gpu_spec=(),
        qos="LS",
        pod_phase="Running",
        creation_time_s=0,
        deletion_time_s=12537496,
        scheduled_time_s=0,
    )
    assert Counter(p.qos for p in pods) == {
        "LS": 4647,
        "BE": 3398,
        "Burstable": 100,
        "Guaranteed": 7,
    }
    assert Counter(p.pod_phase for p in pods) == {
        "Running": 5193,
        "Failed": 1870,
        "Pending": 897,
        "Succeeded": 192,
    }
    unscheduled = [p for p in pods if p.scheduled_time_s is None]
    assert len(unscheduled) == 897
    assert {p.pod_phase for p in unscheduled} == {"Pending"}
    created = [p.creation_time_s for p in pods if p.creation_time_s is not None]
    assert len(created) == 8152
    assert (min(created), max(created)) == (0, 12_901_761)


def test_gpuspec_lists_split_on_the_bar() -> None:
    pods = load_pods(DATA / "openb_pod_list_gpuspec10.csv")
    gpu_pods = [p for p in pods if p.num_gpu > 0]
    constrained = [p for p in gpu_pods if p.gpu_spec]
    assert (len(gpu_pods), len(constrained)) == (7064, 732)
    assert round(100 * len(constrained) / len(gpu_pods), 1) == 10.4
    specs = Counter(p.gpu_spec for p in constrained)
    assert specs[("T4",)] == 355
    assert specs[("V100M16", "V100M32")] == 55
    assert specs[("P100", "V100M16", "V100M32")] == 26
    # Kept as written: the README does not forbid a model listed twice (line 33 of the file).
    assert pods[31].gpu_spec == ("V100M16", "V100M32", "V100M32")
    # Same pods as the default list, only constrained.
    default = load_pods(DATA / DEFAULT_POD_LIST_FILE)
    assert [(p.name, p.total_gpu_milli) for p in pods] == [
        (p.name, p.total_gpu_milli) for p in default
    ]


def test_multigpu_lists_have_shape_columns_only() -> None:
    pods = load_pods(DATA / "openb_pod_list_multigpu20.csv")
    assert pods[0] == TracePod("openb-pod-0000", 12000, 16384, 1, 1000)
    assert all(
        p.qos is None and p.pod_phase is None and p.creation_time_s is None and p.gpu_spec == ()
        for p in pods
    )
    assert Counter(p.num_gpu for p in pods if p.num_gpu > 1) == {2: 54, 4: 52, 8: 141}
    assert sum(p.total_gpu_milli for p in pods) == 7_086_800


# --- conversion to the core ----------------------------------------------------------------------


def test_to_core_node() -> None:
    gpu = TraceNode("openb-node-0042", 96000, 393216, 8, "G2")
    assert to_core_node(gpu) == Node(
        name="openb-node-0042",
        gpu_count=8,
        gpu_memory_mib=81920,
        gpu_model="G2",
        cpu_milli=96000,
        memory_mib=393216,
    )
    cpu = to_core_node(TraceNode("openb-node-0000", 32000, 262144, 0, None))
    assert (cpu.gpu_count, cpu.gpu_model, cpu.label("gpu_model")) == (0, None, None)
    assert DEFAULT_GPU_MEMORY_MIB == 81920


def test_the_gpu_cluster_converts_whole() -> None:
    nodes = [to_core_node(n) for n in load_nodes(DATA / GPU_NODE_LIST_FILE)]
    assert sum(n.gpu_count for n in nodes) == 6212
    assert sum(n.cpu_milli or 0 for n in nodes) == 107_018_000
    assert {n.label("gpu_model") for n in nodes} == {
        "G2",
        "T4",
        "G3",
        "P100",
        "V100M32",
        "V100M16",
        "A10",
    }


# --- malformed files -----------------------------------------------------------------------------

NODE_HEADER = ",".join(NODE_COLUMNS)
POD_HEADER = ",".join(POD_COLUMNS)
POD_OK = "pod-a,1000,1024,1,500,,LS,Running,10,20,11"
NODE_EXPECTED = "sn, cpu_milli, memory_mib, gpu, model"
POD_EXPECTED = (
    "name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, "
    "creation_time, deletion_time, scheduled_time"
    " or name, cpu_milli, memory_mib, num_gpu, gpu_milli"
)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text, encoding="utf-8")
    return path


def _pod_error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(TraceError) as info:
        load_pods(path)
    return str(info.value).removeprefix(f"{path}:")


def _node_error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(TraceError) as info:
        load_nodes(path)
    return str(info.value).removeprefix(f"{path}:")


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            "pod-b,1.5,1024,1,500,,LS,Running,10,20,11",
            "3: cpu_milli: not an integer: '1.5'; expected a non-negative integer",
        ),
        (
            "pod-b,1000,1024,1,500,,LS,Running,x10,20,11",
            "3: creation_time: not an integer: 'x10'; expected a non-negative integer",
        ),
        (
            "pod-b,1000, 1024,1,500,,LS,Running,10,20,11",
            "3: memory_mib: not an integer: ' 1024'; expected a non-negative integer",
        ),
        (
            "pod-b,1000,-1024,1,500,,LS,Running,10,20,11",
            "3: memory_mib: negative number -1024; expected a non-negative integer",
        ),
        (
            "pod-b,,1024,1,500,,LS,Running,10,20,11",
            "3: cpu_milli: empty; expected a non-negative integer",
        ),
        (
            "pod-b,1000,1024,1,1500,,LS,Running,10,20,11",
            "3: gpu_milli: 1500 is outside 0..1000 (milli-GPU of each GPU)",
        ),
        (
            "pod-b,1000,1024,9,1000,,LS,Running,10,20,11",
            "3: num_gpu: 9 GPUs; a pod requests 0 to 8",
        ),
        (
            "pod-b,1000,1024,1,0,,LS,Running,10,20,11",
            "3: gpu_milli: 0, but num_gpu is 1; a GPU pod has 1..1000",
        ),
        (
            "pod-b,1000,1024,0,500,,LS,Running,10,20,11",
            "3: gpu_milli: 500, but num_gpu is 0; a CPU-only pod has 0",
        ),
        (
            "pod-b,1000,1024,2,500,,LS,Running,10,20,11",
            "3: gpu_milli: 500, but num_gpu is 2; only 1-GPU pods share a GPU, "
            "a pod with more GPUs has 1000",
        ),
        (
            "pod-b,1000,1024,1,500,,LS,Running,30,20,",
            "3: deletion_time: 20 is before creation_time 30",
        ),
        (
            "pod-b,1000,1024,1,500,,LS,Running,10,20,5",
            "3: scheduled_time: 5 is before creation_time 10",
        ),
        (
            "pod-b,1000,1024,1,500,,LS,Running,10,20,25",
            "3: scheduled_time: 25 is after deletion_time 20",
        ),
        (
            "pod-b,1000,1024,1,500,,LS,Pending,10,20,11",
            "3: scheduled_time: 11, but a Pending pod has none (empty)",
        ),
        (
            "pod-b,1000,1024,1,500,,LS,Running,10,,11",
            "3: deletion_time: empty; expected a non-negative integer",
        ),
        (
            "pod-b,1000,1024,1,500,,Gold,Running,10,20,11",
            "3: qos: unknown value 'Gold'; expected one of LS, BE, Burstable, Guaranteed",
        ),
        (
            "pod-b,1000,1024,1,500,,LS,Done,10,20,11",
            "3: pod_phase: unknown value 'Done'; expected one of Succeeded, Running, Pending, "
            "Failed",
        ),
        (
            "pod-b,1000,1024,1,500,T4||P100,LS,Running,10,20,11",
            "3: gpu_spec: empty model name in 'T4||P100'; models are separated by '|', "
            "like V100M16|V100M32",
        ),
        (
            ",1000,1024,1,500,,LS,Running,10,20,11",
            "3: name: empty; every row needs a name",
        ),
        (
            "pod-a,1000,1024,1,500,,LS,Running,10,20,11",
            "3: name: 'pod-a' appears twice (first on line 2)",
        ),
        (
            "pod-b,1000,1024,1,500,,LS,Running,10,20",
            "3: row: 10 fields, expected 11 (name, cpu_milli, memory_mib, num_gpu, gpu_milli, "
            "gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time)",
        ),
        ("", "3: row: blank line; every line is a data row"),
    ],
)
def test_bad_pod_row_is_rejected_with_its_line(tmp_path: Path, row: str, expected: str) -> None:
    text = f"{POD_HEADER}\n{POD_OK}\n{row}\npod-z,1000,1024,0,0,,BE,Pending,10,20,\n"
    assert _pod_error(tmp_path, text) == expected


def test_good_rows_around_the_bad_ones_load(tmp_path: Path) -> None:
    text = f"{POD_HEADER}\n{POD_OK}\npod-z,1000,1024,0,0,T4|A10,BE,Pending,10,10,\n"
    assert load_pods(_write(tmp_path, text)) == (
        TracePod("pod-a", 1000, 1024, 1, 500, (), "LS", "Running", 10, 20, 11),
        TracePod("pod-z", 1000, 1024, 0, 0, ("T4", "A10"), "BE", "Pending", 10, 10, None),
    )


def test_the_error_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, f"{POD_HEADER}\npod-a,1000,1024,1,1500,,LS,Running,10,20,11\n")
    with pytest.raises(TraceError) as info:
        load_pods(path)
    error = info.value
    assert (error.path, error.line, error.key_path) == (str(path), 2, "gpu_milli")
    assert str(error) == f"{path}:2: gpu_milli: 1500 is outside 0..1000 (milli-GPU of each GPU)"


def test_a_line_number_is_the_file_line_with_quoted_fields(tmp_path: Path) -> None:
    text = (
        f'{POD_HEADER}\n"pod-a",1000,1024,1,500,"",LS,Running,10,20,11\n'
        "pod-b,1,1,1,0,,LS,Running,1,2,1\n"
    )
    assert _pod_error(tmp_path, text) == "3: gpu_milli: 0, but num_gpu is 1; a GPU pod has 1..1000"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", f"1: header: empty file; expected a header line: {POD_EXPECTED}"),
        ("\n", f"1: header: blank header line; expected a header line: {POD_EXPECTED}"),
        (f"{POD_HEADER}\n", "1: header: no data rows after the header"),
        (
            POD_HEADER.replace(",gpu_milli", "") + "\n",
            f"1: gpu_milli: missing column gpu_milli; expected: {POD_EXPECTED}",
        ),
        (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,pod_phase\n",
            "1: gpu_spec: missing columns gpu_spec, creation_time, deletion_time, "
            f"scheduled_time; expected: {POD_EXPECTED}",
        ),
        (
            "name,cpu_milli,memory_mib,num_gpu\n",
            f"1: gpu_milli: missing column gpu_milli; expected: {POD_EXPECTED}",
        ),
        (
            POD_HEADER + ",priority\n",
            f"1: priority: unknown column; expected: {POD_EXPECTED}",
        ),
        (
            POD_HEADER.replace("memory_mib", "memory") + "\n",
            f"1: memory: unknown column; expected: {POD_EXPECTED}",
        ),
        (
            POD_HEADER + ",qos\n",
            f"1: qos: column appears twice; expected: {POD_EXPECTED}",
        ),
    ],
)
def test_bad_pod_header_is_rejected(tmp_path: Path, text: str, expected: str) -> None:
    assert _pod_error(tmp_path, text) == expected


def test_columns_may_come_in_any_order(tmp_path: Path) -> None:
    text = "gpu_milli,num_gpu,name,memory_mib,cpu_milli\n250,1,pod-a,2048,500\n"
    assert load_pods(_write(tmp_path, text)) == (TracePod("pod-a", 500, 2048, 1, 250),)


def test_not_utf8_is_rejected_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(f"{NODE_HEADER}\nn1,1000,1024,1,T4\nn\xff2,1000,1024,1,T4\n".encode("latin-1"))
    with pytest.raises(TraceError) as info:
        load_nodes(path)
    assert str(info.value) == f"{path}:3: row: not UTF-8 text: invalid start byte"


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("n2,1000,1024,2,", "3: model: empty, but the node has 2 GPUs; name their model"),
        ("n2,1000,1024,0,T4", "3: model: 'T4', but gpu is 0; a CPU-only node has an empty model"),
        ("n2,1000,1024,-2,T4", "3: gpu: negative number -2; expected a non-negative integer"),
        ("n2,1000,1024,two,T4", "3: gpu: not an integer: 'two'; expected a non-negative integer"),
        ("n1,1000,1024,1,T4", "3: sn: 'n1' appears twice (first on line 2)"),
    ],
)
def test_bad_node_row_is_rejected_with_its_line(tmp_path: Path, row: str, expected: str) -> None:
    text = f"{NODE_HEADER}\nn1,1000,1024,1,T4\n{row}\n"
    assert _node_error(tmp_path, text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", f"1: header: empty file; expected a header line: {NODE_EXPECTED}"),
        (
            "sn,cpu_milli,memory_mib,gpu\nn1,1,1,0\n",
            f"1: model: missing column model; expected: {NODE_EXPECTED}",
        ),
        (f"{POD_HEADER}\n{POD_OK}\n", f"1: name: unknown column; expected: {NODE_EXPECTED}"),
    ],
)
def test_bad_node_header_is_rejected(tmp_path: Path, text: str, expected: str) -> None:
    assert _node_error(tmp_path, text) == expected


def test_a_node_list_is_not_a_pod_list(tmp_path: Path) -> None:
    path = DATA / GPU_NODE_LIST_FILE
    with pytest.raises(TraceError) as info:
        load_pods(path)
    assert str(info.value) == f"{path}:1: sn: unknown column; expected: {POD_EXPECTED}"
