"""What no node could ever run is refused at submission (gpupool.server.services.feasibility),
as a table over ClusterNodes itself (no server: the checks are pure once the nodes are read),
plus one submission to a live server whose nodes track CPU and memory.

The live server's own cases (GPU memory, GPUs, selectors, gangs on simulated 2x4 nodes, which
do not track CPU or memory) are in test_api_validation.py's WORKLOAD_CASES.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.api.schemas import WorkloadIn
from gpupool.core.model import GpuRequestKind
from gpupool.server.errors import ApiError
from gpupool.server.services.feasibility import ClusterNodes, NodeShape
from liveserver import LiveServer, unique

GIB = 1024


def node(
    name: str,
    gpus: int = 4,
    *,
    cpu_milli: int | None = 32_000,
    memory_mib: int | None = 256 * GIB,
    pool: str = "a",
) -> NodeShape:
    return NodeShape(name, gpus, 80 * GIB, "H100", {"pool": pool}, cpu_milli, memory_mib)


TRACKED = (node("a1"), node("a2"), node("b1", 8, cpu_milli=64_000, memory_mib=512 * GIB, pool="b"))
"""Two 4-GPU nodes of 32 CPUs and 256 GiB, one 8-GPU node of 64 CPUs and 512 GiB."""
ONE_UNTRACKED = (*TRACKED, node("u1", 1, cpu_milli=None, memory_mib=None, pool="u"))
"""The same and a node that tracks neither: it could hold any CPU or memory per task."""

CASES: list[tuple[str, tuple[NodeShape, ...], dict[str, Any], str | None, str]] = [
    # id, nodes, submission changes, refused field (None: accepted), words of the message
    ("cpu at the largest node", TRACKED, {"cpu_milli": 64_000}, None, ""),
    (
        "cpu above every node",
        TRACKED,
        {"cpu_milli": 64_001},
        "cpu_milli",
        "cpu_milli 64001 asks for 64.001 CPUs per task on one node, but the largest node in the "
        "cluster has 64: ask for at most cpu_milli 64000 per task",
    ),
    (
        "cpu above the selected nodes",
        TRACKED,
        {"cpu_milli": 32_001, "node_selector": {"pool": ["a"]}},
        "cpu_milli",
        "the largest node in the nodes its node_selector matches has 32: ask for at most "
        "cpu_milli 32000",
    ),
    ("cpu on an untracked node", ONE_UNTRACKED, {"cpu_milli": 10**9}, None, ""),
    ("memory at the largest node", TRACKED, {"memory": "512G"}, None, ""),
    (
        "memory above every node",
        TRACKED,
        {"memory": "513G"},
        "memory",
        "memory 513G (525312 MiB) is more than any node in the cluster has (the largest has "
        "524288 MiB): ask for at most 512G per task",
    ),
    (
        "memory in MiB above every node",
        TRACKED,
        {"memory": 524_289},
        "memory",
        "memory 524289 (524289 MiB) is more than any node in the cluster has",
    ),
    ("memory on an untracked node", ONE_UNTRACKED, {"memory": "100T"}, None, ""),
    (
        "cpu and GPUs not on one node",
        TRACKED,
        {"gpu": 4, "cpu_milli": 33_000, "node_selector": {"pool": ["a", "u"]}},
        "cpu_milli",
        "",  # the selector matches only pool a: CPU above all of them, said as such
    ),
    (
        "enough GPUs and enough CPU, never on the same node",
        (node("gpus", 8, cpu_milli=8_000), node("cpus", 1, cpu_milli=64_000)),
        {"gpu": 8, "cpu_milli": 16_000},
        "cpu_milli",
        "no node in the cluster has what one task asks for all at once",
    ),
    (
        "gang held back by CPU",
        TRACKED,
        {"gpu": 1, "cpu_milli": 32_000, "tasks": 5},
        "tasks",
        "its 5 tasks must run together (tasks), but the cluster can hold at most 4 such tasks",
    ),
    (
        "gang held back by memory",
        TRACKED,
        {"gpu": 0.5, "memory": "200G", "tasks": 10, "min_available": 5},
        "min_available",
        "can hold at most 4 such tasks",
    ),
    (
        "gang that fits CPU and memory",
        TRACKED,
        {"gpu": 1, "cpu_milli": 16_000, "tasks": 8},
        None,
        "",
    ),
    ("no CPU asked", TRACKED, {"gpu": 8, "cpu_milli": 0, "tasks": 1}, None, ""),
]


def _kind(body: WorkloadIn) -> tuple[GpuRequestKind, int]:
    amount = body.gpu_amount
    if amount is None:
        return GpuRequestKind.MEMORY, body.gpu_memory_mib or 0
    if amount.is_whole:
        return GpuRequestKind.WHOLE, amount.devices
    return GpuRequestKind.FRACTION, amount.milli


@pytest.mark.parametrize(
    ("nodes", "changes", "field", "words"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_cpu_and_memory_no_node_has_are_refused_with_the_fix(
    nodes: tuple[NodeShape, ...], changes: dict[str, Any], field: str | None, words: str
) -> None:
    body = WorkloadIn.model_validate({"name": "w", "project": "p", "gpu": 1, **changes})
    kind, amount = _kind(body)
    if field is None:
        ClusterNodes(nodes).check(body, kind, amount)
        return
    with pytest.raises(ApiError) as raised:
        ClusterNodes(nodes).check(body, kind, amount)
    assert raised.value.status == 422
    assert raised.value.field == field
    assert words in raised.value.detail


def test_a_live_server_refuses_cpu_above_its_nodes(live_server: LiveServer) -> None:
    """Through the API: a node registered with its CPU and memory, a selector that picks it
    (the simulated nodes track neither, so they could hold any amount)."""
    project = unique("cpu")
    with live_server.client() as http:
        node_body = {
            "name": "tracked-1",
            "gpu_count": 2,
            "cpu_milli": 16_000,
            "memory_mib": 64 * GIB,
            "labels": {"pool": "tracked"},
        }
        assert http.post("/api/v1/nodes", json=node_body).status_code == 200
        assert http.post("/api/v1/projects", json={"name": project}).status_code == 201
        body: dict[str, Any] = {
            "name": "w",
            "project": project,
            "gpu": 1,
            "node_selector": {"pool": ["tracked"]},
        }
        for path in ("/api/v1/workloads/dry-run", "/api/v1/workloads"):
            response = http.post(path, json={**body, "cpu_milli": 16_001})
            assert response.status_code == 422, response.text
            assert (
                "the largest node in the nodes its node_selector matches has 16"
                in (response.json()["detail"])
            )
            assert response.json()["errors"][0]["field"] == "cpu_milli"
            response = http.post(path, json={**body, "memory": "65G"})
            assert response.status_code == 422, response.text
            assert "(the largest has 65536 MiB): ask for at most 64G" in response.json()["detail"]
        accepted = http.post("/api/v1/workloads", json={**body, "cpu_milli": 16_000})
        assert accepted.status_code == 201, accepted.text
        unselected = {**body, "name": "v", "node_selector": {}, "cpu_milli": 10**6}
        assert http.post("/api/v1/workloads", json=unselected).status_code == 201
