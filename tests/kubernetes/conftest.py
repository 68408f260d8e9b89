"""Tests against a real Kubernetes API server (tools/kubetest/testenv.py): marked `kubernetes`.

`kube_plane` is one control plane (etcd, kube-apiserver, controller manager, KWOK) per test
session, built from Go modules the first time (minutes) and cached in ~/.cache/gpupool/kube/.
Without Go (and no cached binaries) the tests skip with the reason, except with CI=true, where
they fail: CI must run them. Tests that restart or stop the API server take `kube_plane_own`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "kubetest"))

import testenv
from kubehelpers import Cluster

pytestmark = pytest.mark.kubernetes


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.kubernetes)
            item.add_marker(pytest.mark.slow)  # a control plane per worker: the slow tier


def _unavailable() -> str | None:
    reason = testenv.missing_prerequisite()
    if reason is None:
        return None
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the Kubernetes tests: {reason}", pytrace=False)
    return reason


def _plane() -> Iterator[testenv.ControlPlane]:
    reason = _unavailable()
    if reason is not None:
        pytest.skip(reason)
    try:
        testenv.build()
    except testenv.TestEnvError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot build the Kubernetes test binaries: {error}", pytrace=False)
        pytest.skip(f"cannot build the Kubernetes test binaries: {error}")
    plane = testenv.ControlPlane()
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kube_plane() -> Iterator[testenv.ControlPlane]:
    """A shared control plane: tests keep to their own namespaces and node names."""
    yield from _plane()


@pytest.fixture
def kube_plane_own() -> Iterator[testenv.ControlPlane]:
    """A control plane of this test's own (it may restart the API server)."""
    yield from _plane()


@pytest.fixture
def cluster(kube_plane: testenv.ControlPlane) -> Iterator[Cluster]:
    """Helpers over the shared control plane; what a test creates through them is removed."""
    with Cluster(kube_plane) as helper:
        yield helper
