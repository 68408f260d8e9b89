"""The GPU seam: declared devices and self-reported usage (what tests of the local executor run
on), the NVML backend against a fake `pynvml` (CI has no GPU), and the fallback when NVML is
missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpupool.executors.base import DeviceInfo
from gpupool.executors.gpus import open_backend, report_fake_gpu_usage
from gpupool.executors.gpus.declared import DeclaredBackend, parse_declared_gpus
from gpupool.executors.gpus.devices import (
    DeviceSample,
    GpuBackend,
    GpuDevice,
    GpuUnavailable,
    ProcessGpuMemory,
    backend_report,
)
from gpupool.executors.gpus.nvml import NvmlBackend, mps_active

GIB = 2**30
MIB = 2**20


# --- declared spec ----------------------------------------------------------------------------


def test_declared_spec_one_group() -> None:
    assert parse_declared_gpus("4x80G") == tuple(
        GpuDevice(index=i, uuid=f"GPU-declared-{i}", model="declared", memory_mib=81920)
        for i in range(4)
    )


def test_declared_spec_groups_index_on_and_name_models() -> None:
    devices = parse_declared_gpus(" 2x80G:H100 , 1X24Gi:RTX4090,1x512M ")
    assert [(d.index, d.model, d.memory_mib) for d in devices] == [
        (0, "H100", 81920),
        (1, "H100", 81920),
        (2, "RTX4090", 24576),
        (3, "declared", 512),
    ]
    assert [d.uuid for d in devices] == [f"GPU-declared-{i}" for i in range(4)]


def test_declared_spec_bare_number_is_mib_and_empty_is_none() -> None:
    assert parse_declared_gpus("1x81920")[0].memory_mib == 81920
    assert parse_declared_gpus("") == ()
    assert parse_declared_gpus("  ") == ()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("4", r"'4' not understood: write COUNTxMEMORY\[:MODEL\] like 4x80G"),
        ("x80G", r"'x80G' not understood"),
        ("4x", r"'4x' not understood"),
        ("-1x80G", r"'-1x80G' not understood"),
        ("0x80G", r"'0x80G': the count must be at least 1"),
        ("4x80Q", r"'4x80Q': memory unit 'Q' is not known"),
        ("4x0G", r"'4x0G': memory must be a positive whole number of MiB"),
        ("4x80G:", r"'4x80G:': the model after ':' is empty"),
        ("4x80G,,2x24G", r"has an empty group"),
        ("4x80G,", r"has an empty group"),
        ("60x80G,5x24G", r"declares more than 64 devices"),
    ],
)
def test_declared_spec_errors_say_what_to_write(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_declared_gpus(spec)
    with pytest.raises(ValueError, match=message):
        DeclaredBackend(spec, None)


def test_declared_device_as_device_info() -> None:
    device = parse_declared_gpus("1x24G:RTX4090")[0]
    assert device.as_device_info() == DeviceInfo(
        index=0, memory_mib=24576, model="RTX4090", uuid="GPU-declared-0"
    )


def test_backend_report_is_plain_data_the_check_scripts_print(tmp_path: Path) -> None:
    backend = DeclaredBackend("1x24G:RTX4090", tmp_path)
    report = backend_report(backend)
    assert json.loads(json.dumps(report)) == report
    assert report["backend"] == "declared"
    assert report["devices"] == [
        {"index": 0, "uuid": "GPU-declared-0", "model": "RTX4090", "memory_mib": 24576}
    ]
    assert report["process_memory"] == []
    assert isinstance(report["mps_active"], bool)


# --- declared usage ---------------------------------------------------------------------------


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process other than this one."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_no_report_dir_means_idle_devices() -> None:
    backend = DeclaredBackend("2x80G", None)
    assert backend.sample() == (DeviceSample(0, 0, 0), DeviceSample(1, 0, 0))
    assert backend.process_memory() == ()
    assert backend.mps_active() is False
    backend.close()


def test_process_memory_from_reports(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    backend = DeclaredBackend("2x80G", tmp_path)
    assert backend.process_memory() == ()  # empty dir
    me = os.getpid()
    report_fake_gpu_usage(tmp_path, device=1, used_mib=1234, utilization_percent=80)
    (tmp_path / f"{sleeper.pid}.json").write_text(
        json.dumps(
            [
                {"device": 0, "used_mib": 100, "utilization_percent": 10},
                {"device": 1, "used_mib": 200},  # utilization is optional
                {"device": 1, "used_mib": 50, "utilization_percent": 5},  # adds up
            ]
        )
    )
    on_device_1 = [ProcessGpuMemory(me, 1, 1234), ProcessGpuMemory(sleeper.pid, 1, 250)]
    assert backend.process_memory() == (  # by device, then pid
        ProcessGpuMemory(sleeper.pid, 0, 100),
        *sorted(on_device_1, key=lambda p: p.pid),
    )
    assert backend.sample() == (DeviceSample(0, 10, 100), DeviceSample(1, 85, 1484))


def test_reports_replace_each_other_and_write_atomically(tmp_path: Path) -> None:
    backend = DeclaredBackend("1x80G", tmp_path)
    path = report_fake_gpu_usage(tmp_path, 0, 1000, 50)
    assert path == tmp_path / f"{os.getpid()}.json"
    report_fake_gpu_usage(tmp_path, 0, 3000, 90)
    assert backend.process_memory() == (ProcessGpuMemory(os.getpid(), 0, 3000),)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary left


def test_sample_sums_memory_and_caps_utilization(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    backend = DeclaredBackend("2x80G", tmp_path)
    report_fake_gpu_usage(tmp_path, 0, 30_000, 70)
    report_fake_gpu_usage(tmp_path, 0, 20_000, 60, pid=sleeper.pid)
    assert backend.sample() == (DeviceSample(0, 100, 50_000), DeviceSample(1, 0, 0))


def test_reports_of_ended_processes_are_ignored_and_removed(tmp_path: Path) -> None:
    backend = DeclaredBackend("1x80G", tmp_path)
    gone = report_fake_gpu_usage(tmp_path, 0, 5000, 50, pid=dead_pid())
    assert backend.process_memory() == ()
    assert backend.sample() == (DeviceSample(0, 0, 0),)
    assert not gone.exists()  # a reused pid does not inherit the report


def test_reports_of_zombies_are_ignored(tmp_path: Path) -> None:
    """A process that exited but is not reaped yet holds no GPU memory on a real driver."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc")
    backend = DeclaredBackend("1x80G", tmp_path)
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        report_fake_gpu_usage(tmp_path, 0, 5000, 50, pid=process.pid)
        assert backend.process_memory() == ()
    finally:
        process.wait()


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "",
        '{"device": 0, "used_mib": 10',  # half written
        "42",
        '["x"]',
        '[{"device": 0, "used_mib": 10}, "x"]',  # one bad entry spoils the file
        '{"used_mib": 10}',
        '{"device": 0}',
        '{"device": -1, "used_mib": 10}',
        '{"device": 0, "used_mib": -5}',
        '{"device": 0, "used_mib": "10"}',
        '{"device": true, "used_mib": 10}',
        '{"device": 0, "used_mib": 1.5}',
        '{"device": 0, "used_mib": 10, "utilization_percent": null}',
    ],
)
def test_malformed_reports_are_skipped(tmp_path: Path, content: str) -> None:
    backend = DeclaredBackend("1x80G", tmp_path)
    (tmp_path / f"{os.getpid()}.json").write_text(content)
    assert backend.process_memory() == ()
    assert backend.sample() == (DeviceSample(0, 0, 0),)


