"""Fuzz target: a JSON produce body either becomes records whose values a fetch can embed as
they are, or is refused 400; nothing else may escape codecs.parse_json_records."""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from gateway.formats import codecs
from gateway.http.problem import Problem


def one_input(data: bytes) -> None:
    try:
        parsed = codecs.parse_json_records(data)
    except Problem as problem:
        assert problem.status == 400, (problem.status, problem.code)
        return
    assert parsed.records
    if parsed.partitions is not None:
        assert len(parsed.partitions) == len(parsed.records)
    for index, (key, value, headers, timestamp) in enumerate(parsed.records):
        assert key is None or isinstance(key, bytes)
        assert timestamp is None or 0 <= timestamp < 2**63
        assert all(isinstance(k, str) and (v is None or isinstance(v, bytes)) for k, v in headers)
        if value is not None and index not in parsed.not_json:
            orjson.loads(value)  # stored as JSON text: a fetch embeds it without parsing


def seeds() -> Iterator[bytes]:
    yield b'{"records": [{"key": "alice", "value": {"item": "book", "qty": 1}}]}'
    yield (
        b'{"records": [{"key": "a", "value": [1, 2.5, -3e10, true, null, "\\u00e9\\n"],'
        b' "headers": {"h": "v", "n": null}, "partition": 1, "timestamp": 1700000000000},'
        b' {"value": "aGVsbG8=", "value_encoding": "base64", "key": "a2V5",'
        b' "key_encoding": "base64"}]}'
    )
    yield b'{"records": [{"value": {"a": {"b": {"c": [[[]]]}}}}, {"partition": 0}]}'
    yield b'{"records": []}'
