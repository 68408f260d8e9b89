"""GPU utilization on Kubernetes: NVIDIA's DCGM exporter metrics, read from Prometheus.

dcgm-exporter publishes one series per physical GPU, labelled with the pod the kubelet gave
that GPU to. gpupool's device indices are its own bookkeeping, not physical GPU indices, so a
series is attributed through its pod: a pod gpupool placed (a task, or a reservation pod that
holds a shared device) maps to the node and gpupool devices it was given.

Attribution rules (`attribute`):

- A series counts only when its pod (namespace, name) is one of the pods gpupool placed.
  Series without a pod, or with a pod gpupool does not know, are ignored: that is every idle
  device, whose utilization therefore stays unknown (it cannot be mapped to a gpupool index).
- A pod with several devices and several series: the series, ordered by their `gpu` label
  (numerically; then by UUID), are paired with the pod's devices in ascending order. Extra
  series are dropped; devices left over get no sample (unknown).
- A series needs both metrics (utilization and framebuffer used): one without the other gives
  no sample, since a sample cannot say "memory unknown" and 0 would be a lie.
- Two series for one GPU (Prometheus scraping the exporter twice) and two pods on one device
  (a sharing task and its reservation pod) give one sample per device: the larger values.

Label spellings: dcgm-exporter sets `pod`, `namespace`, `container`, `gpu`, `UUID`, `Hostname`,
`modelName`. Prometheus scraping it with `honor_labels: false` renames those that clash with
target labels to `exported_pod`, `exported_namespace`, ... and sets `pod`/`namespace` to the
exporter's own; so `exported_<name>` wins over `<name>` wherever it is present.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx

from gpupool.executors.base import UsageSample

__all__ = [
    "FB_USED_METRIC",
    "QUERY",
    "UTIL_METRIC",
    "DcgmSeries",
    "NoUtilization",
    "PodDevices",
    "PodKey",
    "PrometheusError",
    "PrometheusUtilization",
    "UtilizationSource",
    "attribute",
    "parse_answer",
]

PodKey = tuple[str, str]
"""(namespace, pod name)."""
PodDevices = tuple[str, tuple[int, ...]]
"""(node name, gpupool device indices the pod holds there)."""
Warn = Callable[[str], None]

UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"
"""Percent of time a kernel ran, 0..100."""
FB_USED_METRIC = "DCGM_FI_DEV_FB_USED"
"""Framebuffer memory used, MiB."""
QUERY = f'{{__name__=~"{UTIL_METRIC}|{FB_USED_METRIC}"}}'
"""Both metrics in one instant query: one round trip, one evaluation time for both."""

_MAX_MEMORY_MIB = 2**31 - 1
_MAX_MESSAGE_CHARS = 300

_log = logging.getLogger(__name__)


class UtilizationSource(Protocol):
    """Where the Kubernetes executor gets device samples from."""

    def samples(self, now_s: float, pods: Mapping[PodKey, PodDevices]) -> list[UsageSample]:
        """Samples taken since the last call, for the devices of `pods` (gpupool's pods).

        Never raises; no samples means utilization is unknown, not zero."""
        ...


class NoUtilization:
    """No Prometheus configured: utilization is unknown, so there are never samples."""

    def samples(self, now_s: float, pods: Mapping[PodKey, PodDevices]) -> list[UsageSample]:
        return []


class PrometheusError(Exception):
    """Prometheus did not give a usable answer; the message says why, for one warning line."""


@dataclass(frozen=True, slots=True)
class DcgmSeries:
    """One GPU as DCGM reports it, labels resolved; a metric missing from the answer is None."""

    namespace: str
    pod: str
    gpu: str
    uuid: str
    utilization_percent: int | None
    memory_used_mib: int | None


class PrometheusUtilization:
    """DCGM metrics through Prometheus' HTTP API (`/api/v1/query`, instant queries).

    At most one query round per `min_interval_s` (by the `now_s` the caller passes); calls in
    between return no samples, which is right: samples are "taken since the last call". After
    a failure the next round waits twice as long as the last, up to `max_backoff_s`, so a
    Prometheus that times out costs the calling loop at most `timeout_s` that often.

    Failures (unreachable, timeout, non-2xx, bad JSON, `"status":"error"`, an answer over
    `max_body_bytes`) give no samples and one `warn` per streak, then one when it answers again.
    """

    def __init__(
        self,
        url: str,
        timeout_s: float = 3.0,
        min_interval_s: float = 10.0,
        *,
        client: httpx.Client | None = None,
        warn: Warn | None = None,
        max_body_bytes: int = 16 * 1024 * 1024,
        max_backoff_s: float = 60.0,
    ) -> None:
        """`client`: an httpx client to send requests with (its own timeout is overridden by
        `timeout_s`); the caller closes it. Raises ValueError for a bad URL or bound."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the Prometheus URL must be http(s)://host[:port][/path] ({url!r})")
        if parts.query or parts.fragment:
            raise ValueError(f"the Prometheus URL must not have a query or fragment ({url!r})")
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds ({timeout_s!r})")
        if not (math.isfinite(min_interval_s) and min_interval_s >= 0):
            raise ValueError(f"min_interval_s must be 0 or more seconds ({min_interval_s!r})")
        if not (math.isfinite(max_backoff_s) and max_backoff_s >= 0):
            raise ValueError(f"max_backoff_s must be 0 or more seconds ({max_backoff_s!r})")
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be positive ({max_body_bytes!r})")
        self._query_url = f"{url.rstrip('/')}/api/v1/query"
        netloc = parts.netloc.rpartition("@")[2]  # messages show the URL without credentials
        self.url = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self._timeout_s = timeout_s
        self._min_interval_s = min_interval_s
        self._max_backoff_s = max(min_interval_s, max_backoff_s)
        self._max_body_bytes = max_body_bytes
        self._warn: Warn = warn if warn is not None else _log.warning
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client()
        self._lock = threading.Lock()
        self._last_round_s: float | None = None
        self._next_round_s = -math.inf
        self._failures = 0
        self._warned_empty = False

    def samples(self, now_s: float, pods: Mapping[PodKey, PodDevices]) -> list[UsageSample]:
        with self._lock:
            if not math.isfinite(now_s):
                return []
            stepped_back = self._last_round_s is not None and now_s < self._last_round_s
            if now_s < self._next_round_s and not stepped_back:
                return []
            self._last_round_s = now_s
            try:
                series = parse_answer(self._fetch())
                found = attribute(now_s, series, pods)
            except PrometheusError as error:
                self._failed(now_s, str(error))
                return []
            except Exception as error:  # a metrics source must never crash the loop
                self._failed(now_s, f"failed unexpectedly ({type(error).__name__}: {error})")
                return []
            self._succeeded(now_s, series)
            return found

    def close(self) -> None:
        """Close the HTTP client if this source made it."""
        if self._owns_client:
            self._client.close()

    def _failed(self, now_s: float, reason: str) -> None:
        self._failures += 1
        backoff_s = min(
            self._max_backoff_s, self._min_interval_s * 2 ** min(self._failures - 1, 16)
        )
        self._next_round_s = now_s + backoff_s
        if self._failures == 1:
            self._say(
                f"GPU utilization unknown: Prometheus at {self.url} {_clip(reason)}; "
                f"retrying every {self._min_interval_s:g}-{self._max_backoff_s:g} s, "
                "no further warning until it answers"
            )

    def _succeeded(self, now_s: float, series: list[DcgmSeries]) -> None:
        self._next_round_s = now_s + self._min_interval_s
        if self._failures:
            self._say(f"Prometheus at {self.url} answers again: GPU utilization is measured")
        self._failures = 0
        if not series and not self._warned_empty:
            self._say(
                f"GPU utilization unknown: Prometheus at {self.url} has no {UTIL_METRIC} or "
                f"{FB_USED_METRIC} series; is it scraping NVIDIA's dcgm-exporter?"
            )
        self._warned_empty = not series

    def _say(self, message: str) -> None:
        """`warn`, which must not make `samples` raise either."""
        try:
            self._warn(message)
        except Exception:
            _log.exception("the warning callback failed; the warning was: %s", message)

    def _fetch(self) -> bytes:
        """The body of one query answer, at most `max_body_bytes`, within `timeout_s` in all
        (httpx's timeout bounds each read; a server dripping bytes is cut by the deadline)."""
        deadline = time.monotonic() + self._timeout_s
        try:
            with self._client.stream(
                "GET",
                self._query_url,
                params={"query": QUERY},
                headers={"Accept": "application/json", "Accept-Encoding": "identity"},
                timeout=self._timeout_s,
                follow_redirects=False,
            ) as response:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > self._max_body_bytes:
                    raise PrometheusError(self._too_big())
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > self._max_body_bytes:
                        raise PrometheusError(self._too_big())
                    if time.monotonic() > deadline:
                        raise PrometheusError(f"did not answer within {self._timeout_s:g} s")
                    chunks.append(chunk)
                body = b"".join(chunks)
                status = response.status_code
        except httpx.TimeoutException:
            raise PrometheusError(f"did not answer within {self._timeout_s:g} s") from None
        except httpx.HTTPError as error:
            raise PrometheusError(f"cannot be reached ({type(error).__name__}: {error})") from None
        if not 200 <= status < 300:
            detail = _error_detail(body)
            raise PrometheusError(f"answered HTTP {status}" + (f": {detail}" if detail else ""))
        return body

    def _too_big(self) -> str:
        return f"answered more than {self._max_body_bytes} bytes (max_body_bytes)"


