"""The worker processes' phases: create and bind (`load`), then list and watch (`read`).

`kube_clients.py --worker KIND --phase load|read` runs one of them with one client's adapter
and prints its measurements as one JSON line; `timed_sync`/`timed_async` time the calls over
threads or tasks, `Arrivals` records when the watch delivers each pod's ADDED event.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kube_clients_bench.adapters import ADAPTERS
from kube_clients_bench.common import WARM_POD, memory_kib, p95, reset_peak, say


class Progress:
    """Says on stderr when a quarter of a phase is done."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total, self.done, self.next = what, total, 0, total / 4
        self.lock = threading.Lock()

    def tick(self) -> None:
        with self.lock:
            self.done += 1
            if self.done >= self.next:
                self.next += self.total / 4
                say(f"  {self.what}: {self.done}/{self.total}")


def timed_sync(
    call: Callable[[str], None], names: list[str], what: str, width: int
) -> tuple[float, float]:
    """Calls per second of `call` over `names`, `width` threads; this process's CPU ms a call."""
    progress = Progress(what, len(names))

    def one(name: str) -> None:
        call(name)
        progress.tick()

    started, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(width) as pool:
        list(pool.map(one, names))
    cpu_ms = 1000 * (time.process_time() - cpu) / len(names)
    return len(names) / (time.perf_counter() - started), cpu_ms


async def timed_async(
    call: Callable[[str], Awaitable[None]], names: list[str], what: str, width: int
) -> tuple[float, float]:
    """Calls per second of `call` over `names`, `width` tasks; this process's CPU ms a call."""
    progress = Progress(what, len(names))
    pending = iter(names)

    async def worker() -> None:
        for name in pending:
            await call(name)
            progress.tick()

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(width)))
    cpu_ms = 1000 * (time.process_time() - cpu) / len(names)
    return len(names) / (time.perf_counter() - started), cpu_ms


class Arrivals:
    """When each watched pod's ADDED event came out of the client (perf_counter)."""

    def __init__(self, expected: Iterable[str], make_event: Callable[[], Any]) -> None:
        self.expected = set(expected)
        self.at: dict[str, float] = {}
        self.events = {name: make_event() for name in self.expected}

    def added(self, name: str) -> bool:
        """Record `name`; True once every expected pod has been seen (the watch may stop)."""
        if name in self.expected and name not in self.at:
            self.at[name] = time.perf_counter()
            self.events[name].set()
        return len(self.at) == len(self.expected)


def watch_names(count: int) -> list[str]:
    return ["w-sentinel", *(f"w-{i}" for i in range(count))]


def load_phase(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """Create and bind `args.pods` pods (after one of each on one thread, to warm up)."""
    names = [f"p-{i}" for i in range(args.pods)]
    row: dict[str, Any] = {}
    client = ADAPTERS[kind](args.kubeconfig, args.namespace, args.node, args.concurrency)
    if kind in ("kubernetes", "lightkube"):
        client.create(WARM_POD)
        client.bind(WARM_POD)
        row["create_per_s"], row["create_cpu_ms"] = timed_sync(
            client.create, names, "created", args.concurrency
        )
        row["bind_per_s"], row["bind_cpu_ms"] = timed_sync(
            client.bind, names, "bound", args.concurrency
        )
    else:

        async def run() -> None:
            await client.open()
            await client.create(WARM_POD)
            await client.bind(WARM_POD)
            row["create_per_s"], row["create_cpu_ms"] = await timed_async(
                client.create, names, "created", args.concurrency
            )
            row["bind_per_s"], row["bind_cpu_ms"] = await timed_async(
                client.bind, names, "bound", args.concurrency
            )
            await client.close()

        asyncio.run(run())
    row["load_peak_mib"] = memory_kib("VmHWM") / 1024
    row["cpu_ms"] = (row["create_cpu_ms"] + row["bind_cpu_ms"]) / 2
    return row


def check_listed(client: Any, items: list[Any], args: argparse.Namespace) -> None:
    nodes = dict(client.name_node(pod) for pod in items)
    if len(nodes) != args.pods or set(nodes.values()) != {args.node}:
        raise RuntimeError(f"listed {len(nodes)} pods on {set(nodes.values())}")


def read_phase(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """List the pods in a fresh process (after a list of `default` to warm up), then watch."""
    client = ADAPTERS[kind](args.kubeconfig, args.namespace, args.node, args.concurrency)
    names = watch_names(args.watch)
    if kind in ("kubernetes", "lightkube"):
        client.list("default")
        gc.collect()
        before = memory_kib("VmRSS")
        reset_peak()
        started = time.perf_counter()
        items, version = client.list(args.namespace)
        row = {"list_s": time.perf_counter() - started}
        row["list_peak_mib"] = (memory_kib("VmHWM") - before) / 1024
        row["list_held_mib"] = (memory_kib("VmRSS") - before) / 1024
        check_listed(client, items, args)
        del items
        arrivals = Arrivals(names, threading.Event)
        watcher = threading.Thread(target=client.watch, args=(version, arrivals.added), daemon=True)
        watcher.start()
        latencies = []
        for name in names:
            sent = time.perf_counter()
            client.create(name)
            responded = time.perf_counter()
            if not arrivals.events[name].wait(30):
                raise RuntimeError(f"no ADDED event for {name} in 30 s")
            latencies.append((arrivals.at[name] - responded, arrivals.at[name] - sent))
        watcher.join(30)
    else:

        async def run() -> tuple[dict[str, Any], list[tuple[float, float]]]:
            await client.open()
            await client.list("default")
            gc.collect()
            before = memory_kib("VmRSS")
            reset_peak()
            started = time.perf_counter()
            items, version = await client.list(args.namespace)
            row = {"list_s": time.perf_counter() - started}
            row["list_peak_mib"] = (memory_kib("VmHWM") - before) / 1024
            row["list_held_mib"] = (memory_kib("VmRSS") - before) / 1024
            check_listed(client, items, args)
            del items
            arrivals = Arrivals(names, asyncio.Event)
            watcher = asyncio.create_task(client.watch(version, arrivals.added))
            latencies = []
            for name in names:
                sent = time.perf_counter()
                await client.create(name)
                responded = time.perf_counter()
                await asyncio.wait_for(arrivals.events[name].wait(), 30)
                latencies.append((arrivals.at[name] - responded, arrivals.at[name] - sent))
            await asyncio.wait_for(watcher, 30)
            await client.close()
            return row, latencies

        row, latencies = asyncio.run(run())
    say(f"  watched {len(names)} pods created one at a time")
    # Not the sentinel's: the watch may still have been connecting. An event can come out of
    # the client before the create's answer does ("early", a negative latency).
    after_answer = [answer for answer, _ in latencies[1:]]
    after_send = [send for _, send in latencies[1:]]
    row["watch_p50_ms"] = 1000 * statistics.median(after_answer)
    row["watch_p95_ms"] = 1000 * p95(after_answer)
    row["watch_early"] = sum(1 for latency in after_answer if latency < 0)
    row["watch_from_send_p50_ms"] = 1000 * statistics.median(after_send)
    row["watch_from_send_p95_ms"] = 1000 * p95(after_send)
    return row


def worker(args: argparse.Namespace) -> int:
    phase = load_phase if args.phase == "load" else read_phase
    print(json.dumps(phase(args.worker, args)))
    return 0
