"""GPU utilization from DCGM metrics through Prometheus, against a fake Prometheus: a stdlib
HTTP server on a loopback port serving canned `/api/v1/query` answers (no Prometheus binary
is available to test against)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from gpupool.executors.base import UsageSample
from gpupool.executors.kubernetes.dcgm import (
    FB_USED_METRIC,
    QUERY,
    UTIL_METRIC,
    NoUtilization,
    PodDevices,
    PodKey,
    PrometheusUtilization,
    UtilizationSource,
)

T0 = 1_700_000_000.0
PODS: dict[PodKey, PodDevices] = {
    ("gpupool-a", "train-0"): ("n1", (0,)),
    ("gpupool-b", "eval-0"): ("n2", (3,)),
}


class FakePrometheus:
    """Answers `GET /prom/api/v1/query` with whatever the test set; records the queries."""

    def __init__(self) -> None:
        self.status = 200
        self.body = answer()
        self.content_length = True
        self.stall = False
        self.drip_s: float | None = None
        """Send the body a byte at a time, this long apart."""
        self.queries: list[dict[str, list[str]]] = []
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != "/prom/api/v1/query":
                    self.send_error(404)
                    return
                fake.queries.append(parse_qs(parts.query))
                if fake.stall:
                    fake.release.wait(10)
                    return
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                if fake.content_length:
                    self.send_header("Content-Length", str(len(fake.body)))
                self.end_headers()
                if fake.drip_s is None:
                    self.wfile.write(fake.body)
                    return
                for byte in fake.body:
                    if fake.release.wait(fake.drip_s):
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/prom/"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    yield fake
    fake.close()


class Warnings(list[str]):
    def __call__(self, message: str) -> None:
        self.append(message)


@pytest.fixture
def warnings() -> Warnings:
    return Warnings()


@pytest.fixture
def source(prometheus: FakePrometheus, warnings: Warnings) -> Iterator[PrometheusUtilization]:
    source = PrometheusUtilization(prometheus.url, timeout_s=2.0, warn=warnings)
    yield source
    source.close()


def series(metric: str, value: object, **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": metric, **labels}, "value": [T0, str(value)]}


def gpu(
    pod: str | None,
    namespace: str | None,
    index: int,
    util: object,
    memory_mib: object,
    *,
    exported: bool = False,
) -> list[dict[str, Any]]:
    """The two series dcgm-exporter gives for one GPU, as Prometheus stores them: with
    `exported`, scraped with honor_labels false (the exporter's pod labels renamed)."""
    labels = {
        "gpu": str(index),
        "UUID": f"GPU-{index:04d}",
        "Hostname": "node",
        "modelName": "H100",
    }
    if exported:
        labels |= {"pod": "dcgm-exporter-x7", "namespace": "gpu-operator"}
        if pod is not None and namespace is not None:
            labels |= {"exported_pod": pod, "exported_namespace": namespace}
    elif pod is not None and namespace is not None:
        labels |= {"pod": pod, "namespace": namespace, "container": "main"}
    return [series(UTIL_METRIC, util, **labels), series(FB_USED_METRIC, memory_mib, **labels)]


def answer(*gpus: list[dict[str, Any]]) -> bytes:
    result = [one for pair in gpus for one in pair]
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(body).encode()


def error_answer(kind: str, error: str) -> bytes:
    return json.dumps({"status": "error", "errorType": kind, "error": error}).encode()


# -- mapping ------------------------------------------------------------------------------------


@pytest.mark.parametrize("exported", [False, True], ids=["pod", "exported_pod"])
def test_samples_are_attributed_through_the_pod(
    prometheus: FakePrometheus, source: PrometheusUtilization, exported: bool
) -> None:
    prometheus.body = answer(
        gpu("train-0", "gpupool-a", 5, 87.6, 30000, exported=exported),
        gpu("eval-0", "gpupool-b", 1, 0, 812, exported=exported),
        gpu(None, None, 2, 99, 100, exported=exported),  # idle: no pod, cannot be mapped
        gpu("someone-else", "default", 3, 50, 100, exported=exported),
    )
    assert source.samples(T0, PODS) == [
        UsageSample(T0, "n1", 0, 88, 30000),
        UsageSample(T0, "n2", 3, 0, 812),
    ]
    assert prometheus.queries == [{"query": [QUERY]}]


def test_a_multi_gpu_pod_pairs_series_by_gpu_label_with_its_devices_in_order(
    prometheus: FakePrometheus, source: PrometheusUtilization
) -> None:
    prometheus.body = answer(
        gpu("gang-0", "gpupool-a", 10, 30, 3),  # numerically after 2: dropped (two devices)
        gpu("gang-0", "gpupool-a", 2, 20, 2),
        gpu("gang-0", "gpupool-a", 1, 10, 1),
    )
    pods: dict[PodKey, PodDevices] = {("gpupool-a", "gang-0"): ("n1", (6, 4))}
    assert source.samples(T0, pods) == [
        UsageSample(T0, "n1", 4, 10, 1),
        UsageSample(T0, "n1", 6, 20, 2),
    ]


def test_devices_without_a_series_get_no_sample_and_half_a_series_is_none(
    prometheus: FakePrometheus, source: PrometheusUtilization
) -> None:
    util_only = gpu("eval-0", "gpupool-b", 0, 50, 1)[:1]
    prometheus.body = answer(gpu("train-0", "gpupool-a", 0, 40, 1), util_only)
    pods = PODS | {("gpupool-a", "gang-0"): ("n3", (0, 1))}
    assert source.samples(T0, pods) == [UsageSample(T0, "n1", 0, 40, 1)]


def test_bad_values_are_skipped_and_others_clamped(
    prometheus: FakePrometheus, source: PrometheusUtilization
) -> None:
    prometheus.body = answer(
        gpu("train-0", "gpupool-a", 0, 250, 1),
        gpu("eval-0", "gpupool-b", 0, "NaN", 1),
        [{"metric": "not an object", "value": [T0, "1"]}, {"value": "nope"}],
    )
    assert source.samples(T0, PODS) == [UsageSample(T0, "n1", 0, 100, 1)]


def test_one_sample_per_device_when_two_pods_or_two_scrapes_report_it(
    prometheus: FakePrometheus, source: PrometheusUtilization
) -> None:
    prometheus.body = answer(
        gpu("reserve-n1-0", "gpupool-system", 0, 60, 500),
        gpu("reserve-n1-0", "gpupool-system", 0, 70, 400),  # a second scrape job
        gpu("share-0", "gpupool-a", 0, 65, 900),
    )
    pods: dict[PodKey, PodDevices] = {
        ("gpupool-system", "reserve-n1-0"): ("n1", (2,)),
        ("gpupool-a", "share-0"): ("n1", (2,)),
    }
    assert source.samples(T0, pods) == [UsageSample(T0, "n1", 2, 70, 900)]


# -- rate limit and failures --------------------------------------------------------------------


def test_at_most_one_query_round_per_min_interval(
    prometheus: FakePrometheus, source: PrometheusUtilization
) -> None:
    prometheus.body = answer(gpu("train-0", "gpupool-a", 0, 40, 1))
    assert len(source.samples(T0, PODS)) == 1
    assert source.samples(T0 + 9.9, PODS) == []  # nothing new since the last call
    assert len(prometheus.queries) == 1
    assert source.samples(T0 + 10, PODS) == [UsageSample(T0 + 10, "n1", 0, 40, 1)]
    assert len(prometheus.queries) == 2
    assert len(source.samples(T0 - 3600, PODS)) == 1  # the clock stepped back: not stuck
    assert len(prometheus.queries) == 3


def test_a_stalled_prometheus_times_out_quickly_and_warns(
    prometheus: FakePrometheus, warnings: Warnings
) -> None:
    prometheus.stall = True
    source = PrometheusUtilization(prometheus.url, timeout_s=0.2, warn=warnings)
    began = time.monotonic()
    assert source.samples(T0, PODS) == []
    assert time.monotonic() - began < 2
    assert len(warnings) == 1
    assert "did not answer within 0.2 s" in warnings[0]
    source.close()


def test_a_body_dripping_past_the_timeout_is_cut(
    prometheus: FakePrometheus, warnings: Warnings
) -> None:
    prometheus.body = answer(gpu("train-0", "gpupool-a", 0, 40, 1))
    prometheus.drip_s = 0.05  # each read is quick; the whole answer is not
    source = PrometheusUtilization(prometheus.url, timeout_s=0.3, warn=warnings)
    began = time.monotonic()
    assert source.samples(T0, PODS) == []
    assert time.monotonic() - began < 2
    assert "did not answer within 0.3 s" in warnings[0]
    source.close()


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (500, b"oops", "answered HTTP 500"),
        (503, error_answer("unavailable", "TSDB not ready"), "HTTP 503: unavailable: TSDB"),
        (200, b'{"status": "success", "data": ', "not JSON"),
        (200, b"[1, 2]", "not a query result"),
        (200, error_answer("timeout", "query timed out"), "status 'error': timeout: query"),
        (422, error_answer("execution", "many-to-many"), "HTTP 422: execution: many-to-many"),
        (200, b'{"status": "success", "data": {"resultType": "matrix", "result": []}}', "vector"),
        (302, b"", "answered HTTP 302"),
    ],
)
def test_a_bad_answer_gives_no_samples_and_a_clear_warning(
    prometheus: FakePrometheus,
    source: PrometheusUtilization,
    warnings: Warnings,
    status: int,
    body: bytes,
    expected: str,
) -> None:
    prometheus.status, prometheus.body = status, body
    assert source.samples(T0, PODS) == []
    assert len(warnings) == 1
    assert expected in warnings[0]
    assert warnings[0].startswith(f"GPU utilization unknown: Prometheus at {source.url} ")


