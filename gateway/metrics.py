"""Prometheus metrics: per-route request counts and latency, traffic per topic, log sizes,
consumer groups."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.manager import LogManager
from engine.notify import ChangeNotifier
from gateway.group_coordinator import GroupCoordinator


class LogCollector(Collector):
    """Partition end offsets, high watermarks and sizes, read at scrape time."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager

    def collect(self) -> Iterable[Metric]:
        labels = ["topic", "partition"]
        end = GaugeMetricFamily("sluice_partition_log_end_offset", "Log end offset", labels=labels)
        hw = GaugeMetricFamily("sluice_partition_high_watermark", "High watermark", labels=labels)
        start = GaugeMetricFamily(
            "sluice_partition_log_start_offset", "Log start offset", labels=labels
        )
        size = GaugeMetricFamily("sluice_partition_size_bytes", "Bytes on disk", labels=labels)
        for log in self.manager.all_logs():
            values = [log.topic, str(log.partition)]
            end.add_metric(values, log.log_end_offset)
            hw.add_metric(values, log.high_watermark)
            start.add_metric(values, log.log_start_offset)
            size.add_metric(values, log.size_bytes)
        return [end, hw, start, size]


class GroupCollector(Collector):
    """Each consumer group's members, generation and total lag, read at scrape time."""

    def __init__(self, groups: Callable[[], GroupCoordinator | None]) -> None:
        self.groups = groups

    def collect(self) -> Iterable[Metric]:
        members = GaugeMetricFamily("sluice_group_members", "Group members", labels=["group"])
        generation = GaugeMetricFamily(
            "sluice_group_generation", "Group generation", labels=["group"]
        )
        lag = GaugeMetricFamily(
            "sluice_group_lag", "Records not yet committed by the group", labels=["group"]
        )
        coordinator = self.groups()
        if coordinator is not None:
            for row in coordinator.list_groups():
                described = coordinator.describe(row["group"])
                members.add_metric([row["group"]], row["members"])
                generation.add_metric([row["group"]], described["generation"])
                lag.add_metric([row["group"]], described["lag"])
        return [members, generation, lag]


class Metrics:
    """The gateway's registry (one per app, so tests can run several apps in one process)."""

    def __init__(
        self,
        manager: LogManager,
        notifier: Callable[[], ChangeNotifier | None],
        groups: Callable[[], GroupCoordinator | None],
    ) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "sluice_http_requests",
            "HTTP requests",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "sluice_http_request_duration_seconds",
            "HTTP request latency",
            ["route", "method", "status"],
            buckets=(
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
                1,
                2.5,
                5,
                10,
                30,
            ),
            registry=self.registry,
        )
        self.records_in = Counter(
            "sluice_records_in", "Records produced", ["topic"], registry=self.registry
        )
        self.bytes_in = Counter(
            "sluice_bytes_in", "Record batch bytes produced", ["topic"], registry=self.registry
        )
        self.records_out = Counter(
            "sluice_records_out", "Records fetched", ["topic"], registry=self.registry
        )
        self.bytes_out = Counter(
            "sluice_bytes_out", "Record batch bytes fetched", ["topic"], registry=self.registry
        )
        parked = Gauge(
            "sluice_parked_fetches", "Long-poll fetches waiting for data", registry=self.registry
        )
        parked.set_function(lambda: float(n.parked) if (n := notifier()) else 0.0)
        self.registry.register(LogCollector(manager))
        self.registry.register(GroupCollector(groups))

    async def observe(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """Count and time each request under its route template, never its raw path."""
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        finally:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else "unmatched"
            self.requests.labels(route, request.method, str(status)).inc()
            elapsed = time.perf_counter() - started
            self.latency.labels(route, request.method, str(status)).observe(elapsed)
