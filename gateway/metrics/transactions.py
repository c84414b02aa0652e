"""Transactions' metrics, read at scrape time from this node's transaction coordinator: the
transactional ids it coordinates by state, and the transactions it completed by outcome."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from groups.transactions.coordinator import OUTCOMES, TransactionCoordinator
from groups.transactions.model import TransactionState


class TransactionCollector(Collector):
    def __init__(self, coordinator: Callable[[], TransactionCoordinator]) -> None:
        self._coordinator = coordinator

    def collect(self) -> Iterable[Metric]:
        coordinator = self._coordinator()
        ids = GaugeMetricFamily(
            "sluice_transactional_ids",
            "Transactional ids coordinated on this node by the state of their current (or "
            "last) transaction",
            labels=["state"],
        )
        states = Counter(meta.state for meta in coordinator.machine.transactions.values())
        for state in TransactionState:
            ids.add_metric([state.value], states[state])
        ended = CounterMetricFamily(
            "sluice_transactions",
            "Transactions this node completed as coordinator, by outcome: committed, aborted "
            "(by the producer), timed_out, fenced (a newer begin of the id), operator",
            labels=["outcome"],
        )
        for outcome in OUTCOMES:
            ended.add_metric([outcome], coordinator.outcomes[outcome])
        return [ids, ended]
