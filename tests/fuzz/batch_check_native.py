"""Fuzz target: the C check of produced batches (gateway/formats/_batchcheck.c) changes nothing a
binary produce is answered: codecs.validate_record_batches gives the same bytes, or the same
problem, with it as without it; and no bytes crash it.

An input whose first byte is odd has its batches' CRCs fixed up first (batch_validator's way),
so mutations reach the records.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gateway.formats import codecs
from gateway.formats import native as c_paths
from gateway.http.problem import Problem
from tests.fuzz import batch_validator
from tests.fuzz.c_paths import both_ways


def answer(body: bytes) -> Any:
    try:
        return bytes(codecs.validate_record_batches(body))
    except Problem as problem:
        return (problem.status, problem.code, problem.detail)


def both_paths(body: bytes) -> Any:
    """The answer to `body`, the same with the C check as without it."""
    built = c_paths.records_well_formed is not c_paths.cannot_say
    assert built, "gateway.formats._batchcheck is not built"
    native, python = both_ways("records_well_formed", c_paths.cannot_say, lambda: answer(body))
    assert native == python, (native, python)
    return native


def one_input(data: bytes) -> None:
    both_paths(batch_validator.fix_crcs(data[1:]) if data[:1] and data[0] & 1 else data[1:])
    c_paths.records_well_formed(memoryview(data))


def seeds() -> Iterator[bytes]:
    yield from batch_validator.seeds()
