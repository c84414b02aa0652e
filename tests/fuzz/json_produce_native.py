"""Fuzz target: the C produce path (gateway/formats/_producejson.c) builds byte for byte the batches
the Python path builds (Producer._build without it: codecs.parse_json_records, the partitioner,
engine.batch.encode_batches), or hands the body back, which then gets the Python path's answer
(batches or error); the sticky partitioner moves as far either way; and no bytes crash it.

The first two bytes choose the topic (partitions, a partition in the URL or none, compaction,
max.message.bytes); the rest is the body.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import orjson

from engine.config import TopicConfig
from gateway.formats import codecs
from gateway.formats import native as c_paths
from gateway.http.problem import Problem
from gateway.produce import front as produce
from replication.acks import Acks

assert c_paths.json_batches is not c_paths.declines, "gateway.formats._producejson is not built"
json_batches = c_paths.json_batches

NOW = 1_700_000_000.123  # time.time() while building: both paths stamp the same default
MAX_MESSAGE_BYTES = (TopicConfig().max_message_bytes, 90, 120, 160, 200, 300, 1000, 4000)


@dataclass(frozen=True)
class Topic:
    """What the produce request is for, besides its body."""

    partitions: int = 1
    url_partition: int | None = None
    compact: bool = False
    max_message_bytes: int = MAX_MESSAGE_BYTES[0]

    @classmethod
    def from_bytes(cls, head: bytes) -> Topic:
        first, second = (head + b"\0\0")[:2]
        partitions = 1 + first % 4
        url_partition = (first >> 3 & 7) % partitions if first & 4 else None
        return cls(partitions, url_partition, bool(first & 0x40), MAX_MESSAGE_BYTES[second % 8])

    def to_bytes(self) -> bytes:
        first = self.partitions - 1 + (0x40 if self.compact else 0)
        if self.url_partition is not None:
            first += 4 + 8 * self.url_partition
        return bytes([first, MAX_MESSAGE_BYTES.index(self.max_message_bytes)])


class _Replicas:
    """The one thing Producer._build asks the replica manager for a JSON body."""

    def __init__(self, config: TopicConfig) -> None:
        self.config = config

    def topic_config(self, name: str) -> TopicConfig:
        return self.config


def answer(body: bytes, topic: Topic, native: bool) -> tuple[Any, int]:
    """What Producer._build makes of the body, with or without the C path: (partition, batch
    bytes, record count) per partition, or the error; and the sticky partitioner's next pick
    (how far the request moved it)."""
    config = TopicConfig(
        cleanup_policy="compact" if topic.compact else "delete",
        max_message_bytes=topic.max_message_bytes,
    )
    unused: Any = None  # metrics, keys in flight, forwarder: building uses none of them
    producer = produce.Producer(cast(Any, _Replicas(config)), unused, unused, unused)
    spec = cast(Any, types.SimpleNamespace(name="t", partitions=topic.partitions))
    request = produce.ProduceRequest(
        "t", topic.url_partition, Acks.LEADER, 1000, codecs.JSON, body, None, None, "/"
    )
    saved = c_paths.json_batches, produce.time  # type: ignore[attr-defined]
    c_paths.json_batches = json_batches if native else c_paths.declines
    produce.time = cast(Any, types.SimpleNamespace(time=lambda: NOW))  # type: ignore[attr-defined]
    try:
        built = producer._build(spec, request, None, None)
        result: Any = [(b.partition, bytes(b.data), b.count) for b in built]
    except Problem as problem:
        result = ("problem", problem.status, problem.code, problem.detail, problem.extra)
    except Exception as exc:  # the Python path's own faults must be the same too
        result = ("error", type(exc), str(exc))
    finally:
        c_paths.json_batches, produce.time = saved  # type: ignore[attr-defined]
    return result, producer.sticky.next_partition(1 << 20)


def covered(body: bytes, topic: Topic) -> bool:
    """Whether the C path builds this body's batches itself."""
    built = json_batches(
        body,
        topic.partitions,
        topic.url_partition,
        lambda: 0,
        topic.max_message_bytes,
        int(NOW * 1000),
        topic.compact,
        None,
    )
    return built is not None


def compare(body: bytes, topic: Topic) -> Any:
    """Both paths' answers, which must be equal; the answer."""
    native = answer(body, topic, native=True)
    python = answer(body, topic, native=False)
    assert native == python, (native, python)
    return native[0]


def one_input(data: bytes) -> None:
    compare(data[2:], Topic.from_bytes(data[:2]))


def seeds() -> Iterator[bytes]:
    plain = Topic()
    keyed = Topic(partitions=3)
    small = Topic(partitions=2, max_message_bytes=300)
    yield plain.to_bytes() + orjson.dumps(
        {"records": [{"key": f"k{i}", "value": "x" * 20} for i in range(8)]}
    )
    yield keyed.to_bytes() + (
        b'{"records": [{"key": "alice", "value": {"item": "book", "qty": 1}},'
        b' {"key": "bob", "value": {"item": "pen", "qty": 3}, "headers": {"source": "web"}}]}'
    )
    yield small.to_bytes() + (
        b'{ "records" : [ {"value": [1, -2.5e-3, true, null, "\\u00e9\\ud83d\\ude00\\n"],'
        b' "key": "k\\"1", "headers": {"a": null, "b": "\\t", "a": "again"}, "timestamp": 0},'
        b' {"partition": 1, "timestamp": 1700000000000, "key": null}, {} ]  }\n'
    )
    yield Topic(2, 1, True).to_bytes() + b'{"records": [{"key": "k", "value": {"a": {"b": [[]]}}}]}'
    yield (
        plain.to_bytes()
        + b'{"records": [{"value": 1e309}, {"value": "aGk=", "value_encoding": "base64"}]}'
    )
