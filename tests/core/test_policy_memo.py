"""The policies' shared measure memos (`shared_memo`) and `evaluate`'s written-out checks: both
are there for speed, so each is held to the plain definition it replaces."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.core.packing import PackingState, PackNode, PodShape, TypicalShape
from gpupool.core.policies import default as default_module
from gpupool.core.policies import fgd as fgd_module
from gpupool.core.policies.base import (
    Capacity,
    PlacementPolicy,
    Scored,
    devices_with_room,
    fits_host,
    shared_memo,
)
from gpupool.core.policies.default import DefaultPolicy
from gpupool.core.policies.fgd import FgdPolicy

EXAMPLES = int(os.environ.get("GPUPOOL_PROPERTY_EXAMPLES", "200"))

WHOLE = PodShape(cpu_milli=8000, memory_mib=32768, gpu_count=1, gpu_milli=1000)
SHARE = PodShape(cpu_milli=2000, memory_mib=4096, gpu_count=1, gpu_milli=300)
TYPICAL = (TypicalShape(WHOLE, 0.5), TypicalShape(SHARE, 0.5))

# (model, free CPU, free memory, free milli-GPU per device): plenty, no CPU left, a share left
STATES = [
    ("A", 64000, 262144, (1000, 1000, 700, 0)),
    ("A", 0, 262144, (1000, 1000, 1000, 1000)),
    ("A", 3000, 8192, (300, 1000)),
    ("B", 64000, 1024, (1000,)),
]


def _values(policy: FgdPolicy) -> list[float]:
    return [policy.fragmentation(m, cpu, mem, free) for m, cpu, mem, free in STATES]


def test_a_policy_built_later_shares_the_memo_and_measures_the_same() -> None:
    shared_memo.cache_clear()
    first = DefaultPolicy(TYPICAL)
    measured = _values(first)
    second = DefaultPolicy(TYPICAL)
    assert second._exact is first._exact and len(second._exact) == len(STATES)
    assert _values(second) == measured
    shared_memo.cache_clear()
    assert _values(DefaultPolicy(TYPICAL)) == measured  # what a cold memo computes


def test_the_memo_is_not_shared_across_what_the_measure_depends_on() -> None:
    """Stranding (GPU with no CPU left) counts in the default's measure at its weight only: a
    memo shared across weights, or with FGD's measure, would return the other's values."""
    shared_memo.cache_clear()
    stranding = _values(DefaultPolicy(TYPICAL))
    plain = _values(DefaultPolicy(TYPICAL, stranding_weight=0.0))
    fgd = _values(FgdPolicy(TYPICAL, count_memory=True))
    assert stranding[1] > plain[1]
    shared_memo.cache_clear()
    assert _values(DefaultPolicy(TYPICAL, stranding_weight=0.0)) == plain
    assert _values(FgdPolicy(TYPICAL, count_memory=True)) == fgd
    assert _values(DefaultPolicy(TYPICAL)) == stranding


def test_a_memo_is_emptied_at_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fgd_module, "MEMO_MAX_ENTRIES", 2)
    monkeypatch.setattr(default_module, "MEMO_MAX_ENTRIES", 2)
    shared_memo.cache_clear()
    unbounded = _values(DefaultPolicy(TYPICAL)) + _values(FgdPolicy(TYPICAL))
    shared_memo.cache_clear()
    default, fgd = DefaultPolicy(TYPICAL), FgdPolicy(TYPICAL)
    assert _values(default) + _values(fgd) == unbounded
    assert 0 < len(default._exact) <= 2 and 0 < len(default._memo) <= 2
    assert 0 < len(fgd._memo) <= 2
    shared_memo.cache_clear()


class _Fits(PlacementPolicy):
    """Scores every node it is asked about 0: `evaluate` alone decides."""

    def score(self, state: Capacity, node: int, shape: PodShape) -> Scored | None:
        return 0.0, ()


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    devices=st.lists(st.sampled_from([0, 100, 300, 700, 1000]), max_size=4),
    cpu=st.sampled_from([0, 2000, 8000]),
    memory=st.sampled_from([0, 4096, 65536]),
    model=st.sampled_from(["A", "B"]),
    shape=st.builds(
        PodShape,
        st.sampled_from([0, 2000, 8000]),
        st.sampled_from([0, 4096, 65536]),
        st.integers(0, 3),
        st.sampled_from([0, 300, 700, 1000]),
        st.sampled_from([(), ("A",), ("B", "C")]),
    ),
)
def test_evaluate_scores_exactly_where_the_host_and_devices_fit(
    devices: list[int], cpu: int, memory: int, model: str, shape: PodShape
) -> None:
    state = PackingState([PackNode("n", cpu, memory, len(devices), model)])
    state.device_free[0] = tuple(devices)
    fits = fits_host(state, 0, shape) and (
        not shape.gpu_count or len(devices_with_room(state, 0, shape.gpu_milli)) >= shape.gpu_count
    )
    assert (_Fits().evaluate(state, 0, shape) is not None) == fits
