"""Types of the C check of produced batches (gateway/_batchcheck.c)."""

def records_well_formed(batch: bytes | bytearray | memoryview, /) -> bool:
    """Whether one whole uncompressed batch's records all read at deltas 0..count-1; False:
    decode it in Python."""
