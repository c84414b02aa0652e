"""Leader-epoch cache: KIP-101/279 lookups, truncation and persistence."""

from __future__ import annotations

from pathlib import Path

from engine.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET, EpochEntry, LeaderEpochCache


def cache_with(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_end_offset_of_largest_epoch_at_or_below(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (3, 10), (6, 25))
    assert cache.end_offset_for(0, 40) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert cache.end_offset_for(1, 40) == (1, 10)
    assert cache.end_offset_for(2, 40) == (1, 10)
    assert cache.end_offset_for(3, 40) == (3, 25)
    assert cache.end_offset_for(5, 40) == (3, 25)
    assert cache.end_offset_for(6, 40) == (6, 40)
    assert cache.end_offset_for(9, 40) == (6, 40)


def test_assign_keeps_the_latest_epoch_and_persists(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 0), (2, 5), (4, 12))
    assert cache.entries == [EpochEntry(2, 0), EpochEntry(4, 12)]
    assert LeaderEpochCache(cache.path).entries == cache.entries
    assert cache.epoch_for_offset(11) == 2 and cache.epoch_for_offset(12) == 4


def test_an_older_epoch_replaces_the_newer_entries_it_conflicts_with(tmp_path: Path) -> None:
    """Kafka's rule: a demoted leader's epoch 5, begun at 10 with nothing written, must go
    when the new leader's epoch-4 records arrive from offset 10."""
    cache = cache_with(tmp_path, (3, 0), (5, 10), (4, 10))
    assert cache.entries == [EpochEntry(3, 0), EpochEntry(4, 10)]


def test_assign_drops_entries_at_or_after_the_new_start(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (2, 10), (3, 8))
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(3, 8)]


def test_truncate_from_end_and_start(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (2, 10), (3, 20))
    cache.truncate_from_end(20)
    assert cache.latest_epoch == 2
    cache.truncate_from_start(15)
    assert cache.entries == [EpochEntry(2, 15)]
    cache.truncate_from_start(15)
    assert cache.entries == [EpochEntry(2, 15)]


def test_corrupt_checkpoint_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n2\n1 0\n")
    assert LeaderEpochCache(path).entries == []