@pytest.mark.parametrize("content_length", [True, False])
def test_an_oversized_answer_is_refused(
    prometheus: FakePrometheus, warnings: Warnings, content_length: bool
) -> None:
    prometheus.body = answer(*(gpu(f"p{i}", "gpupool-a", i, 1, 1) for i in range(100)))
    prometheus.content_length = content_length
    source = PrometheusUtilization(prometheus.url, warn=warnings, max_body_bytes=4096)
    assert source.samples(T0, PODS) == []
    assert "more than 4096 bytes" in warnings[0]
    source.close()


def test_an_unreachable_prometheus_warns(warnings: Warnings) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = PrometheusUtilization(f"http://127.0.0.1:{port}", warn=warnings)
    assert source.samples(T0, PODS) == []
    assert "cannot be reached" in warnings[0]
    source.close()


def test_one_warning_per_failure_streak_and_back_off(
    prometheus: FakePrometheus, source: PrometheusUtilization, warnings: Warnings
) -> None:
    prometheus.status, prometheus.body = 500, b"down"
    source.samples(T0, PODS)
    source.samples(T0 + 10, PODS)  # second failure: next round 20 s later
    source.samples(T0 + 29, PODS)  # backing off: no request
    assert len(prometheus.queries) == 2
    source.samples(T0 + 30, PODS)  # third failure: 40 s
    source.samples(T0 + 70, PODS)  # fourth: capped at max_backoff_s (60 s)
    source.samples(T0 + 130, PODS)
    assert len(prometheus.queries) == 5
    assert len(warnings) == 1
    prometheus.status, prometheus.body = 200, answer(gpu("train-0", "gpupool-a", 0, 40, 1))
    assert source.samples(T0 + 190, PODS) == [UsageSample(T0 + 190, "n1", 0, 40, 1)]
    assert "answers again" in warnings[1]
    prometheus.status, prometheus.body = 500, b"down again"
    source.samples(T0 + 200, PODS)
    assert len(warnings) == 3
    assert "HTTP 500" in warnings[2]


