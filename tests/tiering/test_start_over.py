"""A follower behind a tiered leader's local log start, against moto_server, two nodes in one
process (each its replica manager; the follower's fetcher asks the leader's as its routes
would): it starts over after the segment S3 holds before that start with the producer state
shipped with it (kept there across a restart), so a transaction open across the start is known
there. Its last stable offset holds at that transaction's first offset, and once it is aborted
(by the old leader or by the follower once it leads) the aborted-transaction index the new
leader uploads names it, so read_committed readers of what only S3 holds never see its records."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine import batch as fmt
from engine import producer_state, txn_index
from engine.config import TopicConfig
from engine.errors import EngineError
from engine.log import PartitionLog
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from engine.producer_state import Isolation, ProducerEntry, ProducerIdentity, ProducerState
from engine.tiered import shipping
from engine.tiered.remote import RemoteStorage, S3Location
from engine.tiered.uploader import PartitionTier
from gateway.api.problems import from_engine_error
from gateway.http.problem import problem_body
from replication.fetcher import FetcherSettings, ReplicaFetchers
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import NodeInfo, PartitionState, TopicSpec
from replication.partition import Partition
from replication.replica_client import ReplicaClient
from replication.replica_manager import ReplicaManager
from replication.session_wire import PartitionAnswer, SessionFetchAnswer, SessionFetchRequest
from replication.tiering import TieringService, TieringSettings
from tests.api.support import wait_until
from tests.s3 import MotoServer

TOPIC, TOPIC_ID, PREFIX = "t", "c" * 32, "p"
KEY = (TOPIC, 0)
CONFIGS = {"remote.storage.enable": True, "segment.bytes": 600, "local.retention.bytes": 0}
ABORTED, COMMITTED = ProducerIdentity(1000, 0), ProducerIdentity(2000, 0)
RECENT_MS = int(time.time() * 1000) - 3_600_000  # within retention.ms whatever the date
CATCH_UP_S = 30.0  # bounds a wait for the follower; never reached when right


class LeaderRoutes:
    """The follower's calls to node 0, answered by node 0's replica manager as its internal
    routes answer them (gateway.api.internal), problems included."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    async def epoch_end(
        self, url: str, topic: str, partition: int, *, leader_epoch: int, epoch: int
    ) -> tuple[int, int]:
        return self.replicas.epoch_end(topic, partition, leader_epoch, epoch)

    async def session_fetch(self, url: str, request: SessionFetchRequest) -> SessionFetchAnswer:
        session_id, found = await self.replicas.session_fetch(request)
        parts = {}
        for key, outcome in found.items():
            if isinstance(outcome, EngineError):
                problem = from_engine_error(outcome)
                parts[key] = PartitionAnswer(
                    -1, -1, error_status=problem.status, error_body=problem_body(problem)
                )
            else:
                parts[key] = PartitionAnswer(
                    outcome.high_watermark, outcome.log_start_offset, outcome.data
                )
        return SessionFetchAnswer(session_id, parts)


@dataclass
class Nodes:
    """Node 0 leading t-0 (tiered; its uploads run when a test says), node 1 a replica not yet
    started: `follow` starts it, with its fetcher and its S3."""

    stores: list[MemoryMetadataStore]
    leader: ReplicaManager
    follower: ReplicaManager
    storage: RemoteStorage
    tiering: TieringService
    fetchers: ReplicaFetchers | None = None

    @property
    def old(self) -> Partition:
        return self.leader.partitions[KEY]

    @property
    def new(self) -> Partition:
        return self.follower.partitions[KEY]

    async def follow(self) -> None:
        client: ReplicaClient = LeaderRoutes(self.leader)  # type: ignore[assignment]
        self.fetchers = ReplicaFetchers(
            self.stores[1], client, 1, FetcherSettings(backoff_ms=1), self.tiering
        )
        self.follower.add_role_listener(self.fetchers.role_changed)
        await self.follower.start()

    async def caught_up(self) -> None:
        old = self.old
        await wait_until(
            lambda: (
                (self.new.log_end_offset, self.new.high_watermark)
                == (old.log_end_offset, old.high_watermark)
            ),
            CATCH_UP_S,
        )

    async def move_leadership(self) -> None:
        """Node 1 leads in epoch 1, alone in the ISR."""
        store = self.stores[0]
        current = store.view.partitions[KEY]
        moved = PartitionState(1, 1, (0, 1), (1,), current.version)
        assert await store.set_partition(TOPIC, 0, moved) is not None
        assert await self.follower.applied(lambda: self.new.is_leader, CATCH_UP_S)

    def tier(self, partition: Partition) -> PartitionTier:
        return PartitionTier(self.storage, PREFIX, partition.log, TOPIC_ID, shipping.ship)

    def upload(self, partition: Partition) -> None:
        """The leader's tiering pass: its closed segments up, then its local retention."""
        tier = self.tier(partition)
        tier.refresh()
        for segment in tier.pending():
            tier.upload(segment, partition.leader_epoch)
        partition.log.apply_retention()


