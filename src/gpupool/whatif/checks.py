"""What-if expectations, checked against the simulated cluster at an instant or at the end.

`running` / `pending` are exact sets (order ignored; stopping and suspended workloads are
neither); `evicted` / `not_evicted` count any Evict decision so far, partial ones included, and
`count.evicted` is how many distinct workloads were evicted; `placements` compares the nodes of
the running tasks, as a multiset (task numbering is the scheduler's business); `same_device` /
`different_devices` compare PHYSICAL devices (`TaskPlacement.physical_devices`, so a dynamic
fraction spread out to burst is where it really runs); `fair_share` compares the last cycle's
`ProjectShare.fair_share`, only in the amounts given. Each failure names the expectation, the
time (or the end), the line, what was expected and what was found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupool.core.decisions import ProjectShare
from gpupool.simcluster.records import State, WorkloadRecord
from gpupool.simcluster.words import format_placements
from gpupool.units import format_gpu_milli
from gpupool.whatif.scenario import Expectations

__all__ = ["Failure", "check_expectations", "state_words"]


@dataclass(frozen=True, slots=True)
class Failure:
    """One expectation (or run-level check) that did not hold."""

    check: str
    at_s: int | None
    """When it was checked; `None` = at the end of the run."""
    line: int | None
    expected: str
    actual: str
    detail: tuple[str, ...] = ()


def check_expectations(
    expect: Expectations,
    at_s: int | None,
    records: Mapping[str, WorkloadRecord],
    shares: Mapping[str, ProjectShare],
) -> list[Failure]:
    """The failures of `expect` against `records` (pending ones with the last cycle's reason)."""
    return _Checker(expect, at_s, records, shares).failures()


class _Checker:
    def __init__(
        self,
        expect: Expectations,
        at: int | None,
        records: Mapping[str, WorkloadRecord],
        shares: Mapping[str, ProjectShare],
    ) -> None:
        self._expect = expect
        self._at = at
        self._records = records
        self._shares = shares
        self._out: list[Failure] = []

    def _fail(self, check: str, expected: str, actual: str, detail: Iterable[str] = ()) -> None:
        line = self._expect.line_of(check.split(".")[0])
        self._out.append(Failure(check, self._at, line, expected, actual, tuple(detail)))

    def _in_state(self, state: State) -> list[str]:
        return [name for name, r in self._records.items() if r.state is state]

    def _explain(self, names: Iterable[str]) -> list[str]:
        return [f"{name} is {state_words(self._records[name])}" for name in names]

    def failures(self) -> list[Failure]:
        e = self._expect
        self._exact("running", e.running, State.RUNNING)
        self._exact("pending", e.pending, State.PENDING)
        evicted = [name for name, r in self._records.items() if r.evictions > 0]
        if e.evicted is not None:
            never = [n for n in e.evicted if n not in evicted]
            if never:
                self._fail(
                    "evicted",
                    f"evicted at least once: {_names(e.evicted)}",
                    f"never evicted: {_names(never)}",
                    self._explain(n for n in never if n in self._records),
                )
        if e.not_evicted is not None:
            were = [n for n in e.not_evicted if n in evicted]
            if were:
                self._fail(
                    "not_evicted",
                    f"never evicted: {_names(e.not_evicted)}",
                    "evicted: " + ", ".join(f"{n} ({self._records[n].evictions}x)" for n in were),
                )
        self._count("count.running", e.count_running, len(self._in_state(State.RUNNING)))
        self._count("count.pending", e.count_pending, len(self._in_state(State.PENDING)))
        self._count("count.evicted", e.count_evicted, len(evicted))
        for name, nodes in e.placements:
            self._placement(name, nodes)
        for group in e.same_device:
            self._same_device(group)
        for group in e.different_devices:
            self._different_devices(group)
        for project, share in e.fair_share:
            self._fair_share(project, share.gpu_milli, share.cpu_milli, share.memory_mib)
        return self._out

    def _exact(self, check: str, expected: tuple[str, ...] | None, state: State) -> None:
        if expected is None:
            return
        actual = self._in_state(state)
        missing = [n for n in expected if n not in actual]
        extra = [n for n in actual if n not in expected]
        if missing or extra:
            detail = self._explain(n for n in missing if n in self._records)
            detail += [f"{n} is {state_words(self._records[n])} but not expected" for n in extra]
            detail += [f"{n} is not submitted yet" for n in missing if n not in self._records]
            self._fail(check, _names(sorted(expected)), _names(sorted(actual)), detail)

    def _count(self, check: str, expected: int | None, actual: int) -> None:
        if expected is not None and expected != actual:
            self._fail(check, str(expected), str(actual))

    def _running(self, check: str, name: str) -> WorkloadRecord | None:
        record = self._records.get(name)
        if record is None or record.state is not State.RUNNING:
            actual = "not submitted yet" if record is None else state_words(record)
            self._fail(check, f"{name} running", f"{name} is {actual}")
            return None
        return record

    def _placement(self, name: str, nodes: tuple[str, ...]) -> None:
        record = self._running(f"placements.{name}", name)
        if record is None:
            return
        actual = sorted(p.node for p in record.workload.placements)
        if actual != sorted(nodes):
            self._fail(
                f"placements.{name}",
                _names(sorted(nodes)),
                _names(actual),
                [f"{name} runs on {format_placements(record.workload.placements)}"],
            )

    def _devices(self, check: str, group: tuple[str, ...]) -> dict[str, set[tuple[str, int]]]:
        """The physical devices each workload of `group` runs on; failures for non-running."""
        used: dict[str, set[tuple[str, int]]] = {}
        for name in group:
            record = self._running(check, name)
            if record is not None:
                used[name] = {
                    (p.node, d) for p in record.workload.placements for d in p.physical_devices
                }
        return used

    def _same_device(self, group: tuple[str, ...]) -> None:
        used = self._devices("same_device", group)
        if len(used) != len(group):
            return
        distinct = {frozenset(devices) for devices in used.values()}
        if len(distinct) != 1 or len(next(iter(distinct))) != 1:
            self._fail(
                "same_device",
                f"{_names(group)} on one device",
                "; ".join(f"{n} on {_device_list(d)}" for n, d in used.items()),
            )

    def _different_devices(self, group: tuple[str, ...]) -> None:
        used = self._devices("different_devices", group)
        if len(used) != len(group):
            return
        owners: dict[tuple[str, int], list[str]] = {}
        for name, devices in used.items():
            for device in devices:
                owners.setdefault(device, []).append(name)
        shared = {d: names for d, names in owners.items() if len(names) > 1}
        if shared:
            self._fail(
                "different_devices",
                f"{_names(group)} on distinct devices",
                "; ".join(
                    f"{_names(names)} share {node}:{index}"
                    for (node, index), names in sorted(shared.items())
                ),
            )

    def _fair_share(
        self, project: str, gpu_milli: int | None, cpu_milli: int | None, memory_mib: int | None
    ) -> None:
        check = f"fair_share.{project}"
        share = self._shares.get(project)
        if share is None:
            self._fail(check, "a fair share", "the scheduler reported none for this project")
            return
        actual = share.fair_share
        if gpu_milli is not None and gpu_milli != actual.gpu_milli:
            self._fail(
                f"{check}.gpu", format_gpu_milli(gpu_milli), format_gpu_milli(actual.gpu_milli)
            )
        if cpu_milli is not None and cpu_milli != actual.cpu_milli:
            self._fail(f"{check}.cpu_milli", str(cpu_milli), str(actual.cpu_milli))
        if memory_mib is not None and memory_mib != actual.memory_mib:
            self._fail(f"{check}.memory_mib", str(memory_mib), str(actual.memory_mib))


# --- words ----------------------------------------------------------------------------------------


def _names(names: Iterable[str]) -> str:
    return "[" + ", ".join(names) + "]"


def _device_list(devices: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{node}:{index}" for node, index in sorted(devices)) or "no device"


def state_words(record: WorkloadRecord) -> str:
    if record.state is State.RUNNING:
        return f"running on {format_placements(record.workload.placements)}"
    if record.reason:
        return f"{record.state}: {record.reason}"
    return str(record.state)
