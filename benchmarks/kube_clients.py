"""Which Python Kubernetes client for gpupool: the four ways of using the three, measured.

    .venv/bin/python benchmarks/kube_clients.py [--pods 1000] [--watch 200] [--json]

Starts its own control plane (tools/kubetest) and measures, one client after the other on the
same API server: the official `kubernetes` (sync, a thread pool), `kubernetes_asyncio`, and
`lightkube` (sync with a thread pool, and async).

- import: seconds and RSS added by importing the client (API class, Pod, Binding, watch and
  config), in a fresh interpreter, median of `--import-runs`;
- create: `--pods` pods (schedulerName "nobody": no scheduler touches them) in a namespace of the
  client's own, `--concurrency` in flight (threads or tasks, as many pooled connections): per
  second, and the client process's CPU per request;
- bind: each of them through `pods/binding` to a node without KWOK's annotation (no kubelet),
  the same way. The API server answers a Binding with a Status, which none of the three can
  decode as the Binding they expect: the official ones are asked not to decode it
  (`_preload_content=False`), lightkube's msgspec.ValidationError after a 2xx is taken as bound;
- list: all of them, in a fresh process: seconds and peak RSS added while holding the list;
- watch: from the list's resourceVersion; `--watch` pods created one at a time, each waiting
  for its ADDED event: ms from the create's answer to the event out of the client (and from
  sending the create, in the JSON and the ratios);
- typing: `py.typed`, the `mypy --strict` errors in a short correct use of the client (create,
  list with its resourceVersion, watch from it), and whether mypy flags reading
  `pod.metadata.name` as a `str` without a None check (`*` in the table where it does not).

Each client's phases run in worker processes (this file with `--worker`), so one client's
imports and garbage do not weigh on the next; the namespace and node go afterwards. On a
2-core machine that also runs the API server, compare the clients, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

# The parts live next to this file (benchmarks/kube_clients_bench/), also when it is loaded by
# path. Appended, not inserted first: a worker runs isolated (-I, no script directory on the
# path) so that benchmarks/kubernetes.py cannot shadow the official `kubernetes` package.
sys.path.append(str(Path(__file__).resolve().parent))

from kube_clients_bench.admin import Admin
from kube_clients_bench.common import CLIENTS, WARM_POD, say
from kube_clients_bench.phases import worker
from kube_clients_bench.probes import import_cost, typing_report
from kube_clients_bench.report import compute_ratios, machine, render, versions

ROOT = Path(__file__).resolve().parents[1]


def run_worker(kind: str, phase: str, args: argparse.Namespace, **where: str) -> dict[str, Any]:
    command = [
        sys.executable, "-I", str(Path(__file__).resolve()), "--worker", kind, "--phase", phase,
        "--pods", str(args.pods), "--watch", str(args.watch),
        "--concurrency", str(args.concurrency),
        *(item for key, value in where.items() for item in (f"--{key}", value)),
    ]  # fmt: skip
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} {phase} worker exited {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(kind: str, admin: Admin, kubeconfig: Path, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"client": kind}
    say(f"{kind}: import cost ({args.import_runs} fresh interpreters), mypy --strict")
    row.update(import_cost(kind, args.import_runs))
    row.update(typing_report(kind))
    slug = kind.replace("_", "-")
    namespace, node = f"bench-{slug}", f"bench-node-{slug}"
    admin.prepare(namespace, node)
    where = {"kubeconfig": str(kubeconfig), "namespace": namespace, "node": node}
    try:
        say(f"{kind}: creating and binding {args.pods} pods, {args.concurrency} in flight")
        row.update(run_worker(kind, "load", args, **where))
        admin.delete_pod(namespace, WARM_POD)
        say(f"{kind}: listing {args.pods} pods, then the watch")
        row.update(run_worker(kind, "read", args, **where))
    finally:
        say(f"{kind}: deleting namespace {namespace}")
        admin.remove(namespace, node)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000, help="pods to create, bind and list")
    parser.add_argument("--watch", type=int, default=200, help="pods created under a watch")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    parser.add_argument("--import-runs", type=int, default=5)
    parser.add_argument("--clients", default=",".join(CLIENTS), help="which, in this order")
    parser.add_argument(
        "--json", action="store_true", help="print a JSON object (and the table on stderr)"
    )
    parser.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=("load", "read"), help=argparse.SUPPRESS)
    for hidden in ("kubeconfig", "namespace", "node"):
        parser.add_argument(f"--{hidden}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    chosen = [c for c in args.clients.split(",") if c]
    if unknown := set(chosen) - set(CLIENTS):
        parser.error(f"unknown clients {sorted(unknown)}; choose from {', '.join(CLIENTS)}")

    sys.path.insert(0, str(ROOT / "tools" / "kubetest"))
    import testenv

    started = datetime.datetime.now(datetime.UTC)
    rows: list[dict[str, Any]] = []
    with testenv.running() as plane:
        admin = Admin(plane.server, plane.admin_token, plane.ca_path)
        for kind in chosen:
            try:
                rows.append(measure(kind, admin, plane.kubeconfig, args))
            except Exception as error:  # one client failing must not hide the others
                say(f"{kind}: failed: {error}")
                rows.append({"client": kind, "error": str(error)})
    measured = [row for row in rows if "error" not in row]
    ratios = compute_ratios(measured) if measured else {}
    heading = (
        f"{args.pods} pods, {args.concurrency} in flight, {args.watch} watched; "
        f"{machine()['cpus']} CPUs; {started:%Y-%m-%d %H:%M} UTC"
    )
    table = render(rows, ratios) if measured else "no client measured"
    if args.json:
        report = {
            "started": started.isoformat(timespec="seconds"),
            "machine": machine(),
            "versions": versions(),
            "pods": args.pods,
            "watch": args.watch,
            "concurrency": args.concurrency,
            "clients": rows,
            "ratios_to_first": ratios,
        }
        print(f"{heading}\n{table}", file=sys.stderr)
        print(json.dumps(report, indent=2))
    else:
        print(f"{heading}\n{table}")
    return 0 if len(measured) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
