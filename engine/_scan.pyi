"""Types of the C walk over record batches and its producer stamping (engine/_scan.c)."""

from typing import Any

def scan(
    buf: bytes | bytearray | memoryview, check_crc: bool, header_type: type, /
) -> tuple[list[tuple[int, Any]], int, str | None, int]:
    """engine.batch.scan's walk: (position, header) of each valid batch, where it stopped, why
    (None at the end) and the bytes a batch cut by the buffer's end needs from its start."""

def stamp_producer(
    buf: bytearray | memoryview,
    start: int,
    end: int,
    producer_id: int,
    producer_epoch: int,
    header_type: type,
    /,
) -> list[tuple[int, Any]]:
    """engine.batch.set_producer over each batch of buf[start:end]: their (position, header)."""
