"""The collector pause the drivers put around a cycle: off inside, as it was after, errors too."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gpupool.gcpause import collector_paused


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled_before", [True, False])
def test_the_collector_is_off_inside_and_as_it_was_after(enabled_before: bool) -> None:
    if enabled_before:
        gc.enable()
    else:
        gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled_before


def test_an_error_in_the_cycle_resumes_the_collector() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a cycle failed")
    assert gc.isenabled()
