"""Types of the C part of the produce path (gateway/_producejson.c)."""

from collections.abc import Callable

def json_batches(
    body: bytes,
    partitions: int,
    url_partition: int | None,
    keyless: Callable[[], int],
    max_batch_bytes: int,
    now: int,
    compact: bool,
    /,
) -> list[tuple[int, bytearray, int]] | None:
    """A JSON produce body's batches per partition; None: take the Python path."""
