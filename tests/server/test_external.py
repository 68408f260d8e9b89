"""Pods created by others (Kubernetes) as workload rows: `gpupool.server.external.sync`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.api.schemas import ProjectIn
from gpupool.core.model import TaintEffect, Toleration, TolerationOperator
from gpupool.executors.kubernetes.objects import ExternalPod
from gpupool.executors.kubernetes.settings import Toleration as KubeToleration
from gpupool.server import external, migrate
from gpupool.server.db import EventRow, WorkloadRow, make_engine, make_sessionmakers
from gpupool.server.services import projects
from gpupool.server.settings import ServerSettings
from gpupool.server.snapshot import build_snapshot

T0 = 1_700_000_000.0


def session_with_project(tmp_path: Path) -> Session:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    migrate.upgrade(engine)
    writer, _ = make_sessionmakers(engine)
    session = writer()
    projects.create(
        session, ProjectIn.model_validate({"name": "team", "quota": {"gpu": 4}}), T0, {}, "admin"
    )
    session.flush()
    return session


def workload_events(session: Session) -> list[EventRow]:
    """The log less the project's creation (audited): what the pods' workloads did."""
    query = select(EventRow).where(EventRow.workload.is_not(None)).order_by(EventRow.id)
    return list(session.scalars(query))


def pod(name: str, **fields: object) -> ExternalPod:
    base = ExternalPod(
        namespace="gpupool-team",
        name=name,
        uid=f"uid-{name}",
        project="team",
        group=None,
        min_available=None,
        gpu_kind="whole",
        gpu_amount=1,
        gpu_limit_milli=None,
        cpu_milli=0,
        memory_mib=0,
        node_selector=(),
        tolerations=(),
        workload_type="train",
        priority=None,
        preemptible=None,
        image="train:1",
        command=("python", "train.py"),
        grace_period_s=30,
        created_at=f"2026-11-24T10:00:0{len(name) % 10}Z",
        node=None,
        launch_id=None,
        terminating=False,
        finished=False,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def rows(session: Session) -> dict[str, WorkloadRow]:
    return {row.name: row for row in session.scalars(select(WorkloadRow))}


def test_a_pod_becomes_a_pending_workload_once(tmp_path: Path) -> None:
    session = session_with_project(tmp_path)
    toleration = KubeToleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
    single = pod("by-hand", tolerations=(toleration,), node_selector=(("zone", ("a",)),))
    assert external.sync(session, [single], T0) == 1
    assert external.sync(session, [single], T0 + 1) == 0  # nothing changed: nothing written
    row = rows(session)["by-hand"]
    assert (row.origin, row.status, row.image, row.tasks) == ("kubernetes", "pending", "train:1", 1)
    assert row.pods == ["gpupool-team/by-hand/uid-by-hand"]
    built = build_snapshot(session, T0, ServerSettings(data_dir=tmp_path).scheduler)
    (workload,) = built.snapshot.workloads
    assert not workload.movable
    assert workload.tolerations == (
        Toleration("nvidia.com/gpu", TolerationOperator.EXISTS, None, TaintEffect.NO_SCHEDULE),
    )
    assert workload.node_selector == (("zone", ("a",)),)


def test_a_group_waits_for_its_pods_out_of_the_schedulers_sight(tmp_path: Path) -> None:
    session = session_with_project(tmp_path)
    first = pod("ddp-0", group="ddp", min_available=3)
    external.sync(session, [first], T0)
    row = rows(session)["ddp"]
    assert row.tasks == 1 and "1 of the 3 pods" in (row.pending_reason or "")
    built = build_snapshot(session, T0, ServerSettings(data_dir=tmp_path).scheduler)
    assert built.snapshot.workloads == ()  # not schedulable until its pods exist
    others = [pod(f"ddp-{i}", group="ddp", min_available=3) for i in (1, 2)]
    external.sync(session, [first, *others], T0 + 1)
    session.expire_all()
    row = rows(session)["ddp"]
    assert row.tasks == 3 and len(row.pods or []) == 3
    built = build_snapshot(session, T0 + 1, ServerSettings(data_dir=tmp_path).scheduler)
    assert [w.tasks for w in built.snapshot.workloads] == [3]


def test_pods_that_go_take_their_pending_workload_with_them(tmp_path: Path) -> None:
    session = session_with_project(tmp_path)
    external.sync(session, [pod("short-lived")], T0)
    external.sync(session, [], T0 + 1)
    assert "short-lived" not in rows(session)
    events = workload_events(session)
    assert [e.kind for e in events] == ["submitted", "deleted"]
    # Keyed by ids: the project's (what researchers' reads filter on) and the workload's.
    (project_id,) = {e.project_id for e in events}
    assert project_id is not None and project_id == projects.get_row(session, "team").id
    assert events[0].workload_id is not None and events[0].workload_id == events[1].workload_id


def test_a_bad_pod_fails_once_and_says_why(tmp_path: Path) -> None:
    session = session_with_project(tmp_path)
    bad = pod("bad", problem="annotation gpupool.dev/gpu-fraction: gpu must be a number")
    external.sync(session, [bad], T0)
    external.sync(session, [bad], T0 + 1)
    external.sync(session, [bad], T0 + 2)
    (row,) = rows(session).values()
    assert row.status == "failed"
    events = [e.message for e in workload_events(session)]
    assert len(events) == 1 and "gpu-fraction" in events[0]


def test_a_group_of_unequal_pods_is_refused_with_the_fix(tmp_path: Path) -> None:
    session = session_with_project(tmp_path)
    pods = [pod("g-0", group="g"), pod("g-1", group="g", gpu_amount=2)]
    external.sync(session, pods, T0)
    (row,) = rows(session).values()
    assert row.status == "failed"
    (event,) = workload_events(session)
    assert "do not ask for the same resources" in event.message


def test_names_are_valid_and_unique(tmp_path: Path) -> None:
    session = session_with_project(tmp_path)
    long_name = "a." * 40 + "pod"
    both = [pod("job"), pod(long_name)]
    external.sync(session, both, T0)
    # A pod of the same name in another namespace of the project: another workload, renamed.
    external.sync(session, [*both, pod("job", uid="uid-2", namespace="team-extra")], T0)
    names = sorted(rows(session))
    assert len(names) == 3 and all(len(n) <= 63 for n in names)
    assert "job" in names and any(n.startswith("job-") for n in names)


def test_waiting_reasons_come_after_a_quiet_period(tmp_path: Path) -> None:
    session = session_with_project(tmp_path)
    external.sync(session, [pod("waits")], T0)
    assert external.waiting_reasons(session, T0 + 1) == {}
    row = rows(session)["waits"]
    row.pending_reason = "needs 1 whole GPU; all 4 GPUs are allocated"
    session.flush()
    assert external.waiting_reasons(session, T0 + external.WAITING_QUIET_S + 1) == {
        ("gpupool-team", "waits"): "needs 1 whole GPU; all 4 GPUs are allocated"
    }
