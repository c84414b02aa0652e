"""The C produce path (gateway/formats/_producejson.c) against the Python path it stands in for.

For any JSON produce body, valid or not, and any topic (partitions, a partition in the URL,
compaction, max.message.bytes), Producer._build must build exactly what it builds without the
extension: the same batches byte for byte, or the same error; and move the sticky partitioner
as far. Bodies the C path does not cover it hands back (None), so the comparison also holds for
them; the tests below check that the common shapes are covered.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from engine import batch as fmt
from engine.config import TopicConfig
from engine.producer_state import ProducerIdentity
from gateway.formats import codecs
from gateway.produce import front as produce
from replication.acks import Acks
from tests.fuzz import sanitizers

_producejson = pytest.importorskip("gateway.formats._producejson")

from tests.fuzz.json_produce_native import (  # noqa: E402 - needs the extension
    MAX_MESSAGE_BYTES,
    NOW,
    Topic,
    _Replicas,
    compare,
    covered,
)
from tests.hypothesis_runs import deterministic  # noqa: E402

SETTINGS = deterministic(300, HealthCheck.filter_too_much)

# Text that stresses escaping and UTF-8: quotes, backslashes, control characters, DEL,
# non-ASCII of every width, noncharacters, a line separator.
tricky_text = st.text(
    st.sampled_from('"\\/\x00\x08\x1f\x7f\n\t aé\u2028\uffff\U0001f600'), max_size=6
) | st.text(max_size=12)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=8,
)
timestamps = st.none() | st.integers(0, 2**63 - 1) | st.sampled_from([0, 10**18 - 1, 10**18])


@st.composite
def topics(draw: st.DrawFn) -> Topic:
    partitions = draw(st.integers(1, 4))
    url_partition = draw(st.none() | st.integers(0, partitions - 1))
    max_message_bytes = draw(st.sampled_from(MAX_MESSAGE_BYTES) | st.integers(61, 3000))
    compact = draw(st.sampled_from([False] * 7 + [True]))
    return Topic(partitions, url_partition, compact, max_message_bytes)


@st.composite
def records(draw: st.DrawFn, topic: Topic) -> dict[str, Any]:
    """A record object of the fields the C path covers, in any order."""
    fields: dict[str, Any] = {}
    if draw(st.booleans()):
        fields["key"] = draw(st.none() | tricky_text)
    if draw(st.integers(0, 9)):
        fields["value"] = draw(json_values)
    if draw(st.integers(0, 3)) == 0:
        fields["headers"] = draw(
            st.none() | st.dictionaries(tricky_text, st.none() | tricky_text, max_size=3)
        )
    if draw(st.integers(0, 4)) == 0:
        fields["partition"] = draw(
            st.none() | st.integers(0, topic.partitions - 1)
            if topic.url_partition is None
            else st.sampled_from([None, topic.url_partition])
        )
    if draw(st.integers(0, 4)) == 0:
        fields["timestamp"] = draw(timestamps)
    order = draw(st.permutations(list(fields)))
    return {name: fields[name] for name in order}


INDENTS: list[int | str | None] = [None, 0, 2, "\t"]  # json.dumps's: none, newlines only, two, tab


@st.composite
def bodies(draw: st.DrawFn, topic: Topic) -> bytes:
    """A produce body as a client might write it: compact or indented, non-ASCII as UTF-8 or
    as \\u escapes (surrogate pairs included). One in four has a record with a field the C
    path leaves to Python: a partition out of range or not the URL's, a base64 encoding, an
    unknown field."""
    doc = {"records": draw(st.lists(records(topic), min_size=1, max_size=12))}
    odd = draw(st.sampled_from([None, None, None, "partition", "key_encoding", "offset"]))
    if odd is not None:
        record = draw(st.sampled_from(doc["records"]))
        record[odd] = draw(st.integers(0, topic.partitions)) if odd == "partition" else "base64"
    ascii = draw(st.booleans())
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " :")]))
    indent = draw(st.sampled_from(INDENTS))
    return json.dumps(doc, ensure_ascii=ascii, separators=separators, indent=indent).encode()


@SETTINGS
@given(topic=topics(), picks=st.data())
def test_same_batches_as_the_python_path(topic: Topic, picks: st.DataObject) -> None:
    compare(picks.draw(bodies(topic)), topic)


# Tokens that change what a body means: numbers no double holds, literals JSON lacks, lone
# surrogates, bytes that are not UTF-8, escaped or repeated field names, deep nesting.
SPLICES = [
    b"NaN",
    b"-Infinity",
    b"1e309",
    b"-1E400",
    b"1" * 310,
    b"1e308",
    b"0.1e300",
    b"9" * 300,
    b'"\\ud800"',
    b'"\\udc00\\ud800"',
    b'"\xff"',
    b'"\xed\xa0\x80"',
    b'"\xc0\xaf"',
    b'"\\u0076alue"',
    b'"value": 1, "value"',
    b'"records": [{}], "records"',
    b"[" * 130 + b"]" * 130,
    b"[" * 1100 + b"]" * 1100,
    b"-0",
    b"1.0",
    b"00",
    b"\xef\xbb\xbf",
    b",",
]


@SETTINGS
@given(topic=topics(), edits=st.data())
def test_damaged_bodies_get_the_python_answer(topic: Topic, edits: st.DataObject) -> None:
    """Bytes set, cut, inserted or spliced in anywhere: never a crash, never an answer other
    than the Python path's."""
    body = bytearray(edits.draw(bodies(topic)))
    for _ in range(edits.draw(st.integers(1, 3))):
        at = edits.draw(st.integers(0, len(body)))
        how = edits.draw(st.sampled_from(["set", "cut", "insert", "splice"]))
        if how == "set" and at < len(body):
            body[at] = edits.draw(st.integers(0, 255))
        elif how == "cut":
            del body[at : at + edits.draw(st.integers(1, 4))]
        elif how == "insert":
            body[at:at] = bytes([edits.draw(st.integers(0, 255))])
        else:
            body[at : at + edits.draw(st.integers(0, 6))] = edits.draw(st.sampled_from(SPLICES))
    compare(bytes(body), topic)


