"""Fuzz target: an NDJSON produce body either becomes one record per JSON line, each a JSON
value a fetch can embed as it is, or is refused 400; nothing else may escape."""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from gateway.formats import codecs
from gateway.http.problem import Problem


def one_input(data: bytes) -> None:
    key = b"k" if data[:1] == b"k" else None
    try:
        records = codecs.parse_ndjson_records(data, key)
    except Problem as problem:
        assert problem.status == 400, (problem.status, problem.code)
        return
    assert records
    for record_key, value, headers, timestamp in records:
        assert record_key == key and headers == [] and timestamp is None
        assert value is not None
        orjson.loads(bytes(value))  # stored as JSON text: a fetch embeds it without parsing


def seeds() -> Iterator[bytes]:
    yield b'{"n": 1}\n{"n": 2}\n'
    yield b'"text"\n\n  [1, 2.5e3, null]  \r\n{"a": {"b": [true, false]}}'
    yield b'k1\n-0.5\n"\\u00e9\\ud83d\\ude00"\n'
    yield b"\n\n"
