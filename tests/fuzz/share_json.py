"""Fuzz target: a share group's acquired records written from their batch in C (`share_json` in
gateway/formats/_fetchjson.c) are byte for byte what the Python path writes (each record
decoded and encoded by itself), or the same error, for stretches of records of batches as a log
holds them; and the C path never crashes on any bytes at all.

The first byte chooses: even, batches built from the input (fetch_json's shapes); odd, the
input itself, handed to the C path as it is and framed as one batch for the comparison.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import atheris

from engine import batch as fmt
from gateway.formats import native as c_paths
from gateway.formats.share_records import deliveries_json
from groups.share.model import Delivery, stretches
from tests.fuzz import fetch_json
from tests.fuzz.c_paths import both_ways
from tests.fuzz.fetch_json import built_batches, framed

assert c_paths.share_json is not c_paths.declines, "gateway.formats._fetchjson is not built"
share_json = c_paths.share_json


def answer(taken: list[Delivery]) -> Any:
    try:
        return deliveries_json(taken, b",")
    except Exception as exc:
        return ("error", type(exc), str(exc))


def compare(taken: list[Delivery]) -> None:
    native, python = both_ways("share_json", c_paths.declines, lambda: answer(taken))
    assert native == python, (native, python)


def deliveries(fdp: atheris.FuzzedDataProvider, data: bytes) -> list[Delivery]:
    """Stretches of the batches' records from a start offset on, each taken whole or in part,
    as an acquire takes them."""
    view = memoryview(data)
    scanned = fmt.scan(view, check_crc=False).headers
    if not scanned:
        return []
    first_offset, end = scanned[0][1].base_offset, scanned[-1][1].last_offset + 1
    start = fdp.ConsumeIntInRange(first_offset, max(first_offset, end))
    topic = fdp.PickValueInList(["t", 'q"\\', "é-1"])
    out = []
    try:
        found = stretches(view, scanned, start)
    except Exception:  # damaged records: the acquire's read refuses them before any JSON
        return []
    for s in found:
        first = fdp.ConsumeIntInRange(s.first, s.last)
        last = fdp.ConsumeIntInRange(first, s.last)
        count = fdp.ConsumeIntInRange(1, 10)
        deadline = fdp.ConsumeIntInRange(0, 2**50)
        out.append(Delivery(topic, fdp.ConsumeIntInRange(0, 99), s.batch, first, last, count,
                            deadline, 0))  # fmt: skip
    return out


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeIntInRange(0, 255) & 1:
        first = fdp.ConsumeIntInRange(-2, 2**62)
        count = fdp.ConsumeIntInRange(1, 20)
        blob = fdp.ConsumeBytes(atheris.ALL_REMAINING)
        parts = share_json(memoryview(blob), first, count, b'{"p":0,', b',"t":"', b'"}')
        assert parts is None or all(isinstance(p, bytes) for p in parts)
        batches = framed(blob)
    else:
        batches = built_batches(fdp)
    compare(deliveries(fdp, batches))


def seeds() -> Iterator[bytes]:
    """fetch_json's: the same first byte chooses between built batches and arbitrary bytes."""
    yield from fetch_json.seeds()
