"""The C paths of REST Proxy v2 (gateway/formats/_producejson.c's v2_json_batches and
v2_offsets, gateway/formats/_fetchjson.c's v2 shapes) against the Python paths they stand in for.

- produce: a v2 json-format body built in C gives, byte for byte, the batches its route builds
  (translated to /v1's body, then Producer._build), and each record's partition as the route
  chooses it; bodies the C path leaves are handed back (None), the common shapes are covered.
- the answer: v2_offsets writes what orjson writes of the route's document.
- fetch: a v2 instance's records, json and binary, are what the Python loop writes, within a
  read's byte budget too.
"""

from __future__ import annotations

import json
import types
from typing import Any, cast

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from engine import batch as fmt
from engine.config import TopicConfig
from gateway.api.rest_proxy.produce import offsets_answer, translate
from gateway.formats import codecs
from gateway.formats import native as c_paths
from gateway.http.problem import Problem
from gateway.produce import front as produce
from gateway.produce.partitioner import partition_for_key
from replication.acks import Acks
from tests.gateway.test_fetchjson import logs
from tests.hypothesis_runs import deterministic

_producejson = pytest.importorskip("gateway.formats._producejson")

SETTINGS = deterministic(300, HealthCheck.filter_too_much)
NOW = 1_700_000_000.123
KEYLESS = 1  # the sticky partition both paths are given
MAX_BYTES = TopicConfig().max_message_bytes

# Keys as v2 clients send them: strings (some with escapes), numbers, literals, containers.
json_keys = (
    st.none()
    | st.text(st.sampled_from('ab"\\\n/é\u2028'), max_size=5)
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([0, -0.0, 1.5, 1e20, True, False, [], {}, [1, "a"], {"a": [None]}])
)
json_values = st.none() | st.integers() | st.text(max_size=5) | st.lists(st.integers(), max_size=3)


@st.composite
def v2_bodies(draw: st.DrawFn, partitions: int) -> bytes:
    """A v2 json-format body: mostly what v2 clients send, sometimes with another field or a
    partition out of range, sometimes spaced out."""
    records = []
    for _ in range(draw(st.integers(1, 6))):
        record: dict[str, Any] = {}
        if draw(st.booleans()):
            record["key"] = draw(json_keys)
        if draw(st.integers(0, 5)):
            record["value"] = draw(json_values)
        if draw(st.integers(0, 5)) == 0:
            record["partition"] = draw(st.integers(0, partitions))
        if draw(st.integers(0, 20)) == 0:
            record[draw(st.sampled_from(["headers", "timestamp", "other"]))] = None
        records.append(record)
    body = json.dumps({"records": records}, separators=(",", ":"), ensure_ascii=False).encode()
    if draw(st.integers(0, 5)) == 0:
        body = body.replace(b",", b" , ").replace(b":", b": ")
    return body


class _Replicas:
    def __init__(self, config: TopicConfig) -> None:
        self.config = config

    def topic_config(self, name: str) -> TopicConfig:
        return self.config


def _route_batches(body: bytes, partitions: int, url_partition: int | None) -> Any:
    """What the v2 route builds: the body translated to /v1's, then Producer._build (Python)."""
    try:
        v1_body, _, _ = translate(body, "json")
    except Problem as problem:
        return ("problem", problem.status)
    unused: Any = None
    producer = produce.Producer(cast(Any, _Replicas(TopicConfig())), unused, unused, unused)
    producer._keyless = lambda *args: KEYLESS  # type: ignore[method-assign]
    spec = cast(Any, types.SimpleNamespace(name="t", partitions=partitions))
    request = produce.ProduceRequest(
        "t", url_partition, Acks.LEADER, 1000, codecs.JSON, v1_body, None, None, "/"
    )
    saved = c_paths.json_batches, produce.time  # type: ignore[attr-defined]
    c_paths.json_batches = c_paths.declines
    produce.time = cast(Any, types.SimpleNamespace(time=lambda: NOW))  # type: ignore[attr-defined]
    try:
        return [
            (b.partition, bytes(b.data), b.count)
            for b in producer._build(spec, request, None, None)
        ]
    except Problem as problem:
        return ("problem", problem.status)
    finally:
        c_paths.json_batches, produce.time = saved  # type: ignore[attr-defined]


def _native(body: bytes, partitions: int, url_partition: int | None) -> Any:
    return _producejson.v2_json_batches(
        body, partitions, url_partition, lambda: KEYLESS, MAX_BYTES, int(NOW * 1000), False
    )


def _expected_owner(record: dict[str, Any], partitions: int, url_partition: int | None) -> int:
    if url_partition is not None:
        return url_partition
    if record.get("partition") is not None:
        return int(record["partition"])
    if record.get("key") is None:
        return KEYLESS
    return partition_for_key(orjson.dumps(orjson.loads(json.dumps(record["key"]))), partitions)


@SETTINGS
@given(st.integers(2, 4).flatmap(lambda n: st.tuples(st.just(n), v2_bodies(n), st.booleans())))
def test_c_builds_what_the_route_builds(case: tuple[int, bytes, bool]) -> None:
    partitions, body, named = case
    url_partition = 0 if named else None
    native = _native(body, partitions, url_partition)
    if native is None:
        return  # handed back: the route builds it
    groups, owners = native
    assert [(p, bytes(data), n) for p, data, n in groups] == _route_batches(
        body, partitions, url_partition
    )
    records = json.loads(body)["records"]
    assert list(memoryview(owners).cast("I")) == [
        _expected_owner(r, partitions, url_partition) for r in records
    ]


