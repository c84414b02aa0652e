"""Prometheus metrics: per-route request counts and latency, traffic per topic, log sizes,
consumer groups."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.manager import StartupReport
from engine.notify import ChangeNotifier
from gateway.metrics.requests import RequestLatency, TopicTraffic
from groups.coordinator import GroupCoordinator
from replication.forwarded_appends import ForwardedAppends
from replication.metadata import NO_LEADER
from replication.replica_manager import ReplicaManager

CLIENT_CLOSED = 499  # the status label of a request whose client left before its answer


class PartitionCollector(Collector):
    """Each hosted partition's offsets and size, and the node's replication health (the
    seeds' operations talk: under-replicated and offline partitions, ISR churn, follower lag,
    leadership) and, for partitions led here that held transactions, the LSO's lag behind the
    high watermark, read at scrape time."""

    def __init__(self, replicas: Callable[[], ReplicaManager | None]) -> None:
        self.replicas = replicas

    def collect(self) -> Iterable[Metric]:
        labels = ["topic", "partition"]
        end = GaugeMetricFamily("sluice_partition_log_end_offset", "Log end offset", labels=labels)
        hw = GaugeMetricFamily("sluice_partition_high_watermark", "High watermark", labels=labels)
        start = GaugeMetricFamily(
            "sluice_partition_log_start_offset", "Log start offset", labels=labels
        )
        local_start = GaugeMetricFamily(
            "sluice_partition_local_log_start_offset",
            "First offset on local disk (below it, a tiered partition's records are on S3)",
            labels=labels,
        )
        size = GaugeMetricFamily("sluice_partition_size_bytes", "Bytes on disk", labels=labels)
        lag_records = GaugeMetricFamily(
            "sluice_replica_max_lag_records",
            "Largest follower lag behind this leader, in records",
            labels=labels,
        )
        lag_ms = GaugeMetricFamily(
            "sluice_replica_max_lag_ms",
            "Largest time a follower of this leader has not been caught up, in ms",
            labels=labels,
        )
        lso_lag = GaugeMetricFamily(
            "sluice_partition_lso_lag",
            "High watermark minus last stable offset: records read_committed readers wait for "
            "while a transaction is open (partitions led here whose log held a transaction)",
            labels=labels,
        )
        families: list[Metric] = [end, hw, start, local_start, size, lag_records, lag_ms, lso_lag]
        replicas = self.replicas()
        if replicas is None:
            return families
        leaders = under = 0
        for partition in list(replicas.partitions.values()):
            values = [partition.topic, str(partition.partition)]
            end.add_metric(values, partition.log_end_offset)
            hw.add_metric(values, partition.high_watermark)
            start.add_metric(values, partition.log_start_offset)
            local_start.add_metric(values, partition.local_log_start_offset)
            size.add_metric(values, partition.size_bytes)
            health = partition.replication_health()
            if health is not None:
                leaders += 1
                under += health.under_replicated
                lag_records.add_metric(values, health.max_lag_records)
                lag_ms.add_metric(values, health.max_lag_ms)
                if partition.log.producer_state.first_transactional is not None:
                    # the LSO costs a min over this partition's open transactions
                    lso_lag.add_metric(
                        values, partition.high_watermark - partition.last_stable_offset
                    )
        view = replicas.store.view
        node = replicas.node_id
        startup = replicas.manager.startup
        gauges: dict[str, tuple[str, float]] = {
            "sluice_leader_partitions": ("Partitions this node leads", leaders),
            "sluice_partitions": ("Partition replicas on this node", len(replicas.partitions)),
            "sluice_under_replicated_partitions": (
                "Partitions led here whose ISR is smaller than their replica set",
                under,
            ),
            "sluice_offline_partitions": (
                "Partitions without a leader (reported by the controller only)",
                sum(1 for s in view.partitions.values() if s.leader == NO_LEADER)
                if view.controller == node
                else 0,
            ),
            "sluice_storage_offline_partitions": (
                "Partitions on this node a storage failure took offline (EIO, a read-only disk, "
                "a failed fsync): they answer KAFKA_STORAGE_ERROR until the node restarts",
                len(replicas.offline_partitions()),
            ),
            "sluice_is_controller": ("1 if this node is the controller", view.controller == node),
            "sluice_acks_all_waiting": (
                "Produce requests waiting for acks=all",
                replicas.counters.acks_waiting,
            ),
            "sluice_startup_seconds": ("Time opening the data directory took", startup.seconds),
            "sluice_startup_clean": (
                "1 if the last shutdown was clean (no recovery scan)",
                startup.clean_shutdown,
            ),
            "sluice_startup_checked_partitions": (
                "Partitions whose segments recovery CRC-checked at start-up",
                startup.checked,
            ),
            "sluice_startup_truncated_bytes": (
                "Bytes of torn or corrupt tails recovery cut at start-up",
                startup.truncated_bytes,
            ),
        }
        for name, (doc, value) in gauges.items():
            families.append(GaugeMetricFamily(name, doc, value=float(value)))
        families.extend(_startup_partitions(startup))
        for name, doc, value in (
            ("sluice_isr_shrinks", "ISR shrinks stored by this leader", replicas.counters.shrinks),
            (
                "sluice_isr_expands",
                "ISR expansions stored by this leader",
                replicas.counters.expands,
            ),
            (
                "sluice_produce_writes",
                "Log writes made for produce requests (one per partition and loop turn)",
                replicas.appends.writes,
            ),
            (
                "sluice_produce_requests_written",
                "Produce requests those writes carried",
                replicas.appends.requests,
            ),
        ):
            families.append(CounterMetricFamily(name, doc, value=value))
        return families


def _startup_partitions(startup: StartupReport) -> list[Metric]:
    """Per partition recovery checked at start-up (after an unclean shutdown): its time and
    the bytes it cut; a clean start has none."""
    labels = ["topic", "partition"]
    seconds = GaugeMetricFamily(
        "sluice_startup_partition_recovery_seconds",
        "Time recovery took to check a partition's segments at start-up",
        labels=labels,
    )
    cut = GaugeMetricFamily(
        "sluice_startup_partition_truncated_bytes",
        "Bytes of a torn or corrupt tail recovery cut from a partition at start-up",
        labels=labels,
    )
    for r in startup.recovered:
        seconds.add_metric([r.topic, str(r.partition)], r.seconds)
        cut.add_metric([r.topic, str(r.partition)], r.truncated_bytes)
    return [seconds, cut]


class TieringCollector(Collector):
    """S3 tiering: what went up, what waits (records and seconds), remote reads and the cache,
    remote bytes per topic; empty when the node has no bucket."""

    def __init__(self, replicas: Callable[[], ReplicaManager | None]) -> None:
        self.replicas = replicas

    def collect(self) -> Iterable[Metric]:
        replicas = self.replicas()
        tiering = None if replicas is None else replicas.tiering
        if tiering is None:
            return []
        counters, reader = tiering.counters, tiering.reader
        families: list[Metric] = [
            CounterMetricFamily(name, doc, value=value)
            for name, doc, value in (
                ("sluice_tier_segments_uploaded", "Segments uploaded", counters.segments_uploaded),
                ("sluice_tier_bytes_uploaded", "Segment bytes uploaded", counters.bytes_uploaded),
                (
                    "sluice_tier_segments_deleted",
                    "Remote segments deleted",
                    counters.segments_deleted,
                ),
                ("sluice_tier_failures", "Failed tiering passes", counters.failures),
                ("sluice_tier_remote_fetches", "Ranged GETs of segment data", reader.fetches),
                ("sluice_tier_remote_fetch_bytes", "Bytes read from S3", reader.bytes_read),
                ("sluice_tier_cache_hits", "Remote reads served from the cache", reader.cache.hits),
            )
        ]
        labels = ["topic", "partition"]
        lag_records = GaugeMetricFamily(
            "sluice_tier_upload_lag_records",
            "Committed records not on S3 yet",
            labels=labels,
        )
        lag_s = GaugeMetricFamily(
            "sluice_tier_upload_lag_seconds",
            "Age of the oldest segment with records not on S3 yet",
            labels=labels,
        )
        for (topic, partition), (records, seconds) in list(counters.backlog.items()):
            lag_records.add_metric([topic, str(partition)], records)
            lag_s.add_metric([topic, str(partition)], seconds)
        remote = GaugeMetricFamily(
            "sluice_tier_remote_bytes", "Bytes of a topic on S3", labels=["topic"]
        )
        for topic, size in tiering.remote_bytes().items():
            remote.add_metric([topic], size)
        families.extend([lag_records, lag_s, remote])
        return families


class GroupCollector(Collector):
    """Each consumer group's members, generation and total lag, read at scrape time; the
    fetch requests the coordinator sent other nodes for its members' partitions."""

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
        remote = CounterMetricFamily(
            "sluice_group_remote_fetches",
            "Fetch requests sent to other nodes for group members' partitions they lead: one "
            "per leader node and pass over a member's partitions (read: answered at once; "
            "poll: a parked long-poll)",
            labels=["kind"],
        )
        coordinator = self.groups()
        if coordinator is not None:
            for row in coordinator.list_groups():
                described = coordinator.describe(row["group"])
                members.add_metric([row["group"]], row["members"])
                generation.add_metric([row["group"]], described["generation"])
                lag.add_metric([row["group"]], described["lag"])
            for kind, count in coordinator.remote_fetches.items():
                remote.add_metric([kind], count)
        return [members, generation, lag, remote]


