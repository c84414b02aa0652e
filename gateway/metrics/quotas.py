"""/metrics for quotas: each limited principal's requests and bytes, and what its quotas
throttled (counters restart when a principal stops being limited or is forgotten as idle)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.auth.quotas import FIELD_OF, KINDS, QuotaBook

# Principals past this many share one "other" label set.
MAX_PRINCIPAL_LABELS = 2_000


class QuotaCollector(Collector):
    """Per limited principal: requests and bytes served, and what its quotas throttled."""

    def __init__(self, book: Callable[[], QuotaBook | None]) -> None:
        self._book = book

    def collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(
            "sluice_principal_requests", "Requests served to a quota-limited principal",
            labels=["principal"],
        )  # fmt: skip
        produced = CounterMetricFamily(
            "sluice_principal_produce_bytes", "Produce request bytes of a quota-limited "
            "principal", labels=["principal"],
        )  # fmt: skip
        fetched = CounterMetricFamily(
            "sluice_principal_fetch_bytes", "Fetch answer bytes of a quota-limited principal",
            labels=["principal"],
        )  # fmt: skip
        throttled = CounterMetricFamily(
            "sluice_quota_throttled_requests", "Requests refused or delayed by a quota",
            labels=["principal", "quota"],
        )  # fmt: skip
        throttle_s = CounterMetricFamily(
            "sluice_quota_throttle_seconds", "Throttle time given (Retry-After or delay)",
            labels=["principal", "quota"],
        )  # fmt: skip
        book = self._book()
        rows: dict[str, list[float]] = {}
        for principal, usage in () if book is None else book.tracked():
            label = principal if len(rows) < MAX_PRINCIPAL_LABELS else "other"
            row = rows.setdefault(label, [0.0] * (3 + 2 * len(KINDS)))
            row[0] += usage.requests
            row[1] += usage.produce_bytes
            row[2] += usage.fetch_bytes
            for i, kind in enumerate(KINDS):
                row[3 + i] += usage.throttled[kind]
                row[3 + len(KINDS) + i] += usage.throttle_s[kind]
        for label, row in rows.items():
            requests.add_metric([label], row[0])
            produced.add_metric([label], row[1])
            fetched.add_metric([label], row[2])
            for i, kind in enumerate(KINDS):
                throttled.add_metric([label, FIELD_OF[kind]], row[3 + i])
                throttle_s.add_metric([label, FIELD_OF[kind]], row[3 + len(KINDS) + i])
        return [requests, produced, fetched, throttled, throttle_s]
