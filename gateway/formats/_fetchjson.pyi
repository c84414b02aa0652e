"""Types of the C part of the fetch path (gateway/_fetchjson.c)."""

import msgspec

def batch_json(
    batch: memoryview,
    start: int,
    limit: int,
    prefix: bytes,
    raw: type[msgspec.Raw],
    shape: int = 0,
    /,
) -> tuple[list[msgspec.Raw], int] | None:
    """One plain batch's records as JSON at offsets >= start, in `shape` (0: Sluice's /v1, 1: REST
    Proxy v2's json format, 2: its binary format); None: decode in Python."""