def test_other_files_and_undeclared_devices_are_ignored(tmp_path: Path) -> None:
    backend = DeclaredBackend("1x80G", tmp_path)
    (tmp_path / "notes.json").write_text('{"device": 0, "used_mib": 10}')
    (tmp_path / f".{os.getpid()}.abc.tmp").write_text('{"device": 0, "used_mib": 10}')
    (tmp_path / f"{os.getpid()}.json").write_text(
        '[{"device": 0, "used_mib": 10}, {"device": 7, "used_mib": 99}]'
    )
    assert backend.process_memory() == (ProcessGpuMemory(os.getpid(), 0, 10),)


def test_report_dir_missing_means_idle(tmp_path: Path) -> None:
    backend = DeclaredBackend("1x80G", tmp_path / "not-yet")
    assert backend.process_memory() == ()


def test_a_workload_process_reports_its_own_usage(tmp_path: Path) -> None:
    """How a workload script in a local-executor test drives the watchdog."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from gpupool.executors.gpus import report_fake_gpu_usage
        report_fake_gpu_usage(Path({str(tmp_path)!r}), device=1, used_mib=4096,
                              utilization_percent=40)
        print("reported", flush=True)
        time.sleep(60)
        """
    )
    backend = DeclaredBackend("2x24G", tmp_path)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"reported\n"
        assert backend.process_memory() == (ProcessGpuMemory(process.pid, 1, 4096),)
        assert backend.sample()[1] == DeviceSample(1, 40, 4096)
    finally:
        process.kill()
        process.wait()
    assert backend.process_memory() == ()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1, 10, 0), "device must be a whole number >= 0"),
        ((0, -10, 0), "used_mib must be a whole number >= 0"),
        ((0, 10, 101), "utilization_percent must be 0 to 100"),
        ((0, 10, -1), "utilization_percent must be 0 to 100"),
    ],
)
def test_report_helper_rejects_nonsense(
    tmp_path: Path, args: tuple[int, int, int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        report_fake_gpu_usage(tmp_path, *args)


def test_declared_mps_is_declared() -> None:
    assert DeclaredBackend("1x80G", None, mps=True).mps_active() is True


# --- MPS detection ----------------------------------------------------------------------------


def fake_proc(root: Path, comms: dict[str, str]) -> Path:
    for pid, comm in comms.items():
        (root / pid).mkdir(parents=True)
        (root / pid / "comm").write_text(comm + "\n")
    (root / "self").mkdir(exist_ok=True)
    return root


def test_mps_found_by_its_truncated_process_name(tmp_path: Path) -> None:
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipes")}
    # The kernel keeps 15 characters of "nvidia-cuda-mps-control".
    proc = fake_proc(tmp_path / "proc", {"1": "systemd", "4242": "nvidia-cuda-mps"})
    assert mps_active(proc, env) is True
    assert mps_active(fake_proc(tmp_path / "p2", {"1": "systemd", "7": "nvidia-smi"}), env) is False
    (tmp_path / "p3" / "12").mkdir(parents=True)  # no comm (gone meanwhile)
    assert mps_active(tmp_path / "p3", env) is False
    assert mps_active(tmp_path / "no-proc", env) is False


def test_mps_found_by_its_control_pipe(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc", {"1": "systemd"})
    pipes = tmp_path / "pipes"
    pipes.mkdir()
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipes)}
    assert mps_active(proc, env) is False
    os.mkfifo(pipes / "control")
    assert mps_active(proc, env) is True


# --- NVML against a fake pynvml ---------------------------------------------------------------


class FakeNVMLError(Exception):
    pass


class FakeMismatchError(Exception):
    """Like pynvml's NVMLLibraryMismatchError: not an NVMLError."""


@dataclass
class FakeGpu:
    uuid: Any
    name: Any
    total: int
    used: int = 0
    utilization: int = 0
    compute: list[tuple[int, int | None]] | None = field(default_factory=list)
    graphics: list[tuple[int, int | None]] | None = field(default_factory=list)
    """None: the query raises NVMLError."""
    broken: bool = False
    """Every query on the device raises NVMLError (a device fallen off the bus)."""


class FakePynvml:
    """Just the pynvml functions the backend calls; `gpus[i]` None fails GetHandleByIndex."""

    NVMLError = FakeNVMLError
    NVMLLibraryMismatchError = FakeMismatchError

    def __init__(self, gpus: list[FakeGpu | None], init_error: str | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.old_driver = False
        """The process queries raise FakeMismatchError, as pynvml's `_v3` calls do on an old
        driver; their `_v2` twins answer."""
        self.inits = 0
        self.shutdowns = 0

    def module(self, *, without: tuple[str, ...] = ()) -> types.ModuleType:
        module = types.ModuleType("pynvml")
        for name in dir(self):
            if (name.startswith("nvml") or name.startswith("NVML")) and name not in without:
                setattr(module, name, getattr(self, name))
        return module

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        if self.init_error:
            raise FakeNVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        gpu = self.gpus[index]
        if gpu is None:
            raise FakeNVMLError("Unknown Error")
        return gpu

    @staticmethod
    def _check(gpu: FakeGpu) -> FakeGpu:
        if gpu.broken:
            raise FakeNVMLError("GPU is lost")
        return gpu

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> Any:  # noqa: N802
        return self._check(gpu).uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> Any:  # noqa: N802
        return self._check(gpu).name

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> types.SimpleNamespace:  # noqa: N802
        gpu = self._check(gpu)
        return types.SimpleNamespace(total=gpu.total, used=gpu.used, free=gpu.total - gpu.used)

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> types.SimpleNamespace:  # noqa: N802
        return types.SimpleNamespace(gpu=self._check(gpu).utilization, memory=0)

    @staticmethod
    def _processes(found: list[tuple[int, int | None]] | None) -> list[types.SimpleNamespace]:
        if found is None:
            raise FakeNVMLError("Not Supported")
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in found]

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> Any:  # noqa: N802
        if self.old_driver:
            raise FakeMismatchError("use nvmlDeviceGetComputeRunningProcesses_v2")
        return self.nvmlDeviceGetComputeRunningProcesses_v2(gpu)

    def nvmlDeviceGetGraphicsRunningProcesses(self, gpu: FakeGpu) -> Any:  # noqa: N802
        if self.old_driver:
            raise FakeMismatchError("use nvmlDeviceGetGraphicsRunningProcesses_v2")
        return self.nvmlDeviceGetGraphicsRunningProcesses_v2(gpu)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, gpu: FakeGpu) -> Any:  # noqa: N802
        return self._processes(self._check(gpu).compute)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, gpu: FakeGpu) -> Any:  # noqa: N802
        return self._processes(self._check(gpu).graphics)


