"""Share groups' metrics, read at scrape time from this node's share coordinator: what
happened to records (acquired, accepted, released, rejected, archived, lock expiries,
redeliveries, renewals) and, per share group coordinated here, its members and the records
of its windows by state."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from groups.share.coordinator import ShareCoordinator


class ShareGroupCollector(Collector):
    def __init__(self, coordinator: Callable[[], ShareCoordinator]) -> None:
        self._coordinator = coordinator

    def collect(self) -> Iterable[Metric]:
        coordinator = self._coordinator()
        events = CounterMetricFamily(
            "sluice_share_records",
            "Share-group record transitions on this node by event: acquired, accepted, "
            "released, rejected, archived (rejected or at the delivery limit), lock_expired, "
            "redelivered (acquired again), renewed",
            labels=["event"],
        )
        for event, count in coordinator.counts.items():
            events.add_metric([event], count)
        members = GaugeMetricFamily(
            "sluice_share_group_members", "Members of a share group", labels=["group"]
        )
        records = GaugeMetricFamily(
            "sluice_share_group_records",
            "Records in a share group's in-flight windows by state",
            labels=["group", "state"],
        )
        for name, group in sorted(coordinator.groups.items()):
            members.add_metric([name], len(group.members))
            totals: dict[str, int] = {}
            for window in group.partitions.values():
                for state, count in window.counts().items():
                    totals[state] = totals.get(state, 0) + count
            for state, count in sorted(totals.items()):
                records.add_metric([name, state], count)
        return [events, members, records]
