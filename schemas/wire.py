"""Confluent's wire format: magic byte 0, the schema id as 4 bytes big-endian, then the
payload; for Protobuf the payload starts with the message-index path of the record's message."""

from __future__ import annotations

import struct

from schemas.errors import InvalidValue

MAGIC = 0
HEADER = struct.Struct(">bI")
MAX_MESSAGE_INDEXES = 64


def frame(schema_id: int, payload: bytes) -> bytes:
    """The record's bytes for `payload` written with the schema `schema_id`."""
    return HEADER.pack(MAGIC, schema_id) + payload


def unframe(data: bytes) -> tuple[int, bytes]:
    """The schema id and payload of a record's bytes; InvalidValue if it has no header."""
    if len(data) < HEADER.size:
        raise InvalidValue(
            f"{len(data)} bytes is shorter than the wire format's {HEADER.size}-byte header"
        )
    magic, schema_id = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise InvalidValue(f"unknown magic byte {magic} (the wire format's is {MAGIC})")
    return schema_id, data[HEADER.size :]


def _zigzag_varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _read_zigzag_varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data):
            raise InvalidValue("the Protobuf message indexes are truncated")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift > 63:
            raise InvalidValue("a Protobuf message index is longer than a 64-bit varint")


def message_indexes(indexes: list[int]) -> bytes:
    """The message-index prefix for the message at `indexes` (top-level index, then nested
    indexes): zigzag varints, count first; the first top-level message is a single 0 byte,
    as confluent-kafka's ProtobufSerializer writes it."""
    if indexes == [0]:
        return b"\x00"
    return _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(i) for i in indexes)


def read_message_indexes(payload: bytes) -> tuple[list[int], bytes]:
    """The message-index path at the start of a Protobuf payload, and the message's bytes."""
    count, position = _read_zigzag_varint(payload, 0)
    if count == 0:
        return [0], payload[position:]
    if not 0 < count <= MAX_MESSAGE_INDEXES:
        raise InvalidValue(f"{count} Protobuf message indexes is not a message path")
    indexes = []
    for _ in range(count):
        index, position = _read_zigzag_varint(payload, position)
        if index < 0:
            raise InvalidValue(f"negative Protobuf message index {index}")
        indexes.append(index)
    return indexes, payload[position:]
