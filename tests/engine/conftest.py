"""Shared fixtures for engine tests: a controllable clock and small-log builders."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from engine import batch as fmt
from engine.config import TopicConfig
from engine.log import PartitionLog


class FakeClock:
    """A clock tests move by hand, in milliseconds, for time-based rules."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


LogFactory = Callable[..., PartitionLog]


@pytest.fixture
def make_log(tmp_path: Path, clock: FakeClock) -> LogFactory:
    """Open (or reopen) the partition log `t-0` under tmp_path with Kafka-named overrides."""

    def make(configs: dict[str, object] | None = None, **kwargs: object) -> PartitionLog:
        config = TopicConfig().with_overrides(configs or {})
        return PartitionLog(tmp_path / "t-0", "t", 0, config, clock=clock, **kwargs)  # type: ignore[arg-type]

    return make


def batch_of(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    timestamp: int | None = 1_700_000_000_000,
    compression: int = 0,
) -> bytearray:
    """Encode one batch of the given values (and keys), all at `timestamp`."""
    keys = keys if keys is not None else [None] * len(values)
    return fmt.encode_batch(
        [fmt.RecordInput(k, v, [], timestamp) for k, v in zip(keys, values, strict=True)],
        compression=compression,
    )


def read_all(log: PartitionLog, start: int | None = None) -> list[fmt.Record]:
    """Every committed record from `start` (default: the log start) to the high watermark."""
    offset = log.log_start_offset if start is None else start
    out: list[fmt.Record] = []
    while offset < log.high_watermark:
        data = log.read(offset, 64 * 1024).data
        if not data:
            break
        for record in fmt.iter_records(data):
            if record.offset >= offset:
                out.append(record)
        offset = fmt.read_header(data, _last_batch_position(data)).next_offset
    return out


def _last_batch_position(data: memoryview) -> int:
    return fmt.scan(data, check_crc=False).headers[-1][0]
