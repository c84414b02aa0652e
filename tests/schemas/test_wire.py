"""Confluent's wire format and the Protobuf message-index prefix, checked against what
confluent-kafka's own serde writes and reads."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId

from schemas import wire
from schemas.types import InvalidValue


def test_frame_is_magic_byte_id_and_payload() -> None:
    assert wire.frame(258, b"xy") == b"\x00\x00\x00\x01\x02xy"
    assert wire.unframe(b"\x00\x00\x00\x01\x02xy") == (258, b"xy")
    assert wire.unframe(wire.frame(2**32 - 1, b"")) == (2**32 - 1, b"")


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x00\x01"])
def test_a_truncated_header_is_invalid(data: bytes) -> None:
    with pytest.raises(InvalidValue, match="shorter than the wire format"):
        wire.unframe(data)


def test_a_wrong_magic_byte_is_invalid() -> None:
    with pytest.raises(InvalidValue, match="magic byte 1"):
        wire.unframe(b"\x01\x00\x00\x00\x01payload")


@pytest.mark.parametrize("indexes", [[0], [1], [0, 0], [3, 1, 2], [200], [1, 70000]])
def test_message_indexes_as_confluent_kafka_writes_and_reads_them(indexes: list[int]) -> None:
    theirs = SchemaId("PROTOBUF", 1, None, indexes).id_to_bytes()[5:]
    assert wire.message_indexes(indexes) == theirs
    assert wire.read_message_indexes(theirs + b"rest") == (indexes, b"rest")
    parsed = SchemaId("PROTOBUF")
    parsed.from_bytes(io.BytesIO(wire.frame(1, wire.message_indexes(indexes))))
    assert parsed.message_indexes == indexes


def test_the_first_message_is_a_single_zero_byte() -> None:
    assert wire.message_indexes([0]) == b"\x00"
    assert wire.read_message_indexes(b"\x00\x08\x01") == ([0], b"\x08\x01")


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"", "truncated"),
        (b"\x80", "truncated"),
        (b"\x04\x02", "truncated"),
        (b"\x03", "not a message path"),
        (b"\xfe\x01", "not a message path"),
        (b"\x02\x01", "negative"),
        (b"\xff" * 11, "longer than a 64-bit varint"),
    ],
)
def test_malformed_message_indexes_are_invalid(payload: bytes, why: str) -> None:
    with pytest.raises(InvalidValue, match=why):
        wire.read_message_indexes(payload)


def test_the_wire_format_needs_nothing_of_the_schema_types() -> None:
    """The wire format imports no schema type, so the types (Protobuf's among them) may import
    it at their top without a cycle held apart by a lazy import."""
    probe = "import sys, schemas.wire; sys.exit('schemas.types' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0