def two_gpus_and_a_bad_one() -> FakePynvml:
    return FakePynvml(
        [
            FakeGpu(
                uuid=b"GPU-aaaa",  # older pynvml returns bytes
                name=b"NVIDIA H100 80GB HBM3",
                total=80 * GIB + 123,
                used=3 * GIB,
                utilization=87,
                compute=[(100, 2 * GIB), (101, None)],  # None: the driver cannot tell
                graphics=[(100, 2 * GIB), (102, 512 * MIB + 1)],  # 100 is C+G: counts once
            ),
            None,  # GetHandleByIndex fails: left out, index 1 stays unused
            FakeGpu(
                uuid="GPU-cccc",
                name="NVIDIA H100 80GB HBM3",
                total=80 * GIB,
                used=GIB,
                utilization=5,
                compute=[(200, GIB)],
                graphics=None,  # not supported here
            ),
        ]
    )


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakePynvml:
    fake = two_gpus_and_a_bad_one()
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    return fake


def test_nvml_devices(fake_nvml: FakePynvml) -> None:
    with NvmlBackend.open() as backend:
        assert backend.name == "nvml"
        assert backend.devices() == (
            GpuDevice(0, "GPU-aaaa", "NVIDIA H100 80GB HBM3", 81920),
            GpuDevice(2, "GPU-cccc", "NVIDIA H100 80GB HBM3", 81920),
        )
    assert (fake_nvml.inits, fake_nvml.shutdowns) == (1, 1)


