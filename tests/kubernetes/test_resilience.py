"""When things fail: the API server restarts mid-run, a leader dies, the watches lose events."""

from __future__ import annotations

import time
from pathlib import Path

import testenv
from kubehelpers import Cluster, GpupoolOnKubernetes, unique, wait_for
from lightkube.resources.coordination_v1 import Lease


def _bound_pods(gp: GpupoolOnKubernetes, project: str) -> list[str]:
    return sorted(
        p.metadata.name or ""
        for p in gp.pods(project)
        if p.metadata is not None and p.spec is not None and p.spec.nodeName
    )


def test_api_server_restart_mid_run(kube_plane_own: testenv.ControlPlane, tmp_path: Path) -> None:
    """gpupool keeps running while the API server is down, reconnects, resyncs its caches, and
    starts every task exactly once."""
    with Cluster(kube_plane_own) as cluster, GpupoolOnKubernetes(cluster, tmp_path) as gp:
        cluster.wait_node_ready(gp.node("n1", gpus=8))
        gp.project("team", 8)
        for i in range(3):
            gp.submit("team", f"before-{i}", gpu=1, duration_s=120)
        for i in range(3):
            gp.wait_status("team", f"before-{i}", "running")
        wait_for("3 pods bound", lambda: len(_bound_pods(gp, "team")) == 3)
        kube_plane_own.stop_apiserver()
        # While it is down, work is submitted to gpupool (its API and database still answer).
        for i in range(3):
            gp.submit("team", f"during-{i}", gpu=1, duration_s=120)
        time.sleep(3)  # the loop binds them in its database; their pods cannot be made yet
        kube_plane_own.start_apiserver()
        for i in range(3):
            gp.wait_status("team", f"during-{i}", "running", timeout_s=60)
        pods = wait_for(
            "6 pods bound", lambda: len(_bound_pods(gp, "team")) == 6 and gp.pods("team"), 60
        )
        names = [p.metadata.name for p in pods if p.metadata]
        assert len(names) == len(set(names)) == 6  # no task started twice
        for workload in gp.workloads("team"):
            tasks = gp.workload("team", workload["name"])["task_list"]
            assert len(tasks) == 1, (workload["name"], tasks)  # never requeued, never doubled
        assert "resynced" in gp.log() or "watch lost" in gp.log()


def test_leader_failover(cluster: Cluster, tmp_path: Path, postgres_url: str) -> None:
    """Two replicas on one PostgreSQL: the holder of the Lease schedules; killed, the other
    takes over within 15 s, and no pod is bound twice or evicted for nothing."""
    pool = unique("pool")
    system = f"{pool}-system"
    args = ("--leader-elect", "--system-namespace", system)
    first = GpupoolOnKubernetes(
        cluster, tmp_path / "a", database_url=postgres_url, extra_args=args, pool=pool
    )
    second = GpupoolOnKubernetes(
        cluster,
        tmp_path / "b",
        database_url=postgres_url,
        extra_args=args,
        pool=pool,
        token_from=first,
    )
    cluster.forget_namespace(system)
    with first, second:
        cluster.wait_node_ready(first.node("n1", gpus=4))
        first.project("team", 4)

        def holder() -> str | None:
            try:
                lease = cluster.client.get(Lease, "gpupool-scheduler", namespace=system)
            except Exception:
                return None
            return lease.spec.holderIdentity if lease.spec else None

        leader_name = wait_for("a leader", holder)
        replicas = {first.process.pid: first, second.process.pid: second}
        (leader,) = [gp for pid, gp in replicas.items() if leader_name.endswith(f"-{pid}")]
        follower = second if leader is first else first
        for i in range(2):
            follower.submit("team", f"job-{i}", gpu=1, duration_s=300)
        for i in range(2):
            follower.wait_status("team", f"job-{i}", "running")
        wait_for("2 pods bound", lambda: len(_bound_pods(follower, "team")) == 2)
        before = _bound_pods(follower, "team")

        leader.process.kill()  # no release: the follower must wait out the lease
        killed_at = time.monotonic()
        follower.submit("team", "after", gpu=1, duration_s=300)
        follower.wait_status("team", "after", "running", timeout_s=30)
        wait_for("the new pod bound", lambda: len(_bound_pods(follower, "team")) == 3, 30)
        takeover_s = time.monotonic() - killed_at
        print(f"takeover: the follower bound new work {takeover_s:.1f} s after the leader died")
        assert takeover_s <= 15.0
        assert holder() != leader_name
        after = _bound_pods(follower, "team")
        assert set(before) <= set(after) and len(after) == 3  # nothing rebound, nothing lost
        for name in ("job-0", "job-1", "after"):
            detail = follower.workload("team", name)
            assert len(detail["task_list"]) == 1
            assert "evicted" not in [e["kind"] for e in detail["events"]]
