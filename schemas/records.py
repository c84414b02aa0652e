"""The records of the registry's internal topic `_schemas`, keyed as Confluent's and Karapace's.

Compaction keeps the last record of each key: a subject's version (its schema, or a tombstone
once permanently deleted), the global or a subject's compatibility and mode, and the highest
id ever assigned (so that a compacted topic never gives an id again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from engine.internal_topics import SCHEMAS
from schemas.types import SCHEMA_TYPES, Reference, SchemaType

TOPIC = SCHEMAS
TOPIC_CONFIGS: dict[str, object] = {"cleanup.policy": "compact"}


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """A subject's version: which schema, and whether it is soft-deleted."""

    subject: str
    version: int
    schema_id: int
    schema_type: SchemaType
    text: str
    references: tuple[Reference, ...]
    deleted: bool


@dataclass(frozen=True, slots=True)
class VersionRemoved:
    """A version permanently deleted (a tombstone of its key)."""

    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class ConfigSet:
    """The compatibility level of a subject, or the global one (subject None); None: unset."""

    subject: str | None
    compatibility: str | None


@dataclass(frozen=True, slots=True)
class ModeSet:
    """The mode of a subject, or the global one (subject None); None: unset."""

    subject: str | None
    mode: str | None


@dataclass(frozen=True, slots=True)
class HighestId:
    """The highest schema id assigned so far."""

    schema_id: int


Record = SchemaVersion | VersionRemoved | ConfigSet | ModeSet | HighestId


def encode(record: Record) -> tuple[bytes, bytes | None]:
    """The record's key and value (None: a tombstone)."""
    match record:
        case SchemaVersion():
            value: dict[str, Any] = {
                "subject": record.subject,
                "version": record.version,
                "id": record.schema_id,
                "schema": record.text,
                "deleted": record.deleted,
            }
            if record.schema_type != "AVRO":
                value["schemaType"] = record.schema_type
            if record.references:
                value["references"] = [_reference(r) for r in record.references]
            return _schema_key(record.subject, record.version), orjson.dumps(value)
        case VersionRemoved():
            return _schema_key(record.subject, record.version), None
        case ConfigSet():
            key = _key("CONFIG", record.subject)
            if record.compatibility is None:
                return key, None
            return key, orjson.dumps({"compatibilityLevel": record.compatibility})
        case ModeSet():
            key = _key("MODE", record.subject)
            return key, None if record.mode is None else orjson.dumps({"mode": record.mode})
        case HighestId():
            return _key("SCHEMA_ID", None), orjson.dumps({"id": record.schema_id})


def decode(key: bytes | None, value: bytes | None) -> Record | None:
    """The record a key and value stand for; None for a kind this registry does not keep
    (Confluent's NOOP, for one). ValueError if the record is malformed."""
    doc = orjson.loads(key or b"null")
    if not isinstance(doc, dict):
        raise ValueError(f"a key that is not an object: {key!r}")
    body = None if value is None else orjson.loads(value)
    if body is not None and not isinstance(body, dict):
        raise ValueError(f"a value that is not an object: {value!r}")
    subject = doc.get("subject")
    match doc.get("keytype"):
        case "SCHEMA":
            if body is None:
                return VersionRemoved(str(subject), int(doc["version"]))
            schema_type = body.get("schemaType", "AVRO")
            if schema_type not in SCHEMA_TYPES:
                raise ValueError(f"unknown schema type {schema_type!r}")
            return SchemaVersion(
                subject=str(body["subject"]),
                version=int(body["version"]),
                schema_id=int(body["id"]),
                schema_type=schema_type,
                text=str(body["schema"]),
                references=tuple(
                    Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                    for r in body.get("references") or ()
                ),
                deleted=bool(body.get("deleted", False)),
            )
        case "CONFIG":
            level = None if body is None else str(body["compatibilityLevel"])
            return ConfigSet(None if subject is None else str(subject), level)
        case "MODE":
            mode = None if body is None else str(body["mode"])
            return ModeSet(None if subject is None else str(subject), mode)
        case "SCHEMA_ID":
            return None if body is None else HighestId(int(body["id"]))
        case _:
            return None


def _schema_key(subject: str, version: int) -> bytes:
    return orjson.dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def _key(keytype: str, subject: str | None) -> bytes:
    return orjson.dumps({"keytype": keytype, "subject": subject, "magic": 0})


def _reference(reference: Reference) -> dict[str, object]:
    return {"name": reference.name, "subject": reference.subject, "version": reference.version}
