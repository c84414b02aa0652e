"""Push subscriptions' metrics, read at scrape time from this node's dispatchers
(groups.subscriptions): records delivered, retried and dead-lettered, requests in flight,
lag, the adaptive concurrency limit and the delivery latency (record timestamp -> 2xx)
histogram. Each node reports the
partitions it dispatches; summed over nodes they are the subscription's."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from groups.subscriptions.service import SubscriptionService


class SubscriptionCollector(Collector):
    def __init__(self, service: Callable[[], SubscriptionService]) -> None:
        self._service = service

    def collect(self) -> Iterable[Metric]:
        service = self._service()
        labels = ["subscription"]
        delivered = CounterMetricFamily(
            "sluice_subscription_delivered_records",
            "Records a subscription's endpoint acknowledged with a 2xx",
            labels=labels,
        )
        retried = CounterMetricFamily(
            "sluice_subscription_retried_records",
            "Records whose delivery attempt failed and was scheduled again",
            labels=labels,
        )
        dead = CounterMetricFamily(
            "sluice_subscription_dead_lettered_records",
            "Records produced to the dead-letter topic after their budget ran out",
            labels=labels,
        )
        in_flight = GaugeMetricFamily(
            "sluice_subscription_in_flight_records",
            "Records in requests to the endpoint now",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "sluice_subscription_lag",
            "Records past the committed position (high watermark - committed), this node's "
            "partitions",
            labels=labels,
        )
        stopped = GaugeMetricFamily(
            "sluice_subscription_stopped_partitions",
            "Partitions stopped on a record that exhausted its budget without a dead-letter topic",
            labels=labels,
        )
        requests = GaugeMetricFamily(
            "sluice_subscription_requests_in_flight",
            "Requests to the endpoint now, this node's partitions",
            labels=labels,
        )
        limit = GaugeMetricFamily(
            "sluice_subscription_concurrency_limit",
            "The adaptive limit on requests in flight from this node (grows on fast 2xx, halves "
            "on 429, 503, timeouts and connection errors)",
            labels=labels,
        )
        for name, flow in sorted(service.flows.items()):
            requests.add_metric([name], flow.limit.in_flight)
            limit.add_metric([name], flow.limit.limit)
        totals: dict[str, list[int]] = {}
        for (name, _), counts in service.counts.items():
            row = totals.setdefault(name, [0, 0, 0, 0, 0, 0])
            row[0] += counts.delivered
            row[1] += counts.retried
            row[2] += counts.dead_lettered
        for (name, _), dispatcher in service.dispatchers.items():
            row = totals.setdefault(name, [0, 0, 0, 0, 0, 0])
            status = dispatcher.status()
            row[3] += status["in_flight"]
            row[4] += status["lag"] or 0
            row[5] += status["state"] == "stopped"
        for name, queue in service.queues.items():
            totals.setdefault(name, [0, 0, 0, 0, 0, 0])[3] += queue.status()["in_flight"]
        for name, (d, r, dl, f, lg, st) in sorted(totals.items()):
            delivered.add_metric([name], d)
            retried.add_metric([name], r)
            dead.add_metric([name], dl)
            in_flight.add_metric([name], f)
            lag.add_metric([name], lg)
            stopped.add_metric([name], st)
        latency = HistogramMetricFamily(
            "sluice_subscription_delivery_latency_seconds",
            "From a record's timestamp to its endpoint's 2xx",
            labels=labels,
        )
        for name, histogram in sorted(service.latency.items()):
            buckets = []
            running = 0
            for bound, count in zip(
                (*histogram.buckets, float("inf")), histogram.counts, strict=True
            ):
                running += count
                buckets.append((str(bound) if bound != float("inf") else "+Inf", running))
            latency.add_metric([name], buckets, histogram.total)
        return [delivered, retried, dead, in_flight, lag, stopped, requests, limit, latency]
