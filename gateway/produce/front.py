"""Produce: body -> per-partition batches, handed to the partition layer
(`replication.records_append`), which appends them and honours the acks.

Every partition's batches are built and checked before the first append, so a request that
fails validation appends nothing. Records bound for one partition go into one append call, so
they get consecutive offsets in request order.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Container, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import orjson

from engine import batch as fmt
from engine.batch import RecordTuple
from engine.errors import RecordTooLarge, UnknownPartition
from engine.log import AppendInfo
from engine.producer_state import ProducerIdentity
from gateway.formats import codecs, native
from gateway.metrics.collectors import Metrics
from gateway.produce import idempotency
from gateway.produce.errors import ProduceError, SchemaViewBehind
from gateway.produce.idempotency import InFlight
from gateway.produce.partitioner import StickyPartitioner, partition_for_key
from replication.acks import Acks
from replication.forward_client import ForwardClient
from replication.idempotency import Marker
from replication.metadata import TopicSpec
from replication.records_append import Landed, LandedThen, PartitionBatch, RecordsAppender
from replication.replica_manager import ReplicaManager
from schemas import validation
from schemas.state import RegistryState
from schemas.validation import Checked, Field, Named, RecordRefused

T = TypeVar("T")


class InTransaction(Protocol):
    """A produce's transaction: `producer` is who writes in it as far as this node knows now
    (None: not known here), so that its batches are built stamped for it; calling adds the
    produce's partitions to it at its coordinator (KIP-890's server side: before any of them
    is written) and says who writes, which decides."""

    producer: ProducerIdentity | None

    def __call__(self, partitions: list[int]) -> Awaitable[ProducerIdentity]: ...


@dataclass(slots=True)  # not frozen: a frozen __init__ costs 1.3 µs more, once per produce
class ProduceRequest:
    topic: str
    partition: int | None  # from the path, if the URL names one
    acks: Acks
    timeout_ms: int
    content_type: str
    body: bytes
    key: str | None  # NDJSON: the key for every line
    idempotency_key: str | None
    target: str  # path and query: part of what makes two requests the same
    forwarded: bool = False  # from another node: never forwarded again
    schemas: dict[Field, Named] | None = None  # the schemas named to check JSON fields against
    transaction: InTransaction | None = None  # the transaction it writes in, if any


@dataclass(slots=True)
class Built:
    """A produce request's batches, checked and built; what its append goes on with."""

    topic: TopicSpec
    batches: list[PartitionBatch]