class ForwardedCollector(Collector):
    """How much joining forwarded appends does (replication.forwarded_appends)."""

    def __init__(self, forwarded: ForwardedAppends) -> None:
        self._forwarded = forwarded

    def collect(self) -> Iterable[Metric]:
        return [
            CounterMetricFamily(
                "sluice_forwarded_appends",
                "Internal appends sent to other nodes' partitions for produces taken here",
                value=self._forwarded.sends,
            ),
            CounterMetricFamily(
                "sluice_forwarded_produce_requests",
                "Produce requests (one partition's part each) those appends carried",
                value=self._forwarded.requests,
            ),
        ]


class FastRoutesCollector(Collector):
    """How many requests the fast routes answered (gateway.api.fast_routes); the others went
    through the Application. The metric keeps its first name, `sluice_lane_requests`, which
    dashboards read."""

    def __init__(self, served: Callable[[], int]) -> None:
        self._served = served

    def collect(self) -> Iterable[Metric]:
        return [
            CounterMetricFamily(
                "sluice_lane_requests",
                "Requests the fast routes answered (plain produces, partition and group member "
                "fetches, internal appends, and their refusals), without aiohttp's Request, "
                "router and middlewares",
                value=self._served(),
            )
        ]


class SiblingReadsCollector(Collector):
    """The fetches of partitions a sibling worker leads that were read from its files, and
    those left to it (replication.sibling_replicas)."""

    def __init__(self, replicas: Callable[[], ReplicaManager | None]) -> None:
        self._replicas = replicas

    def collect(self) -> Iterable[Metric]:
        replicas = self._replicas()
        siblings = None if replicas is None else replicas.siblings
        if siblings is None:
            return []
        family = CounterMetricFamily(
            "sluice_colocated_reads",
            "Fetches of a partition a sibling worker leads: read from its files (served), or "
            "forwarded to it (forwarded)",
            labels=["outcome"],
        )
        family.add_metric(["served"], siblings.served)
        family.add_metric(["forwarded"], siblings.forwarded)
        return [family]