@SETTINGS
@given(blob=st.binary(max_size=300), topic=topics())
def test_arbitrary_bytes(blob: bytes, topic: Topic) -> None:
    compare(blob, topic)


README_BODY = (
    b'{"records": [{"key": "alice", "value": {"item": "book", "qty": 1}}, {"key": "bob",'
    b' "value": {"item": "pen", "qty": 3}, "headers": {"source": "web"}}]}'
)
COMMON = [
    # loadtests.quick and loadtests.bench
    orjson.dumps({"records": [{"key": f"k{i:04d}", "value": "x" * 88} for i in range(1000)]}),
    orjson.dumps({"records": [{"value": orjson.Fragment(b'"' + b"x" * 98 + b'"')}] * 100}),
    README_BODY,
    b'{"records": [{"value": 1}]}',
    b'{"records": [{}, {"value": null}, {"key": null, "headers": null, "timestamp": null}]}',
    b' {\n "records" : [ { "value" : [ 1 , -2.5e-3 , 1E299, true , false , null , "" ] } ] }\n',
    b'{"records": [{"key": "\\u00e9\\ud83d\\ude00\\"\\\\\\/\\b\\f\\n\\r\\t", "value": "\\u0000"}]}',
    b'{"records": [{"value": {"a": "b"}, "headers": {"h": "1", "n": null, "h": "2"}}]}',
    b'{"records": [{"timestamp": 0}, {"timestamp": 999999999999999999}]}',
    orjson.dumps({"records": [{"value": "é" * 100, "key": "ü"}, {"value": {"deep": [[[[]]]]}}]}),
]


@pytest.mark.parametrize("body", COMMON)
@pytest.mark.parametrize("topic", [Topic(), Topic(2), Topic(2, 1), Topic(3, 2)])
def test_common_bodies_take_the_c_path(body: bytes, topic: Topic) -> None:
    assert covered(body, topic)
    compare(body, topic)


