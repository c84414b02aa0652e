"""The per-partition idempotency index: markers indexed on every replica, forgotten by
truncation, bounded in time and size."""

from __future__ import annotations

import time

from engine import batch as fmt
from replication.idempotency import IdempotencyIndex, Marker, first_marker, parse_marker


def marked(marker: Marker, values: list[bytes], base_offset: int = 0) -> bytearray:
    """A request's batches as the produce front builds them, at `base_offset`."""
    records: list[fmt.RecordTuple] = [
        (None, v, [(fmt.IDEMPOTENCY_HEADER, marker.encode())] if i == 0 else [], None)
        for i, v in enumerate(values)
    ]
    data = fmt.encode_batches(
        records, max_batch_bytes=1 << 20, extra_attributes=fmt.IDEMPOTENT_MASK
    )
    fmt.set_base_offset(data, 0, base_offset)
    return data


def now_ms() -> int:
    return int(time.time() * 1000)


def test_a_marker_round_trips_and_garbage_is_none() -> None:
    marker = Marker("k", "d" * 64, 2, 3, now_ms())
    assert parse_marker(marker.encode()) == marker
    assert parse_marker(b"only\ntwo") is None
    assert parse_marker(b"\xff\xfe") is None
    assert first_marker(marked(marker, [b"a", b"b", b"c"])) == marker
    plain = fmt.encode_batches([(None, b"a", [], None)], max_batch_bytes=1 << 20)
    assert first_marker(plain) is None


def test_follower_appends_are_indexed_and_truncation_forgets_them() -> None:
    index = IdempotencyIndex(3600, 100)
    early, late = Marker("early", "x", 1, 2, now_ms()), Marker("late", "y", 1, 1, now_ms())
    index.note_batches(marked(early, [b"a", b"b"], base_offset=10))
    index.note_batches(marked(late, [b"c"], base_offset=12))
    found = index.lookup("early")
    assert found is not None and found.base_offset == 10 and found.count == 2
    index.truncate(12)  # a new leader's log ends at 12: "late" was never committed
    assert index.lookup("late") is None
    assert index.lookup("early") is not None


def test_the_window_and_the_size_bound_the_index() -> None:
    index = IdempotencyIndex(60, 2)
    index.note(Marker("old", "d", 1, 1, now_ms() - 120_000), 0)
    assert index.lookup("old") is None
    for i, key in enumerate(("a", "b", "c")):
        index.note(Marker(key, "d", 1, 1, now_ms()), i)
    assert len(index) == 2 and index.lookup("a") is None and index.lookup("c") is not None
