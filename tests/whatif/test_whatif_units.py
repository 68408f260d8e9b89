"""Parsing GPU amounts at the edge: exact milli-GPU, and messages that say how to fix input."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.core.model import GpuRequest
from gpupool.units import GpuAmount, format_gpu_milli, parse_gpu, parse_gpu_limit, parse_gpu_quota


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, GpuAmount.whole(1)),
        (2, GpuAmount.whole(2)),
        (8, GpuAmount.whole(8)),
        (2.0, GpuAmount.whole(2)),
        (0.5, GpuAmount.fraction(500)),
        (0.25, GpuAmount.fraction(250)),
        (0.1, GpuAmount.fraction(100)),
        (0.001, GpuAmount.fraction(1)),
        (0.999, GpuAmount.fraction(999)),
        ("0.5", GpuAmount.fraction(500)),
        ("3", GpuAmount.whole(3)),
        (Decimal("0.125"), GpuAmount.fraction(125)),
    ],
)
def test_parse_gpu_accepts(value: object, expected: GpuAmount) -> None:
    assert parse_gpu(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1.5, "a fraction must be between 0 and 1 (got 1.5)"),
        (1.5, "use gpu: 1 or gpu: 2, or split into tasks"),
        (2.25, "use gpu: 2 or gpu: 3"),
        (0, "must be more than 0 (got 0)"),
        (-1, "must be more than 0 (got -1)"),
        (-0.5, "must be more than 0"),
        (0.0005, "whole number of milli-GPU"),
        (0.0005, "(got 0.0005)"),
        (True, "must be a number"),
        (False, "(got false)"),
        (None, "must be a number"),
        ("half", "must be a number like 1, 2 or 0.5 (got 'half')"),
        ([1], "must be a number"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
    ],
)
def test_parse_gpu_rejects_with_a_clear_message(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_gpu(value)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("value", "milli"),
    [(0, 0), (1, 1000), (2.5, 2500), (0.5, 500), ("4", 4000), (0.001, 1), (100, 100_000)],
)
def test_parse_gpu_quota(value: object, milli: int) -> None:
    assert parse_gpu_quota(value) == milli


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "0 or more"),
        (0.0001, "at most 3 decimals"),
        (True, "must be a number"),
        ("x", "got 'x'"),
    ],
)
def test_parse_gpu_quota_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_gpu_quota(value)
    assert message in str(info.value)


def test_parse_gpu_limit() -> None:
    half = GpuAmount.fraction(500)
    assert parse_gpu_limit(1.0, half) == 1000
    assert parse_gpu_limit(0.8, half) == 800
    assert parse_gpu_limit(0.5, half) == 500
    with pytest.raises(ValueError, match="at least the request"):
        parse_gpu_limit(0.25, half)
    with pytest.raises(ValueError, match="at most 1 device"):
        parse_gpu_limit(1.5, half)
    with pytest.raises(ValueError, match="fractional gpu only"):
        parse_gpu_limit(1, GpuAmount.whole(1))


def test_to_request() -> None:
    assert parse_gpu(2).to_request() == GpuRequest.whole(2)
    assert parse_gpu(0.25).to_request(800) == GpuRequest.fraction(250, 800)
    with pytest.raises(ValueError):
        parse_gpu(1).to_request(800)


@pytest.mark.parametrize(
    ("milli", "text"),
    [(0, "0"), (1000, "1"), (2000, "2"), (500, "0.5"), (2250, "2.25"), (1, "0.001")],
)
def test_format_gpu_milli(milli: int, text: str) -> None:
    assert format_gpu_milli(milli) == text


@given(st.integers(min_value=1, max_value=999))
def test_every_milli_fraction_round_trips(milli: int) -> None:
    written = format_gpu_milli(milli)
    assert parse_gpu(written) == GpuAmount.fraction(milli)
    assert parse_gpu(float(written)) == GpuAmount.fraction(milli)


@given(st.integers(min_value=1, max_value=1024))
def test_whole_devices_round_trip(devices: int) -> None:
    assert parse_gpu(devices) == GpuAmount.whole(devices)
    assert parse_gpu_quota(devices) == devices * 1000