LEFT_TO_PYTHON = [
    b'{"records": []}',
    b'{"records": [{"value": NaN}]}',
    b'{"records": [{"value": 1e309}]}',
    b'{"records": [{"value": 1.5e300}]}',  # might be past a double's range: Python checks it
    b'{"records": [{"value": ' + b"1" * 301 + b"}]}",
    b'{"records": [{"value": ' + b"[" * 126 + b"]" * 126 + b"}]}",
    b'{"records": [{"value": "\\ud800"}]}',
    b'{"records": [{"value": "\xff"}]}',
    b'{"records": [{"key": "\xff"}]}',
    b'{"records": [{"value": "\x01"}]}',
    b'{"records": [{"value": "aGk=", "value_encoding": "base64"}]}',
    b'{"records": [{"key": "aGk=", "key_encoding": "base64"}]}',
    b'{"records": [{"value": 1, "offset": 3}]}',
    b'{"records": [{"\\u0076alue": 1}]}',
    b'{"records": [{"value": 1, "value": 2}]}',
    b'{"records": [{"value": 1}], "records": [{"value": 2}]}',
    b'{"records": [{"value": 1}], "other": 1}',
    b'{"records": [{"partition": 9}]}',
    b'{"records": [{"partition": -0}]}',
    b'{"records": [{"partition": 0.0}]}',
    b'{"records": [{"timestamp": 1000000000000000000}]}',
    b'{"records": [{"timestamp": -1}]}',
    b'{"records": [{"headers": {"a": 1}}]}',
    b'{"records": [{"headers": []}]}',
    b'{"records": [{"value": 1}]} x',
    b'{"records": [{"value": 1},]}',
    b'\xef\xbb\xbf{"records": [{"value": 1}]}',
    b'{"records": [{"value": "' + b"x" * 2000 + b'"}]}',  # too large for 1000 bytes
    b'{"records": [{"headers": {' + b",".join(b'"h%d": null' % i for i in range(65)) + b"}}]}",
]


@pytest.mark.parametrize("body", LEFT_TO_PYTHON)
def test_bodies_left_to_python(body: bytes) -> None:
    topic = Topic(2, max_message_bytes=1000)
    assert not covered(body, topic)
    compare(body, topic)


def test_deepest_values_covered() -> None:
    """The body's two levels and the record's, then 125 more: the C path's limit."""
    body = b'{"records": [{"value": ' + b"[" * 125 + b"]" * 125 + b"}]}"
    assert covered(body, Topic())
    compare(body, Topic())


def test_url_partition_and_compaction_are_checked() -> None:
    keyless = b'{"records": [{"key": "k"}, {"value": 1}]}'
    assert covered(keyless, Topic(2))
    assert not covered(keyless, Topic(2, compact=True))
    compare(keyless, Topic(2, compact=True))
    other = b'{"records": [{"partition": 1}, {"partition": 0, "key": "k"}, {}]}'
    assert not covered(other, Topic(2, 0))
    compare(other, Topic(2, 0))
    assert covered(other, Topic(2))
    compare(other, Topic(2))


@pytest.mark.parametrize("size", [0, 62, 63, 64, 8190, 8191, 8192, 1_048_400, 1_048_600])
def test_lengths_across_varint_widths(size: int) -> None:
    """Key, value and header lengths whose varints take one, two or three bytes, up to a record
    just under and just over max.message.bytes."""
    body = orjson.dumps(
        {
            "records": [
                {"key": "k" * (size % 9000), "value": "v" * size, "headers": {"h": "x" * size}}
                if size < 9000
                else {"value": "v" * size},
                {"value": 1, "timestamp": 0},
            ]
        }
    )
    compare(body, Topic())
    compare(body, Topic(3))


@pytest.mark.parametrize("max_message_bytes", range(60, 420, 7))
def test_splits_at_max_message_bytes_exactly(max_message_bytes: int) -> None:
    """Records of growing size, with timestamps before and after the batch's first: each
    batch ends where aiokafka's builder would end it."""
    records = [
        {"value": "x" * (3 * i), "timestamp": (i * 7919) % 13 * 10**15 if i % 3 else None}
        for i in range(30)
    ]
    body = orjson.dumps({"records": records})
    topic = Topic(max_message_bytes=max_message_bytes)
    built = compare(body, topic)
    if isinstance(built, list):
        assert covered(body, topic)
        batches = fmt.scan(built[0][1]).headers
        assert sum(h.record_count for _, h in batches) == 30
        assert all(h.size <= max_message_bytes for _, h in batches)


def _calls(body: bytes, url_partition: int | None, compact: bool = False) -> list[None]:
    calls: list[None] = []

    def keyless() -> int:
        calls.append(None)
        return 1

    _producejson.json_batches(body, 2, url_partition, keyless, 10**6, int(NOW * 1000), compact)
    return calls


def test_keyless_is_asked_once_and_only_where_python_asks() -> None:
    """The Python path asks for the sticky partition after validating the body and its
    partitions, whenever the URL names none: so does the C path, at most once."""
    keyed = b'{"records": [{"key": "a"}, {"key": "b"}]}'
    assert len(_calls(keyed, None)) == 1
    assert len(_calls(b'{"records": [{}, {}, {}]}', None)) == 1
    assert _calls(keyed, 0) == []
    assert _calls(b'{"records": [{"value": NaN}]}', None) == []
    assert _calls(b'{"records": [{"partition": 5}]}', None) == []
    assert len(_calls(b'{"records": [{}]}', None, compact=True)) == 1


