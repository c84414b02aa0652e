"""Types of the C check of produced batches (gateway/_batchcheck.c)."""

def records_well_formed(batch: bytes | bytearray | memoryview, /) -> bool:
    """Whether one whole uncompressed batch's records all read at deltas 0..count-1; False:
    decode it in Python."""

def wire_schema_ids(
    batch: bytes | bytearray | memoryview, key: bool, /
) -> tuple[int, tuple[int, ...]] | None:
    """The schema ids of one uncompressed batch's keys or values in the wire format: (-1, ids),
    or (index of the first not framed, ids before it); None: walk it in Python."""
