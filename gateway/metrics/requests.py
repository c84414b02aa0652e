"""Per-request counters kept as plain numbers and turned into Prometheus families at scrape.

prometheus_client's `labels()` lookup, its locks and its per-call bucket search cost several
percent of a one-record produce; here a request adds to a list found by one dict lookup (the
event loop is the only writer), and the exposition is built only when /metrics is read.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# A request's method is any token the client sends: past this many label sets, new ones share
# one entry instead of growing the table without bound.
MAX_LABEL_SETS = 2_000
OVERFLOW = ("overflow", "OTHER", "0")
Labels = tuple[str, str, str]  # route, method, status


class RequestLatency(Collector):
    """`sluice_http_requests_total` and `sluice_http_request_duration_seconds` by route
    template, method and status."""

    def __init__(self) -> None:
        # (route, method, status) -> [bucket counts..., +Inf count, sum]
        self._series: dict[Labels, list[float]] = {}

    def observe(self, route: str, method: str, status: str, seconds: float) -> None:
        series = self._series_of((route, method, status))
        series[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        series[-1] += seconds

    def observe_at_once(self, labels: Labels) -> None:
        """An answer written as its request was read (a refusal): in the first bucket, the
        microsecond it took neither timed nor added to the sum."""
        series = self._series.get(labels)
        if series is None:
            series = self._series_of(labels)
        series[0] += 1

    def _series_of(self, labels: Labels) -> list[float]:
        series = self._series.get(labels)
        if series is None:
            if len(self._series) >= MAX_LABEL_SETS:
                labels = OVERFLOW
            series = self._series.setdefault(labels, [0.0] * (len(LATENCY_BUCKETS) + 2))
        return series

    def collect(self) -> Iterable[Metric]:
        names = ["route", "method", "status"]
        requests = CounterMetricFamily("sluice_http_requests", "HTTP requests", labels=names)
        latency = HistogramMetricFamily(
            "sluice_http_request_duration_seconds", "HTTP request latency", labels=names
        )
        for labels, series in list(self._series.items()):
            cumulative = 0.0
            buckets = []
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), series, strict=False):
                cumulative += count
                buckets.append((_bound(bound), cumulative))
            requests.add_metric(list(labels), cumulative)
            latency.add_metric(list(labels), buckets, series[-1])
        yield requests
        yield latency


class TopicTraffic(Collector):
    """Records and batch bytes produced and fetched per topic."""

    def __init__(self) -> None:
        self._in: dict[str, list[int]] = {}  # topic -> [records, bytes]
        self._out: dict[str, list[int]] = {}

    def produced(self, topic: str, records: int, size: int) -> None:
        _add(self._in, topic, records, size)

    def fetched(self, topic: str, records: int, size: int) -> None:
        _add(self._out, topic, records, size)

    def collect(self) -> Iterable[Metric]:
        for direction, table, verb in (("in", self._in, "produced"), ("out", self._out, "fetched")):
            records = CounterMetricFamily(
                f"sluice_records_{direction}", f"Records {verb}", labels=["topic"]
            )
            size = CounterMetricFamily(
                f"sluice_bytes_{direction}", f"Record batch bytes {verb}", labels=["topic"]
            )
            for topic, (count, nbytes) in list(table.items()):
                records.add_metric([topic], count)
                size.add_metric([topic], nbytes)
            yield records
            yield size


def _add(table: dict[str, list[int]], topic: str, records: int, size: int) -> None:
    totals = table.get(topic)
    if totals is None:
        totals = table[topic] = [0, 0]
    totals[0] += records
    totals[1] += size


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