class Producer:
    """Turns produce requests into per-partition batches, and those into an answer once the
    partition layer appended them."""

    def __init__(
        self,
        replicas: ReplicaManager,
        metrics: Metrics,
        in_flight: InFlight,
        forwarder: ForwardClient,
        keyless_led_here: bool = False,
    ) -> None:
        self.replicas = replicas
        self.appender = RecordsAppender(replicas, forwarder)
        self.metrics = metrics
        self.in_flight = in_flight
        self.sticky = StickyPartitioner()
        self.keyless_led_here = keyless_led_here  # workers: key-less records stay local
        # This node's registry view, for topics that validate their records' schemas.
        self.registry: Callable[[], RegistryState] = RegistryState
        self.registry_synced: Callable[[], Awaitable[object]] = _nothing_to_wait_for

    async def produce(
        self, request: ProduceRequest, built: Built | None = None
    ) -> dict[str, object]:
        """Append the request's records and honour its acks: the answer document (each
        partition's first offset and count).
        `built`: what `build` made of a request without an idempotency key, if it ran."""
        key = request.idempotency_key
        if key is None:
            if built is None:
                built = await self._built_once_synced(lambda: self.build(request))
            return await self._append(request, built.topic.name, built.batches)
        topic = self.replicas.topic(request.topic)
        if request.partition is not None:
            self.replicas.check_partition(request.topic, request.partition)
        digest = idempotency.body_hash(request.body, request.content_type, request.target)
        # Each partition's leader answers a repeated request with the first attempt's offsets
        # (replication.idempotency); here, only a second copy in flight on this node waits.
        with self.in_flight.claim(topic.name, key):
            batches = await self._built_once_synced(
                lambda: self._build(topic, request, key, digest)
            )
            return await self._append(request, topic.name, batches)

    async def _built_once_synced(self, build: Callable[[], T]) -> T:
        """`build()`; if a record names a schema this node's registry view does not know, the
        view catches up with the registry first and the request is built again (a schema
        registered through another node an instant before)."""
        try:
            return build()
        except SchemaViewBehind:
            await self.registry_synced()
            return build()

    async def _append(
        self, request: ProduceRequest, topic: str, batches: list[PartitionBatch]
    ) -> dict[str, object]:
        """The answer once the partition layer appended `batches` and honoured the acks."""
        landed: Landed = {}
        try:
            if request.transaction is not None:
                producer = await request.transaction(sorted({b.partition for b in batches}))
                await self.appender.append_transactional(
                    topic, batches, request.acks, request.timeout_ms, landed, producer
                )
            else:
                await self.appender.append_records(
                    topic,
                    batches,
                    request.acks,
                    request.timeout_ms,
                    landed,
                    may_forward=not request.forwarded,
                    joinable=request.idempotency_key is None,
                )
        finally:
            self._count(topic, batches, landed)
        return self._answer(request, landed)

    def build(self, request: ProduceRequest) -> Built:
        """A request without an idempotency key, checked and turned into its batches; raises
        what the request gets for a bad body, an unknown topic or partition."""
        topic = self.replicas.topic(request.topic)
        if request.partition is not None:
            self.replicas.check_partition(request.topic, request.partition)
        return Built(topic, self._build(topic, request, None, None))

    def build_json_keyed(self, request: ProduceRequest) -> tuple[Built, bytes] | None:
        """A JSON body whose keys are JSON values stored as their compact text (REST Proxy v2's
        json format; no idempotency key), built in C, with each record's partition (native
        uint32s, in request order). None where C does not cover the body or refuses it: the
        caller translates it and takes `build`, which is the reference and gives the errors."""
        if request.idempotency_key is not None:
            return None
        topic = self.replicas.topic(request.topic)
        if request.partition is not None:
            self.replicas.check_partition(request.topic, request.partition)
        config = self.replicas.topic_config(topic.name)
        if validation.checks_of(config):
            return None  # `build` checks each record against its schema
        keyless = (
            _once(functools.partial(self._keyless, request.topic, topic.partitions, None))
            if request.partition is None
            else _partition_named
        )
        made = native.v2_json_batches(
            request.body,
            topic.partitions,
            request.partition,
            keyless,
            config.max_message_bytes,
            int(time.time() * 1000),
            config.compact,
        )
        if made is None:
            return None
        groups, owners = made
        return Built(topic, [PartitionBatch(p, data, count) for p, data, count in groups]), owners

    def append_now(
        self, request: ProduceRequest, built: Built, then: LandedThen
    ) -> asyncio.Future[AppendInfo] | None:
        """The common produce's append, joining this loop turn's write without a coroutine:
        one partition led here, no transaction. Its landing, which `then` gets with its leader
        in the write's pass; None for any other request (`produce` appends those)."""
        if len(built.batches) != 1 or request.transaction is not None:
            return None
        return self.appender.append_now(built.topic.name, built.batches[0], request.acks, then)

    def appended(self, built: Built, info: AppendInfo) -> tuple[int, int, int]:
        """`append_now`'s append, landed (and, when `info.flush_due`, acknowledged by
        `replicas.acknowledge`), counted: its partition, base offset and record count."""
        item = built.batches[0]
        self.metrics.traffic.produced(built.topic.name, item.count, len(item.data))
        return item.partition, info.first_offset, item.count

    def _answer(
        self, request: ProduceRequest, results: dict[int, tuple[int, int]]
    ) -> dict[str, object]:
        ordered = sorted(results.items()) if len(results) > 1 else results.items()
        body: dict[str, object] = {
            "results": [
                {"partition": p, "base_offset": base, "count": count}
                for p, (base, count) in ordered
            ]
        }
        return body

    # -- building ------------------------------------------------------------------------------

    def _build(
        self, topic: TopicSpec, request: ProduceRequest, key: str | None, digest: str | None
    ) -> list[PartitionBatch]:
        partitions = topic.partitions
        pin = key.encode() if key is not None else None
        config = self.replicas.topic_config(topic.name)
        now = int(time.time() * 1000)
        groups: dict[int, list[RecordTuple]]
        json_groups: set[int]
        owner: list[int] | None = None  # each record's partition, when there are several
        compression = 0
        checks = validation.checks_of(config)
        if request.content_type == codecs.RECORD_BATCH:
            data = codecs.validate_record_batches(request.body)
            p = self._keyless_partition(request, partitions, pin)
            headers = fmt.scan(data, check_crc=False).headers
            if checks and not self._schema_ids_registered(topic.name, checks, data, headers):
                sent = [(r.key, r.value, r.headers, r.timestamp) for r in fmt.iter_records(data)]
                self._check_schemas(topic.name, checks, sent, (), json_keys=False)
            if key is None:
                return [PartitionBatch(p, data, sum(h.record_count for _, h in headers))]
            # The marker goes on the first record: the client's batches are encoded again,
            # with their codec (only idempotent binary produces pay for this).
            groups = {p: [(r.key, r.value, r.headers, r.timestamp) for r in fmt.iter_records(data)]}
            json_groups = set()
            compression = headers[0][1].compression
        elif request.content_type == codecs.NDJSON:
            record_key = None if request.key is None else request.key.encode()
            records = codecs.parse_ndjson_records(request.body, record_key)
            if checks:
                self._check_schemas(
                    topic.name, checks, records, range(len(records)), True, request.schemas
                )
            if record_key is not None and request.partition is None:
                p = partition_for_key(record_key, partitions)
            else:
                p = self._keyless_partition(request, partitions, pin)
            groups = {p: records}
            json_groups = {p}
        else:
            # Both paths ask for the sticky partition once the body proved valid; remembered,
            # so a body the C path hands back gets the partition it already chose. A request
            # naming its partition never asks.
            keyless = (
                _once(functools.partial(self._keyless, request.topic, partitions, pin))
                if request.partition is None
                else _partition_named
            )
            if key is None and (
                not checks
                or (
                    request.schemas is None and self._json_schemas_hold(topic.name, checks, request)
                )
            ):
                # The common JSON body, straight to batches in C (gateway/formats/_producejson.c);
                # None for any other body, including every refused one: the Python path below is the
                # reference, byte for byte, and gives the errors. Idempotent requests always
                # take the Python path, which puts the marker on their first record.
                writer = None if request.transaction is None else request.transaction.producer
                built = native.json_batches(
                    request.body,
                    partitions,
                    request.partition,
                    keyless,
                    config.max_message_bytes,
                    now,
                    config.compact,
                    None if writer is None else (writer.producer_id, writer.epoch),
                )
                if built is not None:
                    return [PartitionBatch(p, data, count) for p, data, count in built]
            groups, json_groups, owner = self._group_json(
                request, partitions, keyless, topic.name, checks
            )
        if config.compact:
            for records in groups.values():
                if any(r[0] is None for r in records):
                    raise ProduceError(
                        "INVALID_RECORD",
                        f"topic {topic.name!r} is compacted: every record needs a key",
                    )
        out = []
        for p in sorted(groups):
            records = groups[p]
            extra = 0
            if key is not None and digest is not None:
                record_key, value, first_headers, timestamp = records[0]
                marker = Marker(key, digest, len(groups), len(records), now).encode()
                stamped = [*first_headers, (fmt.IDEMPOTENCY_HEADER, marker)]
                records = [(record_key, value, stamped, timestamp), *records[1:]]
                extra = fmt.IDEMPOTENT_MASK
            try:
                data = fmt.encode_batches(
                    records,
                    max_batch_bytes=config.max_message_bytes,
                    compression=compression,
                    default_timestamp=now,
                    values_json=p in json_groups,
                    extra_attributes=extra,
                )
            except RecordTooLarge as exc:
                index = exc.record_index or 0
                if owner is not None:  # the index within the partition -> within the request
                    index = [i for i, o in enumerate(owner) if o == p][index]
                raise ProduceError(
                    "RECORD_TOO_LARGE", f"records[{index}]: {exc}", index=index
                ) from None
            out.append(PartitionBatch(p, data, len(records)))
        return out

    def _keyless_partition(
        self, request: ProduceRequest, partitions: int, pin: bytes | None
    ) -> int:
        if request.partition is not None:
            return request.partition
        return self._keyless(request.topic, partitions, pin)

    def _keyless(self, topic: str, partitions: int, pin: bytes | None) -> int:
        """The sticky partition of key-less records. A worker rotates over the partitions it
        leads, if any: the kernel spreads connections over the workers, so every partition
        still gets its share, and the records skip the hop to another worker. Idempotent
        requests (`pin`) keep their deterministic partition, so a retry lands where the
        first attempt did whichever worker it reaches."""
        if pin is None and self.keyless_led_here:
            led = [
                p
                for p in range(partitions)
                if (local := self.replicas.local(topic, p)) is not None and local.is_leader
            ]
            if led:
                return led[self.sticky.next_partition(len(led))]
        return self.sticky.next_partition(partitions, pin)

    def _group_json(
        self,
        request: ProduceRequest,
        partitions: int,
        keyless: Callable[[], int],
        topic: str,
        checks: tuple[Checked, ...],
    ) -> tuple[dict[int, list[RecordTuple]], set[int], list[int] | None]:
        """Records per partition in request order, the partitions whose values are all JSON,
        and each record's partition (None when they all share one); `keyless()` gives the
        partition of key-less records. `checks`: the schemas the records must match."""
        parsed = codecs.parse_json_records(request.body)
        records = parsed.records
        if checks:
            json_values = set(range(len(records))) - parsed.not_json
            self._check_schemas(topic, checks, records, json_values, True, request.schemas)
        chosen = parsed.partitions or [None] * len(records)
        for index, partition in enumerate(chosen):
            if partition is None:
                continue
            if request.partition is not None and partition != request.partition:
                raise codecs.invalid(
                    index, "partition differs from the partition in the URL", "partition"
                )
            if partition >= partitions:
                raise ProduceError(
                    UnknownPartition.code,
                    f"records[{index}]: topic {request.topic!r} has partitions 0..{partitions - 1}",
                    index=index,
                )
        groups: dict[int, list[RecordTuple]]
        if request.partition is not None:
            groups = {request.partition: records}
            owner = [request.partition] * len(records)
        else:
            keyless_partition = keyless()
            groups = {}
            owner = []
            for record, partition in zip(records, chosen, strict=True):
                if partition is None:
                    record_key = record[0]
                    partition = (
                        keyless_partition
                        if record_key is None
                        else partition_for_key(record_key, partitions)
                    )
                groups.setdefault(partition, []).append(record)
                owner.append(partition)
        not_json = {owner[i] for i in parsed.not_json}
        return groups, set(groups) - not_json, owner if len(groups) > 1 else None

    def _json_schemas_hold(
        self, topic: str, checks: tuple[Checked, ...], request: ProduceRequest
    ) -> bool:
        """Whether a plain JSON body's records (no base64 field) all match their subjects'
        schemas, from one decode of the body; False when not, or for any other body:
        `_check_schemas` then checks record by record and says which fails and why."""
        try:
            doc = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            return False
        records = doc.get("records") if isinstance(doc, dict) else None
        if not isinstance(records, list):
            return False
        try:
            fields = set().union(*records)  # the records' names, if they are objects
        except TypeError:
            return False
        if "key_encoding" in fields or "value_encoding" in fields:
            return False
        return validation.json_records_hold(self.registry(), topic, checks, records)

    def _schema_ids_registered(
        self,
        topic: str,
        checks: tuple[Checked, ...],
        data: bytearray,
        headers: list[tuple[int, fmt.BatchHeader]],
    ) -> bool:
        """Whether every checked field of the binary batches is framed with an id registered
        under its subject, as C reads them (no record decoded); False when it is not so or C
        cannot say: `_check_schemas` then walks the records and says which fails and why."""
        view = memoryview(data)
        state = self.registry()
        for check in checks:
            for pos, header in headers:
                found = native.wire_schema_ids(view[pos : pos + header.size], check.field == "key")
                if found is None or found[0] >= 0:
                    return False
                if not validation.all_registered(state, topic, check, found[1]):
                    return False
        return True

    def _check_schemas(
        self,
        topic: str,
        checks: tuple[Checked, ...],
        records: Sequence[RecordTuple],
        json_values: Container[int],
        json_keys: bool,
        named: dict[Field, Named] | None = None,
    ) -> None:
        """Refuse the request if a record's key or value does not match its subject's schema
        (the topic's key.schema.validation / value.schema.validation)."""
        try:
            validation.check_records(
                self.registry(), topic, checks, records, json_values, json_keys, named
            )
        except RecordRefused as exc:
            refused = SchemaViewBehind if exc.unknown else ProduceError
            raise refused(
                exc.code, str(exc), index=exc.index, field=exc.field, subject=exc.subject
            ) from None

    def _count(self, topic: str, batches: list[PartitionBatch], landed: Landed) -> None:
        """The produced-records metrics of the partitions that have the batches."""
        for item in batches:
            if item.partition in landed:
                self.metrics.traffic.produced(topic, item.count, len(item.data))


async def _nothing_to_wait_for() -> None:
    """The registry view's catch-up where the node has none (a Producer built alone)."""


def _partition_named() -> int:
    raise AssertionError("a request that names its partition has no key-less choice to make")


def _once(choose: Callable[[], int]) -> Callable[[], int]:
    """`choose`, called at most once: later calls answer what it chose (0.5 µs per request,
    where a `functools.cache` of it cost 3.4)."""
    chosen: list[int] = []

    def once() -> int:
        if not chosen:
            chosen.append(choose())
        return chosen[0]

    return once
