"""The lost-unsynced-writes fault on real segment files: it keeps exactly the batches below the
recovery point the node checkpointed, and everything when the node fsynced it all."""

from __future__ import annotations

from pathlib import Path

from engine import batch as fmt
from engine.checkpoint import write_offsets
from tests.cluster.harness import read_replica_log
from tests.cluster.powercut import RECOVERY_POINTS, lose_unsynced

TOPIC = "t"


def write_segment(directory: Path, base: int, batches: int, per_batch: int) -> None:
    """`batches` batches of `per_batch` records from offset `base`, in one segment file."""
    directory.mkdir(parents=True, exist_ok=True)
    data = bytearray()
    for b in range(batches):
        first = base + b * per_batch
        records = [fmt.RecordInput(f"k{first + i}".encode(), b"v", [], 0) for i in range(per_batch)]
        data += fmt.encode_batch(records, base_offset=first)
    (directory / f"{base:020d}.log").write_bytes(bytes(data))


def offsets(data_dir: Path, partition: int) -> list[int]:
    return [r.offset for r in read_replica_log(data_dir, TOPIC, partition)]


def test_cuts_each_partition_at_its_recovery_point(tmp_path: Path) -> None:
    write_segment(tmp_path / f"{TOPIC}-0", 0, 3, 2)  # offsets 0-5
    write_segment(tmp_path / f"{TOPIC}-0", 6, 2, 2)  # offsets 6-9, a later segment
    write_segment(tmp_path / f"{TOPIC}-1", 0, 3, 2)
    write_offsets(tmp_path / RECOVERY_POINTS, {(TOPIC, 0): 4})  # p1: never fsynced
    cut = lose_unsynced(tmp_path, TOPIC, 3)
    assert offsets(tmp_path, 0) == [0, 1, 2, 3]
    assert offsets(tmp_path, 1) == []
    assert cut[0][0] == 4 and cut[0][1] > 0
    assert cut[1][0] == 0 and cut[1][1] > 0
    assert cut[2] == (0, 0)  # no replica here: nothing to cut


def test_keeps_a_fully_synced_log(tmp_path: Path) -> None:
    write_segment(tmp_path / f"{TOPIC}-0", 0, 3, 2)
    write_offsets(tmp_path / RECOVERY_POINTS, {(TOPIC, 0): 6})
    assert lose_unsynced(tmp_path, TOPIC, 1) == {0: (6, 0)}
    assert offsets(tmp_path, 0) == list(range(6))
