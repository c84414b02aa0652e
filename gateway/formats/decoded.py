"""Values decoded by the schema registry for readers that ask (`decode_values=schema` on a
fetch or an event stream, `"decode_values": "schema"` in a push subscription).

Each value that is not JSON text (those a fetch shows as base64) is read as Confluent's wire
format: decoded, its record's `value` becomes the JSON and `value_schema_id` names the schema;
otherwise it stays as it was and `value_schema_error` says why. JSON and null values are left
as they are. The request without the option never comes here.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import orjson

from gateway.http.problem import bad_request
from groups.subscriptions.state import SchemaValue
from schemas.decoding import Decoded, ValueDecoder

DECODINGS = ("none", "schema")


def decode_values(query: Mapping[str, str]) -> bool:
    """Whether the request asks for its values decoded (`decode_values=schema`)."""
    raw = query.get("decode_values", "none")
    if raw not in DECODINGS:
        raise bad_request(
            f"decode_values must be none or schema, got {raw[:200]!r}", "INVALID_PARAMETER"
        )
    return raw == "schema"


async def decoded_records(decoder: ValueDecoder, records: list[Any]) -> list[Any]:
    """Fetched records (codecs.fetched_records) with their binary values decoded, in place."""
    binary = [
        record
        for record in records
        if isinstance(record, dict) and record.get("value_encoding") == "base64"
    ]
    if not binary:
        return records
    results = await decoder.decode_all([base64.b64decode(r["value"]) for r in binary])
    for record, got in zip(binary, results, strict=True):
        if isinstance(got, Decoded):
            record["value"] = msgspec.Raw(got.json)
            del record["value_encoding"]
            record["value_schema_id"] = got.schema_id
        elif got is not None:
            record["value_schema_error"] = got.reason
    return records


class SubscriptionValues:
    """The decoding a push subscription's dispatchers use (groups.subscriptions.SchemaValues)."""

    def __init__(self, decoder: ValueDecoder) -> None:
        self.decoder = decoder

    async def values(self, values: Sequence[bytes | None]) -> list[SchemaValue | None]:
        binary = [None if value is None or _is_json(value) else value for value in values]
        out: list[SchemaValue | None] = []
        for got in await self.decoder.decode_all(binary):
            if got is None:
                out.append(None)
            elif isinstance(got, Decoded):
                out.append(SchemaValue(got.json, got.schema_id))
            else:
                out.append(SchemaValue(None, got.schema_id, got.reason))
        return out

    async def documents(self, records: list[Any]) -> list[Any]:
        return await decoded_records(self.decoder, records)


def _is_json(value: bytes) -> bool:
    """As a fetch decides whether to show a value as JSON or as base64."""
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return True