def test_no_dcgm_series_at_all_warns_once(
    prometheus: FakePrometheus, source: PrometheusUtilization, warnings: Warnings
) -> None:
    assert source.samples(T0, PODS) == []
    assert source.samples(T0 + 10, PODS) == []
    assert len(warnings) == 1
    assert "is it scraping NVIDIA's dcgm-exporter?" in warnings[0]


def test_an_injected_http_client_is_used_and_left_open() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=answer(gpu("train-0", "gpupool-a", 0, 40, 1)))

    client = httpx.Client(transport=httpx.MockTransport(handle))
    source = PrometheusUtilization("https://prometheus.example", client=client)
    assert source.samples(T0, PODS) == [UsageSample(T0, "n1", 0, 40, 1)]
    assert str(seen[0].url).startswith("https://prometheus.example/api/v1/query?query=")
    source.close()
    assert not client.is_closed
    client.close()


def test_an_unexpected_error_in_the_client_is_a_warning_not_a_crash(warnings: Warnings) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("bug in a transport")

    client = httpx.Client(transport=httpx.MockTransport(handle))
    source = PrometheusUtilization("http://prometheus", client=client, warn=warnings)
    assert source.samples(T0, PODS) == []
    assert "failed unexpectedly (RuntimeError: bug in a transport)" in warnings[0]
    client.close()


def test_credentials_stay_out_of_warnings_and_a_failing_callback_is_contained(
    prometheus: FakePrometheus,
) -> None:
    def warn(message: str) -> None:
        seen.append(message)
        raise RuntimeError("the callback broke")

    seen: list[str] = []
    prometheus.status = 500
    url = prometheus.url.replace("http://", "http://user:s3cret@")
    source = PrometheusUtilization(url, warn=warn)
    assert source.samples(T0, PODS) == []
    assert len(prometheus.queries) == 1
    assert "s3cret" not in seen[0]
    assert source.url == prometheus.url.rstrip("/")
    source.close()


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("prometheus:9090", {}),
        ("ftp://prometheus", {}),
        ("http://prometheus?x=1", {}),
        ("http://prometheus", {"timeout_s": 0}),
        ("http://prometheus", {"min_interval_s": -1}),
        ("http://prometheus", {"max_body_bytes": 0}),
    ],
)
def test_bad_settings_are_refused_when_made(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PrometheusUtilization(url, **options)


def test_without_a_url_utilization_is_unknown() -> None:
    source: UtilizationSource = NoUtilization()
    assert source.samples(T0, PODS) == []