@pytest.fixture
async def nodes(tmp_path: Path, moto: MotoServer, bucket: str) -> AsyncIterator[Nodes]:
    backend = MemoryBackend()
    stores = [MemoryMetadataStore(backend) for _ in range(2)]
    for node, store in enumerate(stores):
        await store.start(NodeInfo(node, f"http://node{node}:8080"))
    fence = await stores[0].campaign()
    await stores[0].create_topic(
        fence, TopicSpec(TOPIC, TOPIC_ID, 1, 2, CONFIGS), [PartitionState(0, 0, (0, 1), (0,))]
    )
    location = S3Location(moto.url, bucket, PREFIX)
    storage = RemoteStorage(location)
    tiering = TieringService(storage, TieringSettings(location))
    managers = [LogManager(tmp_path / str(node)) for node in range(2)]
    leader = ReplicaManager(managers[0], stores[0], 0, ChangeNotifier())
    follower = ReplicaManager(managers[1], stores[1], 1, ChangeNotifier(), tiering=tiering)
    await leader.start()
    found = Nodes(stores, leader, follower, storage, tiering)
    try:
        yield found
    finally:
        if found.fetchers is not None:
            await found.fetchers.close()
        for replicas in (follower, leader):
            await replicas.close()
        await tiering.close()
        for store in stores:
            await store.close()
        for manager in managers:
            manager.close()


def plain(partition: Partition, *values: bytes) -> None:
    batch = fmt.encode_batch([fmt.RecordInput(None, v, [], RECENT_MS) for v in values])
    partition.log.append_as_leader(batch, partition.leader_epoch)
    partition.update_high_watermark()


def fill(partition: Partition, batches: int, tag: str) -> None:
    for b in range(batches):
        plain(partition, *(f"{tag}{b}-{i}".encode() for i in range(5)))


def in_txn(partition: Partition, producer: ProducerIdentity, value: bytes) -> int:
    """A transactional record; its offset."""
    batch = fmt.encode_batch([fmt.RecordInput(None, value, [], RECENT_MS)])
    info = partition.log.append_transactional_as_leader(
        batch, partition.leader_epoch, producer.producer_id, producer.epoch
    )
    partition.update_high_watermark()
    return info.first_offset


def end_both(partition: Partition) -> None:
    """Abort ABORTED's transaction and commit COMMITTED's, as their coordinators would."""
    assert partition.write_marker(ABORTED, False, 0) is not None
    assert partition.write_marker(COMMITTED, True, 0) is not None


async def values(replicas: ReplicaManager, isolation: Isolation) -> list[bytes]:
    """Every record value node `replicas` serves from offset 0 (S3, then local) at `isolation`."""
    partition = replicas.partitions[KEY]
    offset, seen = 0, []
    while offset < partition.high_watermark:
        result = await replicas.fetch(TOPIC, 0, offset, 1 << 20, 0, 0, isolation=isolation)
        if not result.data:
            break
        seen += [r.value for r in fmt.iter_records(result.data) if r.offset >= offset and r.value]
        offset = fmt.scan(result.data, check_crc=False).headers[-1][1].next_offset
    return seen


async def transactions_across_the_local_start(nodes: Nodes) -> int:
    """On node 0: an aborted-to-be and a committed-to-be transaction open from below its local
    log start once its older segments are on S3 only; the first one's first offset."""
    old = nodes.old
    fill(old, 3, "p")
    first = in_txn(old, ABORTED, b"a1")
    in_txn(old, COMMITTED, b"c1")
    fill(old, 8, "q")
    old.log.roll()
    nodes.upload(old)
    assert old.log.local_log_start_offset > first  # the transactions began on S3 only
    in_txn(old, ABORTED, b"a2")
    in_txn(old, COMMITTED, b"c2")
    fill(old, 2, "r")
    return first


