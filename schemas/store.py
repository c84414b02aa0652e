"""The registry's copy of `_schemas` on this node: a task that follows the topic (from its
leader, wherever that is) into the view, reads that wait for the view to catch up, and the one
writer (the leader of `_schemas-0`) that appends each decision with acks=all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Literal, Protocol, TypeVar

from engine import batch as fmt
from engine.errors import EngineError, OffsetOutOfRange, UnknownTopic
from replication.acks import Acks
from replication.errors import (
    LeaderChangedAfterAppend,
    LeaderNotAvailable,
    NotLeader,
    RequestTimedOut,
)
from replication.metadata import NO_LEADER
from replication.partition import Partition
from replication.replica_manager import ReplicaManager
from schemas import errors, records
from schemas.errors import SchemaError
from schemas.registry import Decision
from schemas.state import RegistryState

T = TypeVar("T")
READ_BYTES = 4 * 1024 * 1024
FOLLOW_WAIT_MS = 2_000  # one long-poll of the follower at the leader
# A leader that stopped answering (paused, cut off) holds a read this long past its wait at
# most: then the follower looks for the partition's leader again.
READ_SLACK_S = 1.0
RETRY_S = 0.2  # after a failed read (no leader yet, the leader moving): the next try
log = logging.getLogger(__name__)


class Read(Protocol):
    """Whole batches read from a partition."""

    @property
    def data(self) -> memoryview: ...


class PartitionReader(Protocol):
    """Committed records of a partition read wherever it is led (the groups' reader)."""

    async def read(
        self, topic: str, partition: int, position: int, max_bytes: int, timeout_ms: int
    ) -> Read: ...

    async def offset(
        self, topic: str, partition: int, at: Literal["earliest", "latest"] | int
    ) -> int: ...


class SchemaStore:
    """This node's registry view, kept current from `_schemas`, and its writes."""

    def __init__(self, replicas: ReplicaManager, reader: PartitionReader, wait_ms: int) -> None:
        self.replicas = replicas
        self.reader = reader
        self.wait_ms = wait_ms  # how long a read waits for the view, a write for its acks
        self.state = RegistryState()
        self.position = 0  # the next offset of the topic to apply
        self._advanced = asyncio.Event()
        self._writing = asyncio.Lock()
        self._follower: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin following the topic (the view fills as the records are read)."""
        self._follower = asyncio.create_task(self._follow())

    async def close(self) -> None:
        """Stop following."""
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower

    async def _follow(self) -> None:
        """Apply the topic's committed records in order, long-polling for new ones."""
        while True:
            try:
                async with asyncio.timeout(FOLLOW_WAIT_MS / 1000 + READ_SLACK_S):
                    read = await self.reader.read(
                        records.TOPIC, 0, self.position, READ_BYTES, FOLLOW_WAIT_MS
                    )
            except TimeoutError:
                continue
            except OffsetOutOfRange as exc:
                if exc.offset < exc.log_start_offset:  # deleted below us: read it all again
                    self.state = RegistryState()
                    self.position = exc.log_start_offset
                    continue
                await asyncio.sleep(RETRY_S)  # a new leader's high watermark still trails
                continue
            except (EngineError, OSError) as exc:
                log.debug("following %s: %s; retrying", records.TOPIC, exc)
                await asyncio.sleep(RETRY_S)
                continue
            except Exception:  # a view that stopped following would answer stale for ever
                log.exception("following %s failed; retrying", records.TOPIC)
                await asyncio.sleep(RETRY_S)
                continue
            if not read.data and self.replicas.notifier.closing:
                return  # shutting down: long-polls answer at once now
            self._apply(read.data)

    def _apply(self, data: memoryview) -> None:
        if not data:
            return
        for record in fmt.iter_records(data):
            if record.offset < self.position:
                continue
            try:
                decoded = records.decode(record.key, record.value)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("%s offset %d skipped: %s", records.TOPIC, record.offset, exc)
                decoded = None
            if decoded is not None:
                self.state.apply(decoded)
            self.position = record.offset + 1
        self.position = max(
            self.position, fmt.scan(data, check_crc=False).headers[-1][1].next_offset
        )
        self._advanced.set()
        self._advanced = asyncio.Event()

    async def reach(self, offset: int) -> None:
        """Wait until the view holds every record below `offset`; 50002 past the wait."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_ms / 1000
        while self.position < offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise SchemaError(
                    errors.OPERATION_TIMEOUT,
                    f"this node's registry has read {records.TOPIC} to offset {self.position}, "
                    f"not yet {offset}; retry shortly",
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._advanced.wait()

    async def synced(self) -> RegistryState:
        """The view, once it holds every record committed when asked (what any node
        answered before this read began is in it)."""
        try:
            async with asyncio.timeout(self.wait_ms / 1000):
                latest = await self.reader.offset(records.TOPIC, 0, "latest")
        except TimeoutError:
            raise SchemaError(
                errors.FORWARDING_ERROR,
                f"the leader of {records.TOPIC}-0 did not answer in time; retry shortly",
            ) from None
        except UnknownTopic:
            return self.state  # not created yet: nothing registered anywhere
        except EngineError as exc:
            raise SchemaError(
                errors.STORE_ERROR, f"the registry's topic cannot be read now: {exc}"
            ) from None
        await self.reach(latest)
        return self.state

    async def write(self, decide: Callable[[RegistryState], Decision[T]]) -> T:
        """Decide on the whole view and append the decision, one write at a time, here at
        the leader of `_schemas-0` (NotLeader names it: the gateway forwards the request).
        The leader's epoch fences the append: a deposed writer's fails."""
        async with self._writing:
            leader = self._leader()
            epoch = leader.leader_epoch
            await self.replicas.confirm_leadership(leader)
            end = leader.log_end_offset
            if leader.high_watermark < end:  # a new leader: its whole log first
                await self._committed(leader, end - 1)
            await self.reach(leader.high_watermark)
            decision = decide(self.state)
            if not decision.records:
                return decision.answer
            if not leader.is_leader or leader.leader_epoch != epoch:
                raise LeaderNotAvailable(f"{records.TOPIC}-0 changed leader; retry shortly")
            batch = fmt.encode_batch(
                fmt.RecordInput(*records.encode(record)) for record in decision.records
            )
            info = leader.append(bytes(batch), Acks.ALL)
            await self._committed(leader, info.last_offset)
            await self.reach(info.last_offset + 1)
            return decision.answer

    def _leader(self) -> Partition:
        """This node's replica of `_schemas-0` if it leads it; NotLeader names the one that does."""
        replicas = self.replicas
        try:
            leader = replicas.leading(records.TOPIC, 0)
            state = replicas.state(records.TOPIC, 0)
        except UnknownTopic:
            raise LeaderNotAvailable(f"{records.TOPIC} is being created; retry shortly") from None
        if leader is not None:
            return leader
        if state.leader != NO_LEADER and state.leader != replicas.node_id:
            raise NotLeader(f"node {state.leader} writes the registry", state.leader)
        raise LeaderNotAvailable(f"{records.TOPIC}-0 has no leader now; retry shortly")

    async def _committed(self, leader: Partition, last_offset: int) -> None:
        """Wait for the replicas to hold the log through `last_offset`."""
        try:
            await self.replicas.wait_committed(leader, last_offset, self.wait_ms)
        except (LeaderChangedAfterAppend, RequestTimedOut) as exc:
            raise SchemaError(
                errors.STORE_ERROR,
                f"the registry's write may not be stored ({exc}); retry (a register is idempotent)",
            ) from None
