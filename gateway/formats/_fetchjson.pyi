"""Types of the C part of the fetch path (gateway/_fetchjson.c)."""

import msgspec

def batch_json(
    batch: memoryview, start: int, limit: int, prefix: bytes, raw: type[msgspec.Raw], /
) -> tuple[list[msgspec.Raw], int] | None:
    """One plain JSON batch's records as JSON at offsets >= start; None: decode in Python."""