@pytest.mark.parametrize("aborted_by", ["old leader", "new leader"])
async def test_a_follower_starting_past_an_open_transaction_knows_it_from_s3(
    nodes: Nodes, aborted_by: str
) -> None:
    first = await transactions_across_the_local_start(nodes)
    old = nodes.old
    await nodes.follow()
    await nodes.caught_up()
    new = nodes.new
    assert new.log.local_log_start_offset >= old.log.local_log_start_offset > first
    assert new.log.last_stable_offset == first < new.high_watermark  # held by the open one

    if aborted_by == "old leader":
        end_both(old)
        fill(old, 6, "s")
        await nodes.caught_up()
        await nodes.move_leadership()
    else:
        await nodes.move_leadership()
        assert new.last_stable_offset == first
        end_both(new)
    fill(new, 6, "t")
    new.log.roll()
    assert new.last_stable_offset == new.high_watermark
    nodes.upload(new)
    assert new.log.local_log_start_offset == new.log_end_offset  # every read goes to S3

    manifest = nodes.tier(new).refresh()
    indexed = [
        entry
        for s in manifest.segments
        if s.aborted_transactions
        for entry in txn_index.decode(nodes.storage.get(f"p/t/0/{s.name}{txn_index.SUFFIX}"))
    ]
    assert [(e.producer_id, e.first_offset) for e in indexed] == [(ABORTED.producer_id, first)]
    everything = await values(nodes.follower, Isolation.READ_UNCOMMITTED)
    assert {b"a1", b"a2", b"c1", b"c2"} <= set(everything)
    committed = await values(nodes.follower, Isolation.READ_COMMITTED)
    assert committed == [v for v in everything if v not in (b"a1", b"a2")]


async def test_without_a_producer_state_on_s3_a_follower_starts_at_the_local_start_warned(
    nodes: Nodes, caplog: pytest.LogCaptureFixture
) -> None:
    """Segments uploaded without their producer state (before it was shipped): the follower
    starts at the leader's local start as before, without the transactions open across it,
    and says so."""
    old = nodes.old
    fill(old, 3, "p")
    in_txn(old, ABORTED, b"a1")
    fill(old, 8, "q")
    old.log.roll()
    producer_state.delete_snapshots(
        old.log.directory
    )  # as segments closed before snapshots were kept
    with caplog.at_level(logging.WARNING):
        nodes.upload(old)
        start = old.log.local_log_start_offset
        await nodes.follow()
        await nodes.caught_up()
    new = nodes.new
    assert new.log.local_log_start_offset == start
    assert new.log.last_stable_offset == new.high_watermark  # the open transaction is unknown
    [line] = [r for r in caplog.records if r.name == "replication.fetcher"]
    assert line.levelno == logging.WARNING
    assert f"t-0 starts over at its leader's local log start {start} without" in line.getMessage()


def test_a_log_started_over_with_a_producer_state_keeps_it_across_a_restart(
    tmp_path: Path,
) -> None:
    """The state a follower loads as it starts over is snapshotted there: a restart after a
    crash (no clean close writing a later snapshot) before its next roll starts from it, not
    from an empty state."""
    config = TopicConfig().with_overrides(CONFIGS)
    log = PartitionLog(tmp_path, TOPIC, 0, config)
    state = ProducerState()
    state.producers[ABORTED.producer_id] = ProducerEntry(0, 15, False, RECENT_MS)
    state.ongoing[ABORTED.producer_id] = 15
    state.first_transactional = 15
    log.truncate_fully_and_start_at(40, state)
    log.append_as_leader(fmt.encode_batch([fmt.RecordInput(None, b"x", [], RECENT_MS)]), 0)
    log.advance_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 15
    again = PartitionLog(tmp_path, TOPIC, 0, config, log_start_offset=40, high_watermark=41)
    try:
        assert again.producer_state.ongoing == {ABORTED.producer_id: 15}
        assert again.last_stable_offset == 15 and again.high_watermark == 41
    finally:
        again.close()
        log.close()