def parse_answer(body: bytes) -> list[DcgmSeries]:
    """The DCGM series in an instant-query answer, util and memory joined per GPU.

    Raises PrometheusError when the answer as a whole is unusable; a malformed series in it is
    skipped."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise PrometheusError("answered something that is not JSON") from None
    if not isinstance(document, dict):
        raise PrometheusError("answered JSON that is not a query result")
    if document.get("status") != "success":
        detail = _error_detail(body) or "no reason given"
        raise PrometheusError(f"answered status {document.get('status')!r}: {detail}")
    data = document.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise PrometheusError("answered a result that is not an instant vector")
    result = data.get("result")
    if not isinstance(result, list):
        raise PrometheusError("answered a vector without a result list")
    joined: dict[tuple[str, str, str, str], list[int | None]] = {}
    for item in result:
        parsed = _parse_item(item)
        if parsed is None:
            continue
        name, key, value = parsed
        slot = 0 if name == UTIL_METRIC else 1
        values = joined.setdefault(key, [None, None])
        previous = values[slot]
        values[slot] = value if previous is None else max(previous, value)
    return [
        DcgmSeries(namespace, pod, gpu, uuid, values[0], values[1])
        for (namespace, pod, gpu, uuid), values in joined.items()
    ]


def attribute(
    now_s: float, series: Iterable[DcgmSeries], pods: Mapping[PodKey, PodDevices]
) -> list[UsageSample]:
    """One sample per gpupool device of a known pod (see the module's rules), sorted."""
    by_pod: dict[PodKey, list[DcgmSeries]] = defaultdict(list)
    for one in series:
        key = (one.namespace, one.pod)
        if key in pods and one.utilization_percent is not None and one.memory_used_mib is not None:
            by_pod[key].append(one)
    out: dict[tuple[str, int], UsageSample] = {}
    for key, found in by_pod.items():
        node, devices = pods[key]
        for device, one in zip(sorted(set(devices)), sorted(found, key=_gpu_order), strict=False):
            assert one.utilization_percent is not None and one.memory_used_mib is not None
            utilization, memory = one.utilization_percent, one.memory_used_mib
            previous = out.get((node, device))
            if previous is not None:
                utilization = max(utilization, previous.utilization_percent)
                memory = max(memory, previous.memory_used_mib)
            out[(node, device)] = UsageSample(now_s, node, device, utilization, memory)
    return [out[key] for key in sorted(out)]


def _label(metric: Mapping[str, Any], name: str) -> str:
    """`exported_<name>` (the exporter's own, renamed by Prometheus) over `<name>`."""
    for spelling in (f"exported_{name}", name):
        value = metric.get(spelling)
        if isinstance(value, str) and value:
            return value
    return ""


def _parse_item(item: object) -> tuple[str, tuple[str, str, str, str], int] | None:
    """(metric, (namespace, pod, gpu, uuid), value) of one vector element; None if unusable."""
    if not isinstance(item, dict):
        return None
    metric, sample = item.get("metric"), item.get("value")
    if not isinstance(metric, dict) or not isinstance(sample, list) or len(sample) != 2:
        return None
    name = metric.get("__name__")
    if name not in (UTIL_METRIC, FB_USED_METRIC) or not isinstance(sample[1], str):
        return None
    try:
        number = float(sample[1])
    except ValueError:
        return None
    if not math.isfinite(number) or number < 0:
        return None
    if name == UTIL_METRIC:
        value = min(100, round(number))
    elif number > _MAX_MEMORY_MIB:
        return None
    else:
        value = round(number)
    namespace, pod, gpu = _label(metric, "namespace"), _label(metric, "pod"), _label(metric, "gpu")
    return name, (namespace, pod, gpu, _label(metric, "UUID")), value


def _gpu_order(series: DcgmSeries) -> tuple[int, int, str, str]:
    """Numeric `gpu` labels first, in numeric order; then the others; UUID breaks ties."""
    if series.gpu.isdigit() and len(series.gpu) < 10:
        return (0, int(series.gpu), "", series.uuid)
    return (1, 0, series.gpu, series.uuid)


def _error_detail(body: bytes) -> str:
    """Prometheus' `errorType: error` from an error answer, if it is one."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(document, dict):
        return ""
    kind, error = document.get("errorType"), document.get("error")
    parts = [str(part) for part in (kind, error) if isinstance(part, str) and part]
    return _clip(": ".join(parts))


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE_CHARS else text[: _MAX_MESSAGE_CHARS - 3] + "..."
