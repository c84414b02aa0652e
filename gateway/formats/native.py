"""The formats' C paths, each under one name: the extension's function where it was built,
else a stand-in that declines every input (None, or False: "cannot say"), which sends the
caller to its Python path, the reference that gives the same bytes and the errors. Callers
never ask whether C was built; a test swaps a name for its stand-in to compare the paths.

- `batch_json` (`_fetchjson.c`): whole batches to JSON records for a fetch answer;
- `share_json` (`_fetchjson.c`): a share group's delivery of a batch's records to JSON;
- `records_well_formed` (`_batchcheck.c`): a produced batch's records decode;
- `wire_schema_ids` (`_batchcheck.c`): the schema ids of a batch's keys or values;
- `json_batches`, `v2_json_batches`, `v2_offsets` (`_producejson.c`): a JSON produce body (or
  REST Proxy v2's) straight to batches, and v2's offsets answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JsonBatches = Callable[
    [bytes, int, int | None, Callable[[], int], int, int, bool, tuple[int, int] | None],
    list[tuple[int, bytearray, int]] | None,
]
V2JsonBatches = Callable[..., tuple[list[tuple[int, bytearray, int]], bytes] | None]


def declines(*args: Any) -> None:
    """The stand-in of a C path that answers None for what it does not cover: everything."""
    return None


def cannot_say(batch: memoryview) -> bool:
    """`records_well_formed`'s stand-in: it cannot vouch for any batch (Python decodes it)."""
    return False


batch_json: Callable[..., tuple[list[Any], int] | tuple[list[Any], int, int] | None]
share_json: Callable[[memoryview, int, int, bytes, bytes, bytes], list[bytes] | None]
records_well_formed: Callable[[memoryview], bool]
wire_schema_ids: Callable[[memoryview, bool], tuple[int, tuple[int, ...]] | None]
json_batches: JsonBatches
v2_json_batches: V2JsonBatches
v2_offsets: Callable[[bytes, dict[int, int]], bytes | None]

try:
    from gateway.formats._fetchjson import batch_json, share_json
except ImportError:  # built without a C compiler
    batch_json = share_json = declines
try:
    from gateway.formats._batchcheck import records_well_formed, wire_schema_ids
except ImportError:
    records_well_formed = cannot_say
    wire_schema_ids = declines
try:
    from gateway.formats._producejson import json_batches, v2_json_batches, v2_offsets
except ImportError:
    json_batches = v2_json_batches = v2_offsets = declines