def test_nvml_sample_and_process_memory(fake_nvml: FakePynvml) -> None:
    backend: GpuBackend = NvmlBackend.open()
    assert backend.sample() == (DeviceSample(0, 87, 3072), DeviceSample(2, 5, 1024))
    assert backend.process_memory() == (
        ProcessGpuMemory(100, 0, 2048),
        ProcessGpuMemory(101, 0, 0),
        ProcessGpuMemory(102, 0, 512),
        ProcessGpuMemory(200, 2, 1024),
    )
    backend.close()


def test_nvml_device_failing_later_is_left_out_of_that_report(fake_nvml: FakePynvml) -> None:
    backend = NvmlBackend.open()
    gpu = fake_nvml.gpus[2]
    assert gpu is not None
    gpu.broken = True
    assert [s.index for s in backend.sample()] == [0]
    assert {p.device_index for p in backend.process_memory()} == {0}
    assert len(backend.devices()) == 2  # listed at open
    gpu.broken = False
    assert [s.index for s in backend.sample()] == [0, 2]
    backend.close()


def test_nvml_device_failing_at_open_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = two_gpus_and_a_bad_one()
    gpu = fake.gpus[2]
    assert gpu is not None
    gpu.broken = True
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    with NvmlBackend.open() as backend:
        assert [d.index for d in backend.devices()] == [0]


