"""Reading beside the leader (replication.sibling_replicas): another worker's files answer a
fetch only while their process leads the partition in the epoch the reader's view names. A
restarted worker reopens its log at its last checkpointed high watermark, behind what it had
acknowledged: until it leads again, the fetch goes to it (which waits to lead) rather than
reading an empty log below records already acknowledged."""

from __future__ import annotations

from pathlib import Path

from engine import batch as fmt
from engine.config import TopicConfig
from engine.log import PartitionLog, ReadResult
from replication.acks import Acks
from replication.idempotency import IdempotencyIndex
from replication.metadata import PartitionState
from replication.partition import Partition
from replication.sibling_replicas import SiblingReplicas

EPOCH = 3


def open_leader(data_dir: Path, high_watermark: int = 0) -> Partition:
    """Node 1's replica of t-0, its log publishing its watermarks (as under --workers)."""
    log = PartitionLog(
        data_dir / "t-0", "t", 0, TopicConfig(), high_watermark=high_watermark,
        publish_watermarks=True,
    )  # fmt: skip
    return Partition(log, 1, IdempotencyIndex(60, 100))


def one(value: bytes) -> bytearray:
    return fmt.encode_batches([(None, value, [], None)], max_batch_bytes=1 << 20)


def values(read: tuple[int, ReadResult] | None) -> list[bytes | None] | None:
    return None if read is None else [r.value for r in fmt.iter_records(read[1].data)]


def test_only_the_leader_in_the_viewed_epoch_is_read_beside(tmp_path: Path) -> None:
    siblings = SiblingReplicas({1: tmp_path})
    leader = open_leader(tmp_path)
    leader.make_leader(PartitionState(1, EPOCH, (1,), (1,)))
    leader.append(one(b"a"), Acks.LEADER)
    leader.append(one(b"b"), Acks.ALL)
    assert values(siblings.read(1, EPOCH, "t", 0, 0, 1 << 20, None)) == [b"a", b"b"]
    # A view of another epoch (older or newer than the writer's) reads nothing here.
    assert siblings.read(1, EPOCH - 1, "t", 0, 0, 1 << 20, None) is None
    assert siblings.read(1, EPOCH + 1, "t", 0, 0, 1 << 20, None) is None

    # SIGKILLed: the file keeps what the dead leader published, which was committed.
    assert values(siblings.read(1, EPOCH, "t", 0, 0, 1 << 20, None)) == [b"a", b"b"]

    # Restarted with the high watermark of a checkpoint taken before the appends: it does not
    # lead yet (KIP-841: it waits for the controller), and its high watermark lags.
    restarted = open_leader(tmp_path, high_watermark=0)
    assert restarted.log.high_watermark == 0
    assert siblings.read(1, EPOCH, "t", 0, 0, 1 << 20, None) is None
    assert siblings.read(1, EPOCH, "t", 0, "latest", 1 << 20, None) is None

    restarted.make_leader(PartitionState(1, EPOCH + 1, (1,), (1,)))
    assert values(siblings.read(1, EPOCH + 1, "t", 0, 0, 1 << 20, None)) == [b"a", b"b"]

    restarted.make_follower(PartitionState(2, EPOCH + 2, (1, 2), (1, 2)))
    assert siblings.read(1, EPOCH + 1, "t", 0, 0, 1 << 20, None) is None
    restarted.log.close()
    leader.log.close()
