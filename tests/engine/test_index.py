"""Sparse offset and time indexes: lookups, persistence and sanity checks."""

from __future__ import annotations

from pathlib import Path

from engine.index import OffsetIndex, TimeIndex


def test_offset_lookup_is_floor(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 100)
    for offset, position in [(100, 0), (110, 4096), (125, 8192)]:
        index.append(offset, position)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(100) == (100, 0)
    assert index.lookup(124) == (110, 4096)
    assert index.lookup(10**9) == (125, 8192)


def test_persist_and_reload_relative_entries(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 100)
    index.append(100, 0)
    index.flush()
    index.append(150, 500)
    index.flush()
    assert path.stat().st_size == 16
    assert path.read_bytes()[8:12] == (50).to_bytes(4, "big")
    again = OffsetIndex(path, 100)
    assert again.load()
    assert list(again.keys) == [100, 150] and list(again.values) == [0, 500]


def test_load_rejects_odd_size_and_non_monotonic(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(b"\x00" * 7)
    assert not OffsetIndex(path, 0).load()
    path.write_bytes((5).to_bytes(4, "big") + (0).to_bytes(4, "big") + (1).to_bytes(4, "big") * 2)
    assert not OffsetIndex(path, 0).load()
    assert not OffsetIndex(tmp_path / "missing.index", 0).load()


def test_truncation_drops_entries_on_disk_too(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0)
    for i in range(5):
        index.append(i * 10, i * 100)
    index.flush()
    index.truncate_to_position(250)
    assert list(index.keys) == [0, 10, 20]
    assert (tmp_path / "0.index").stat().st_size == 3 * 8
    index.truncate_to_offset(10)
    assert list(index.keys) == [0]


def test_time_index_keeps_only_growing_timestamps(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex", 0)
    index.maybe_append(1000, 0)
    index.maybe_append(900, 5)
    index.maybe_append(2000, 10)
    assert list(index.keys) == [1000, 2000]
    assert index.lookup(500) is None
    assert index.lookup(1500) == 0
    assert index.lookup(2000) == 0
    assert index.lookup(2001) == 10