class Metrics:
    """The gateway's registry (one per app, so tests can run several apps in one process);
    made on the event loop it reports the tasks of."""

    def __init__(
        self,
        replicas: Callable[[], ReplicaManager | None],
        notifier: Callable[[], ChangeNotifier | None],
        groups: Callable[[], GroupCoordinator | None],
    ) -> None:
        self.registry = CollectorRegistry()
        self.latency = RequestLatency()
        self.traffic = TopicTraffic()
        self.registry.register(self.latency)
        self.registry.register(self.traffic)
        parked = Gauge(
            "sluice_parked_fetches", "Long-poll fetches waiting for data", registry=self.registry
        )
        parked.set_function(lambda: float(n.parked) if (n := notifier()) else 0.0)
        loop = asyncio.get_running_loop()
        tasks = Gauge(
            "sluice_event_loop_tasks",
            "Tasks of this process's event loop not yet done (a steady rise under steady load "
            "is a leak)",
            registry=self.registry,
        )
        tasks.set_function(lambda: float(len(asyncio.all_tasks(loop))))
        self.registry.register(PartitionCollector(replicas))
        self.registry.register(TieringCollector(replicas))
        self.registry.register(SiblingReadsCollector(replicas))
        self.registry.register(GroupCollector(groups))

    async def observe(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """Count and time each request under its route template, never its raw path; a client
        that went away before its answer counts as status 499 (nginx's "client closed")."""
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except (asyncio.CancelledError, ConnectionError):
            status = CLIENT_CLOSED
            raise
        finally:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else "unmatched"
            self.latency.observe(route, request.method, str(status), time.perf_counter() - started)