def test_bad_arguments() -> None:
    body = b'{"records": [{}]}'
    with pytest.raises(ValueError, match="out of range"):
        _producejson.json_batches(body, 2, None, lambda: 2, 1000, 0, False)
    with pytest.raises(TypeError):
        _producejson.json_batches(body, 2, None, None, 1000, 0, False)
    with pytest.raises(ValueError):
        _producejson.json_batches(body, 0, None, lambda: 0, 1000, 0, False)
    for url_partition in (2, -1):
        with pytest.raises(ValueError):
            _producejson.json_batches(body, 2, url_partition, lambda: 0, 1000, 0, False)
    with pytest.raises(RuntimeError, match="no"):
        _producejson.json_batches(body, 2, None, _refuse, 1000, 0, False)


def test_a_transactions_batches_are_built_as_set_producers_stamps_them() -> None:
    """With a producer, every batch (several partitions, several batches each) is the one
    built without it and then stamped by engine.batch.set_producers, byte for byte."""
    body = orjson.dumps(
        {"records": [{"value": "v" * 40, "partition": i % 3, "key": str(i)} for i in range(60)]}
    )
    args = (body, 3, None, lambda: 0, 600, int(NOW * 1000), False)
    assert _producejson.json_batches(*args, None) == _producejson.json_batches(*args)
    plain = _producejson.json_batches(*args)
    built = _producejson.json_batches(*args, (2**40 + 7, 3))
    assert plain is not None and built is not None
    assert [(p, n) for p, _, n in built] == [(p, n) for p, _, n in plain]
    for (_, data, _), (_, stamped, _) in zip(plain, built, strict=True):
        headers = fmt.scan(data).headers
        assert len(headers) > 1
        for pos, header in headers:
            fmt.set_producer(data, pos, header, 2**40 + 7, 3)
        assert stamped == data
        assert fmt.scan(stamped).headers  # every CRC holds


class _InTransaction:
    """A produce's transaction whose producer this node knows (`front.InTransaction`)."""

    def __init__(self, producer: ProducerIdentity | None) -> None:
        self.producer = producer

    async def __call__(self, partitions: list[int]) -> ProducerIdentity:
        raise AssertionError("building adds no partition")


def test_a_produce_in_a_known_transaction_is_built_stamped() -> None:
    """Producer._build hands the transaction's producer to the C path, so the batches need no
    stamping (and no second CRC) when they are written; unknown, they are built plain."""
    config = TopicConfig()
    unused: Any = None
    producer = produce.Producer(cast(Any, _Replicas(config)), unused, unused, unused)
    spec = cast(Any, types.SimpleNamespace(name="t", partitions=2))
    body = b'{"records": [{"value": 1, "partition": 0}, {"value": 2, "partition": 1}]}'
    for writer in (ProducerIdentity(41, 2), None):
        request = produce.ProduceRequest(
            "t", None, Acks.LEADER, 1000, codecs.JSON, body, None, None, "/"
        )
        request.transaction = _InTransaction(writer)
        built = producer._build(spec, request, None, None)
        for item in built:
            ((_, header),) = fmt.scan(item.data).headers
            got = (header.producer_id, header.producer_epoch)
            if writer is None:
                assert got == (-1, -1) and not header.attributes & fmt.TRANSACTIONAL_MASK
            else:
                assert got == (41, 2) and header.attributes & fmt.TRANSACTIONAL_MASK


def test_a_bad_producer_is_refused() -> None:
    body = b'{"records": [{}]}'
    for producer, error in (
        ((-1, 0), ValueError),
        ((1, 2**15), ValueError),
        ((1, -1), ValueError),
        ((1,), TypeError),
        ([1, 2], TypeError),
        (("1", 2), TypeError),
    ):
        with pytest.raises(error):
            _producejson.json_batches(body, 2, None, lambda: 0, 1000, 0, False, producer)
    with pytest.raises(TypeError):
        _producejson.json_batches(body, 2, None, lambda: 0, 1000, 0, False, None, None)


def _refuse() -> int:
    raise RuntimeError("no")


def test_under_sanitizers(tmp_path: Path) -> None:
    """This file's tests again, against gateway/formats/_producejson.c built with ASan and UBSan
    (and the portable CRC-32C): every access checked, any undefined behaviour fatal."""
    sanitizers.check_tests(__file__, "_producejson", tmp_path)
