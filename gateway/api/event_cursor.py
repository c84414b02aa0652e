"""An event stream's cursor, its events' `id`: every partition's next offset as
`PARTITION-OFFSET` pairs joined by '.', ascending partitions (`0-17.1-4`). EventSource sends the
last one back as `Last-Event-ID` when it reconnects."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.http.problem import bad_request


def format_cursor(positions: Mapping[int, int]) -> str:
    """The cursor of these partitions' next offsets."""
    return ".".join(f"{p}-{o}" for p, o in sorted(positions.items()))


def parse_cursor(raw: str, partitions: int) -> dict[int, int]:
    """A cursor's positions; 400 INVALID_CURSOR for anything but partition-offset pairs of the
    topic's partitions."""
    out: dict[int, int] = {}
    for pair in raw.split("."):
        p, sep, o = pair.partition("-")
        if not (sep and _digits(p, 9) and _digits(o, 19)):
            raise bad_request(
                f"cursor {raw[:200]!r}: expected PARTITION-OFFSET pairs joined by '.'",
                "INVALID_CURSOR",
            )
        partition, offset = int(p), int(o)
        if partition >= partitions or partition in out:
            raise bad_request(
                f"cursor {raw[:200]!r}: partition {partition} is named twice or is not one of "
                f"the topic's 0..{partitions - 1}",
                "INVALID_CURSOR",
            )
        if offset >= 2**63:
            raise bad_request(
                f"cursor {raw[:200]!r}: offset {offset} is too large", "INVALID_CURSOR"
            )
        out[partition] = offset
    return out


def _digits(text: str, most: int) -> bool:
    return 0 < len(text) <= most and text.isascii() and text.isdigit()
