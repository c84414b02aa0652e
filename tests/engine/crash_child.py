"""Crash-test child: append batches to a partition log until killed, acknowledging each one.

Run from the repository root as::

    python -m tests.engine.crash_child DATA_DIR SEED EPOCH [--flush]

It opens a LogManager on DATA_DIR (creating the topic if absent), prints ``ready <log end>``,
then appends forever. After each ``append_as_leader`` call returns (and, with ``--flush``, after
the fsync that flush.messages=1 asks for) it prints one line per batch of that call::

    ack <base offset> <last offset> <sha256 of the batch bytes as stored>

The hash is taken from the caller's buffer, which the engine stamps in place. The parent reads
these lines and SIGKILLs the child at a moment of its choosing.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys

from engine.batch import COMPRESSION_CODECS, RecordInput, encode_batch, read_header
from engine.log import PartitionLog
from engine.manager import LogManager

TOPIC = "crash"
CODECS = (0, 0, *COMPRESSION_CODECS.values())  # uncompressed twice as often as each codec
SEGMENT_BYTES = (16 * 1024, 64 * 1024, 256 * 1024)
INDEX_INTERVAL_BYTES = (0, 1024, 4096)
CHECKPOINT_EVERY = 8  # appends between checkpoint writes in --flush mode


def random_record(rng: random.Random) -> RecordInput:
    """A record with an optional key, a random or compressible value and sometimes a header."""
    key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 16))
    size = rng.randint(0, 64)
    if rng.random() < 0.05:
        value = None
    elif rng.random() < 0.5:
        value = rng.randbytes(size)
    else:
        value = b"sluice" * (size // 6)
    headers: list[tuple[str, bytes | None]] = []
    if rng.random() < 0.1:
        headers.append(("trace", rng.randbytes(8)))
    return RecordInput(key, value, headers)


def random_batches(rng: random.Random) -> bytearray:
    """One to three batches of 1..200 records, each with a random compression codec."""
    data = bytearray()
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        records = [random_record(rng) for _ in range(rng.randint(1, 200))]
        data += encode_batch(records, compression=rng.choice(CODECS))
    return data


def ack_lines(data: bytearray) -> str:
    """The acknowledgement lines for every (stamped) batch in `data`."""
    lines = []
    pos = 0
    while pos < len(data):
        header = read_header(data, pos)
        digest = hashlib.sha256(data[pos : pos + header.size]).hexdigest()
        lines.append(f"ack {header.base_offset} {header.last_offset} {digest}\n")
        pos += header.size
    return "".join(lines)


def open_log(manager: LogManager, rng: random.Random, flush: bool) -> PartitionLog:
    """The test partition, with a segment size and index interval chosen for this run."""
    configs: dict[str, object] = {
        "segment.bytes": rng.choice(SEGMENT_BYTES),
        "index.interval.bytes": rng.choice(INDEX_INTERVAL_BYTES),
    }
    if flush:
        configs["flush.messages"] = 1
    if TOPIC in manager.topics:
        manager.alter_topic_configs(TOPIC, configs)
    else:
        manager.create_topic(TOPIC, 1, configs)
    return manager.log(TOPIC, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("data_dir")
    parser.add_argument("seed", type=int)
    parser.add_argument("epoch", type=int)
    parser.add_argument("--flush", action="store_true", help="fsync whenever the policy says")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    manager = LogManager(args.data_dir)
    log = open_log(manager, rng, args.flush)
    out = sys.stdout
    out.write(f"ready {log.log_end_offset}\n")
    out.flush()
    appends = 0
    while True:
        data = random_batches(rng)
        info = log.append_as_leader(data, args.epoch)
        appends += 1
        if args.flush and info.flush_due:
            log.flush()
            if appends % CHECKPOINT_EVERY == 0:
                manager.write_checkpoints()
        out.write(ack_lines(data))
        out.flush()


if __name__ == "__main__":
    main()
