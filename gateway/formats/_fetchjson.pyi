"""Types of the C part of the fetch path (gateway/_fetchjson.c)."""

import msgspec

def batch_json(
    batch: memoryview,
    start: int,
    limit: int,
    prefix: bytes,
    raw: type[msgspec.Raw],
    shape: int = 0,
    budget: int = -1,
    first_free: bool = False,
    /,
) -> tuple[list[msgspec.Raw], int] | tuple[list[msgspec.Raw], int, int] | None:
    """One plain batch's records as JSON at offsets >= start, in `shape` (0: Sluice's /v1, 1: REST
    Proxy v2's json format, 2: its binary format); None: decode in Python. With a budget (>= 0)
    their key and value bytes stay within it (the first may pass it if first_free), and the
    bytes they took come third."""

def share_json(
    batch: memoryview, first: int, count: int, prefix: bytes, middle: bytes, tail: bytes, /
) -> list[bytes] | None:
    """`count` records of one plain batch from offset `first` on (consecutive offsets: a share
    group's delivery) as JSON, each opened with prefix and closed, after its headers, with
    middle, its offset and tail; None: decode in Python."""
