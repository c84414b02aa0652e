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
    producer: tuple[int, int] | None = None,
    /,
) -> list[tuple[int, bytearray, int]] | None:
    """A JSON produce body's batches per partition (with `producer`, stamped as the
    transaction's, as engine.batch.set_producers does); None: take the Python path."""

def v2_json_batches(
    body: bytes,
    partitions: int,
    url_partition: int | None,
    keyless: Callable[[], int],
    max_batch_bytes: int,
    now: int,
    compact: bool,
    /,
) -> tuple[list[tuple[int, bytearray, int]], bytes] | None:
    """json_batches for a REST Proxy v2 json-format body (keys are JSON values, stored as their
    compact text), with each record's partition (native uint32s, request order); None: take
    the general path."""

def v2_offsets(owners: bytes, bases: dict[int, int], /) -> bytes | None:
    """REST Proxy v2's produce answer from each record's partition and the partitions' base
    offsets; None if a partition has none."""
