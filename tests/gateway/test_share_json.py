"""A share group's deliveries as JSON: the C path (`share_json` in gateway/formats/_fetchjson.c)
against the Python path it stands in for (each record decoded and encoded by itself).

For any batches, well formed or damaged, and any stretch of consecutive records in them, an
acquire's answer must be exactly what it is without the extension: the same bytes, or the same
error.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import batch as fmt
from gateway.formats import native as c_paths
from gateway.formats.share_records import deliveries_json
from groups.share.model import Delivery, stretches
from tests.gateway.test_fetchjson import batch, logs, plain_batch
from tests.hypothesis_runs import deterministic

_fetchjson = pytest.importorskip("gateway.formats._fetchjson")

SETTINGS = deterministic(300)
PREFIX = b'{"topic":"t","partition":0,'
MIDDLE = b',"delivery_count":2,"lock_expires_at":99,"token":"t:0:'
TAIL = b':2"}'


def deliveries(data: bytes, picks: st.DataObject) -> list[Delivery]:
    """Deliveries of stretches of the batches' records (from a start offset on), as an
    acquire takes them: whole, or some records from anywhere in one."""
    view = memoryview(data)
    scanned = fmt.scan(view, check_crc=False).headers
    start = picks.draw(st.integers(scanned[0][1].base_offset, scanned[-1][1].last_offset + 1))
    out = []
    topic = picks.draw(st.sampled_from(["t", 'q"\\', "é-1"]))
    for s in stretches(view, scanned, start):
        first = picks.draw(st.integers(s.first, s.last))
        last = picks.draw(st.integers(first, s.last))
        count = picks.draw(st.integers(1, 10))
        deadline = picks.draw(st.integers(0, 2**50))
        out.append(Delivery(topic, 7, s.batch, first, last, count, deadline, 0))
    return out


def answer(taken: list[Delivery]) -> Any:
    try:
        return deliveries_json(taken, b",")
    except Exception as exc:
        return ("error", type(exc), str(exc))


def both_paths(taken: list[Delivery]) -> tuple[Any, Any]:
    native = answer(taken)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(c_paths, "share_json", c_paths.declines)
        python = answer(taken)
    return native, python


@SETTINGS
@given(data=logs(), picks=st.data())
def test_same_answer_as_python_path(data: bytes, picks: st.DataObject) -> None:
    taken = deliveries(data, picks)
    native, python = both_paths(taken)
    assert native == python
    if taken and not isinstance(native, tuple):
        docs = orjson.loads(b"[" + native + b"]")
        assert [d["offset"] for d in docs] == [
            offset for d in taken for offset in range(d.first, d.last + 1)
        ]
        assert all(
            d["token"] == f"{d['topic']}:7:{d['offset']}:{d['delivery_count']}" for d in docs
        )


@SETTINGS
@given(built=batch(0), damage=st.data())
def test_damaged_batches_get_the_python_answer(built: bytearray, damage: st.DataObject) -> None:
    """A delivery's batch damaged past its header (as the fetch path's test damages them):
    never a crash, never an answer other than the Python path's."""
    count = fmt.read_header(built).record_count
    for _ in range(damage.draw(st.integers(1, 3))):
        last = len(built) - 1
        if last < 61:
            break
        at = damage.draw(st.integers(61, last) | st.integers(57, 60))
        how = damage.draw(st.sampled_from(["set", "nudge", "cut"]))
        if how == "set":
            built[at] = damage.draw(st.integers(0, 255))
        elif how == "nudge":
            built[at] = (built[at] + damage.draw(st.sampled_from([1, -1]))) % 256
        else:
            del built[at:]
    first = damage.draw(st.integers(0, max(0, count - 1)))
    last = damage.draw(st.integers(first, first + 3))
    taken = [Delivery("t", 0, memoryview(bytes(built)), first, last, 1, 5, 0)]
    native, python = both_paths(taken)
    assert native == python


def test_a_plain_batch_takes_the_c_path_from_anywhere_in_it() -> None:
    view = memoryview(bytes(plain_batch(1000, base_offset=4000)))
    parts = _fetchjson.share_json(view, 4998, 2, PREFIX, MIDDLE, TAIL)
    assert parts == [
        b'{"topic":"t","partition":0,"offset":4998,"timestamp":1700000000000,"key":"k998",'
        b'"value":998,"headers":{},"delivery_count":2,"lock_expires_at":99,"token":"t:0:4998:2"}',
        b'{"topic":"t","partition":0,"offset":4999,"timestamp":1700000000000,"key":"k999",'
        b'"value":999,"headers":{},"delivery_count":2,"lock_expires_at":99,"token":"t:0:4999:2"}',
    ]
    assert _fetchjson.share_json(view, 4998, 3, PREFIX, MIDDLE, TAIL) is None  # past its end
    assert _fetchjson.share_json(view, 3998, 1, PREFIX, MIDDLE, TAIL) is None  # before it


def test_other_batches_are_left_to_python() -> None:
    with_headers = fmt.encode_batches(
        [(b"k", b"1", [("h", b"v")], None)], max_batch_bytes=2**20, values_json=True
    )
    not_json = fmt.encode_batch([fmt.RecordInput(b"k", b"1")])
    for built in (not_json, with_headers):
        assert _fetchjson.share_json(memoryview(bytes(built)), 0, 1, PREFIX, MIDDLE, TAIL) is None
    with pytest.raises(TypeError):
        _fetchjson.share_json(memoryview(bytes(not_json)), 0, 1, PREFIX, "m", TAIL)


@SETTINGS
@given(
    blob=st.binary(min_size=0, max_size=200),
    first=st.integers(-(2**63), 2**63 - 1),
    count=st.integers(-1, 10),
)
def test_arbitrary_bytes_never_crash(blob: bytes, first: int, count: int) -> None:
    result = _fetchjson.share_json(memoryview(blob), first, count, PREFIX, MIDDLE, TAIL)
    assert result is None or isinstance(result, list)