@pytest.mark.parametrize(
    "body",
    [
        b'{"records":[{"key":"user-1","value":{"a":1}},{"value":[1,2]},{"key":12,"value":"x"}]}',
        b'{"records": [{"key": true, "value": null, "partition": 1}, {"key": -7}]}',
        b'{"records":[{"key":"\xc3\xa9t\xc3\xa9","value":"caf\xc3\xa9"}]}',
    ],
)
def test_the_common_shapes_are_built_in_c(body: bytes) -> None:
    native = _native(body, 3, None)
    assert native is not None
    groups, _ = native
    assert [(p, bytes(data), n) for p, data, n in groups] == _route_batches(body, 3, None)


@pytest.mark.parametrize(
    "body",
    [
        b'{"records":[{"key":"a\\nb","value":1}]}',  # an escape: orjson may write it otherwise
        b'{"records":[{"key":1.5,"value":1}]}',
        b'{"records":[{"key":-0,"value":1}]}',
        b'{"records":[{"key":{"a":1},"value":1}]}',
        b'{"records":[{"value":1,"headers":{}}]}',  # not a v2 field: the route's 422
        b'{"records":[{"value":1}],"value_schema_id":null}',
        b'{"records":[]}',
        b'{"records":[{"value":1,"partition":3}]}',  # out of range
    ],
)
def test_other_bodies_are_handed_back(body: bytes) -> None:
    assert _native(body, 3, None) is None


@SETTINGS
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=50),
    st.integers(0, 2**62),
)
def test_the_answer_is_what_orjson_writes(owners: list[int], base: int) -> None:
    raw = memoryview(bytearray(4 * len(owners))).cast("I")
    for i, p in enumerate(owners):
        raw[i] = p
    bases = {p: base + p for p in set(owners)}
    written = _producejson.v2_offsets(raw.obj, bases)
    results = {p: (b, owners.count(p)) for p, b in bases.items()}
    assert written == orjson.dumps(offsets_answer(list(owners), results, []))
    missing = dict(list(bases.items())[1:])
    assert _producejson.v2_offsets(raw.obj, missing) is None


def _records(
    embedded: str, data: bytes, start: int, native: bool, max_bytes: int | None = None
) -> Any:
    """The records' JSON and next offset (and with `max_bytes`, what is left of the budget)."""
    saved = c_paths.batch_json
    if not native:
        c_paths.batch_json = c_paths.declines
    budget = None if max_bytes is None else codecs.ByteBudget(max_bytes)
    try:
        out, next_offset = codecs.rest_proxy_records(
            embedded, memoryview(data), start, 5, ("t", 3), budget
        )
        return msgspec.json.encode(out), next_offset, budget
    except Exception as exc:
        return ("error", type(exc))
    finally:
        c_paths.batch_json = saved


@SETTINGS
@given(logs(), st.integers(0, 3), st.sampled_from(["json", "binary"]))
def test_fetched_records_in_c_are_the_python_loops(data: bytes, skip: int, embedded: str) -> None:
    start = fmt.read_header(data).base_offset + skip
    assert _records(embedded, data, start, True) == _records(embedded, data, start, False)


def _json_text(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


@SETTINGS
@given(st.lists(st.none() | json_keys.map(_json_text) | st.binary(max_size=6), min_size=1))
def test_keys_read_back_as_the_python_loop_writes_them(keys: list[bytes | None]) -> None:
    records: list[fmt.RecordTuple] = [(k, b"1", [], None) for k in keys]
    data = bytes(fmt.encode_batches(records, max_batch_bytes=1 << 20, values_json=True))
    for embedded in ("json", "binary"):
        assert _records(embedded, data, 0, True) == _records(embedded, data, 0, False)


@SETTINGS
@given(logs(), st.integers(0, 40), st.booleans(), st.sampled_from(["json", "binary"]))
def test_a_byte_budget_bounds_records_alike(
    data: bytes, max_bytes: int, delivered: bool, embedded: str
) -> None:
    """Records' key and value bytes stay within the budget, in C as in Python; a read with
    none yet takes its first record whatever its size; the next offset follows the last."""
    start = fmt.read_header(data).base_offset
    answers: list[Any] = []
    for native in (True, False):
        saved = c_paths.batch_json
        if not native:
            c_paths.batch_json = c_paths.declines
        budget = codecs.ByteBudget(max_bytes, delivered)
        try:
            out, next_offset = codecs.rest_proxy_records(
                embedded, memoryview(data), start, 5, ("t", 3), budget
            )
        except Exception as exc:
            answers.append(("error", type(exc)))
            continue
        finally:
            c_paths.batch_json = saved
        answers.append((msgspec.json.encode(out), next_offset, budget))
        sizes = _sizes(data)
        taken = sizes[: len(out)]
        assert sum(taken) <= max_bytes or (len(out) == 1 and not delivered)
        assert budget.left == max_bytes - sum(taken)
        if out and len(out) < min(5, len(sizes)):
            assert sum(sizes[: len(out) + 1]) > max_bytes
        if not out and delivered:
            assert next_offset == start
    assert answers[0] == answers[1]


def _sizes(data: bytes) -> list[int]:
    """Each record's key and value bytes, over the batches."""
    view, pos, out = memoryview(data), 0, []
    while pos < len(data):
        header = fmt.read_header(view, pos)
        out += [
            len(r.key or b"") + len(r.value or b"")
            for r in fmt.batch_records(view[pos : pos + header.size])
        ]
        pos += header.size
    return out