def test_nvml_process_memory_on_an_old_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """pynvml's default `_v3` process queries fail on old drivers; the `_v2` ones answer."""
    fake = two_gpus_and_a_bad_one()
    fake.old_driver = True
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    with NvmlBackend.open() as backend:
        assert [p.pid for p in backend.process_memory()] == [100, 101, 102, 200]
    without_v2 = (
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake.module(without=without_v2))
    with NvmlBackend.open() as backend:
        assert backend.process_memory() == ()  # not seen, but no crash
        assert len(backend.sample()) == 2


def test_nvml_close_once_and_not_used_after(fake_nvml: FakePynvml) -> None:
    backend = NvmlBackend.open()
    backend.close()
    backend.close()
    assert fake_nvml.shutdowns == 1
    with pytest.raises(RuntimeError, match="closed"):
        backend.sample()
    with pytest.raises(RuntimeError, match="closed"):
        backend.process_memory()


def test_nvml_init_failure_is_gpu_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakePynvml([], init_error="NVML Shared Library Not Found")
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    with pytest.raises(GpuUnavailable) as caught:
        NvmlBackend.open()
    assert caught.value.reason == "cannot initialise NVML: NVML Shared Library Not Found"


def test_nvml_without_the_package_is_gpu_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    with pytest.raises(GpuUnavailable, match="install nvidia-ml-py"):
        NvmlBackend.open()


# --- choosing a backend -----------------------------------------------------------------------


def test_open_backend_fake_declares(tmp_path: Path) -> None:
    backend, note = open_backend("2x24G:RTX4090", tmp_path)
    assert isinstance(backend, DeclaredBackend)
    assert note is None
    assert [d.model for d in backend.devices()] == ["RTX4090", "RTX4090"]
    assert backend.report_dir == tmp_path
    with pytest.raises(ValueError, match="not understood"):
        open_backend("lots", None)


def test_open_backend_without_a_gpu_here() -> None:
    """This machine (and CI) has no NVIDIA driver: no devices, and a reason to print."""
    try:
        NvmlBackend.open().close()
    except GpuUnavailable:
        pass
    else:
        pytest.skip("NVML works on this machine")
    backend, note = open_backend(None, None)
    assert isinstance(backend, DeclaredBackend)
    assert backend.devices() == ()
    assert backend.sample() == ()
    assert note is not None and note.startswith("cannot initialise NVML: ")


def test_open_backend_falls_back_when_nvml_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakePynvml([], init_error="Driver Not Loaded")
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    opened = open_backend(None, tmp_path)
    assert isinstance(opened.backend, DeclaredBackend)
    assert opened.backend.devices() == ()
    assert opened.note == "cannot initialise NVML: Driver Not Loaded"
    report_fake_gpu_usage(tmp_path, 0, 10, 10)  # no device 0 is declared
    assert opened.backend.process_memory() == ()


def test_open_backend_uses_nvml_when_it_works(fake_nvml: FakePynvml) -> None:
    backend, note = open_backend(None, None)
    assert isinstance(backend, NvmlBackend)
    assert note is None
    assert len(backend.devices()) == 2
    backend.close()


def test_open_backend_nvml_with_no_device_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml([None]).module())
    backend, note = open_backend(None, None)
    assert isinstance(backend, NvmlBackend)
    assert backend.devices() == ()
    assert note == "NVML lists no usable device"
    backend.close()
