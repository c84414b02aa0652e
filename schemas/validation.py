"""Schema validation of produced records, as Confluent Server's broker-side validation does it:
a topic with `value.schema.validation` (or `key.schema.validation`) accepts a record only if
its value (key) is described by a schema registered under the field's subject.

A binary value must carry the wire format (magic byte 0, a schema id) with an id registered
under the subject, as Confluent Server checks it (the payload is not decoded: the id is the
contract). A JSON value (the JSON and NDJSON produce bodies) is checked against the subject's
latest schema, or the one the request names, by that schema's own type (an Avro schema reads
the JSON as Avro's JSON encoding would be read). Keys of a JSON body are strings: checked as
JSON strings. One record that fails refuses the request; nothing of it is appended.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from engine.batch import RecordTuple
from engine.config import SUBJECT_NAME_STRATEGIES, TopicConfig
from engine.errors import EngineError
from schemas import wire
from schemas.errors import SchemaError
from schemas.state import RegistryState, StoredSchema
from schemas.types import InvalidValue, ParsedSchema
from schemas.types.json_schema import JsonSchema
from schemas.types.protobuf import ProtobufSchema

Field = Literal["key", "value"]
TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME = SUBJECT_NAME_STRATEGIES
MAX_SCHEMA_ID = 2**31 - 1  # ids are Java ints in Confluent's registry


class RecordRefused(EngineError):
    """A produced record its topic's schema validation refuses: which record, which field."""

    code = "SCHEMA_VALIDATION_FAILED"

    def __init__(
        self, index: int, field: Field, subject: str | None, why: str, unknown: bool = False
    ) -> None:
        named = f" (subject {subject!r})" if subject is not None else ""
        super().__init__(f"records[{index}].{field}{named}: {why}")
        self.index = index
        self.field = field
        self.subject = subject
        # What the node's view does not know (an id, a subject's version): a view that has not
        # caught up with the registry yet would say the same.
        self.unknown = unknown


@dataclass(frozen=True, slots=True)
class Checked:
    """One field a topic validates, and how its subject is named."""

    field: Field
    strategy: str


@dataclass(frozen=True, slots=True)
class Named:
    """A schema the request names for its JSON values (or keys) instead of the latest one."""

    schema_id: int | None = None
    version: int | None = None


def checks_of(config: TopicConfig) -> tuple[Checked, ...]:
    """The fields a topic's configuration validates (none, usually)."""
    checks = []
    if config.key_schema_validation:
        checks.append(Checked("key", config.key_subject_name_strategy))
    if config.value_schema_validation:
        checks.append(Checked("value", config.value_subject_name_strategy))
    return tuple(checks)


def check_records(
    state: RegistryState,
    topic: str,
    checks: Sequence[Checked],
    records: Sequence[RecordTuple],
    json_values: Container[int],
    json_keys: bool,
    named: dict[Field, Named] | None = None,
) -> None:
    """Refuse (RecordRefused) the first record whose checked fields no schema of their subject
    describes. `json_values`: the indexes of records whose value is JSON text; `json_keys`:
    whether keys are strings of a JSON body (else binary)."""
    for check in checks:
        _FieldCheck(state, topic, check, (named or {}).get(check.field)).run(
            records, json_values, json_keys
        )


def all_registered(state: RegistryState, topic: str, check: Checked, ids: Iterable[int]) -> bool:
    """Whether each schema id (those a batch's framed fields carry, gathered in C) is
    registered under its subject; False: check the records one by one, which says why not."""
    field = _FieldCheck(state, topic, check, None)
    return all(field.registered(schema_id) for schema_id in ids)


def json_records_hold(
    state: RegistryState, topic: str, checks: Sequence[Checked], records: list[Any]
) -> bool:
    """Whether the records of a JSON body, decoded whole, are all objects whose checked fields
    (a string `key`, a JSON `value`) match their subjects' latest schemas: one decode of the
    body, then one validator call per field where the type allows. False: check them one by
    one, which says which fails and why."""
    for check in checks:
        field = _FieldCheck(state, topic, check, None)
        try:
            schema_id, _ = field.json_schema(0)
            parsed = state.parsed(schema_id)
            if isinstance(parsed, JsonSchema):
                if not parsed.all_valid_at(records, check.field):
                    return False
                continue
            for record in records:
                value = record.get(check.field) if type(record) is dict else None
                if value is None:
                    return False
                parsed.validate(value)
        except (RecordRefused, SchemaError, InvalidValue):
            return False
    return True


class _FieldCheck:
    """One field of one request's records: the subject's ids and latest schema, looked up once."""

    def __init__(
        self, state: RegistryState, topic: str, check: Checked, named: Named | None
    ) -> None:
        self.state = state
        self.topic = topic
        self.field = check.field
        self.strategy = check.strategy
        self.named = named
        self._ids: dict[str, frozenset[int]] = {}

    def run(
        self, records: Sequence[RecordTuple], json_values: Container[int], json_keys: bool
    ) -> None:
        is_key = self.field == "key"
        for index, record in enumerate(records):
            data = record[0] if is_key else record[1]
            if data is None:
                raise RecordRefused(index, self.field, None, "null, and the topic validates it")
            if is_key and json_keys:
                self._json(index, data.decode(), data)
            elif not is_key and index in json_values:
                self._json(index, None, data)
            else:
                self._framed(index, data)

    def _framed(self, index: int, data: bytes) -> None:
        try:
            schema_id, _ = wire.unframe(data)
        except InvalidValue as exc:
            raise RecordRefused(index, self.field, None, f"not in the wire format: {exc}") from None
        stored = self.state.schemas.get(schema_id)
        if stored is None:
            raise RecordRefused(
                index, self.field, None, f"schema id {schema_id} is not registered", unknown=True
            )
        subject = self._subject(stored)
        if schema_id not in self._ids_under(subject):
            raise RecordRefused(
                index,
                self.field,
                subject,
                f"schema id {schema_id} is not registered under it",
                unknown=True,
            )

    def registered(self, schema_id: int) -> bool:
        stored = self.state.schemas.get(schema_id)
        return stored is not None and schema_id in self._ids_under(self._subject(stored))

    def _json(self, index: int, text: str | None, data: bytes) -> None:
        """A JSON field: `text` is a string key, else `data` is the value's JSON text."""
        schema_id, subject = self.json_schema(index)
        try:
            parsed = self.state.parsed(schema_id)
            parsed.validate(orjson.loads(memoryview(data)) if text is None else text)
        except InvalidValue as exc:
            raise RecordRefused(index, self.field, subject, str(exc)) from None
        except SchemaError as exc:
            raise RecordRefused(index, self.field, subject, exc.message) from None

    def json_schema(self, index: int) -> tuple[int, str | None]:
        """The id of the schema a JSON field is checked against, and its subject."""
        named = self.named
        if named is not None and named.schema_id is not None:
            stored = self.state.schemas.get(named.schema_id)
            if stored is None:
                raise RecordRefused(
                    index,
                    self.field,
                    None,
                    f"schema id {named.schema_id} is not registered",
                    unknown=True,
                )
            subject = self._subject(stored)
            if named.schema_id not in self._ids_under(subject):
                raise RecordRefused(
                    index,
                    self.field,
                    subject,
                    f"schema id {named.schema_id} is not registered under it",
                    unknown=True,
                )
            return named.schema_id, subject
        if self.strategy != TOPIC_NAME:
            raise RecordRefused(
                index,
                self.field,
                None,
                f"the topic names subjects by {self.strategy}: a JSON {self.field} must name its "
                f"schema ({self.field}_schema_id)",
            )
        subject = f"{self.topic}-{self.field}"
        try:
            version = self.state.version(
                subject, -1 if named is None or named.version is None else named.version
            )
        except SchemaError as exc:
            raise RecordRefused(index, self.field, subject, exc.message, unknown=True) from None
        return version.schema_id, subject

    def _subject(self, stored: StoredSchema) -> str:
        if self.strategy == TOPIC_NAME:
            return f"{self.topic}-{self.field}"
        try:
            name = record_name(stored, self.state.parsed(stored.schema_id))
        except SchemaError:
            name = ""
        return name if self.strategy == RECORD_NAME else f"{self.topic}-{name}"

    def _ids_under(self, subject: str) -> frozenset[int]:
        ids = self._ids.get(subject)
        if ids is None:
            try:
                versions = self.state.versions(subject)
            except SchemaError:
                versions = []
            ids = self._ids[subject] = frozenset(v.schema_id for v in versions)
        return ids


def record_name(stored: StoredSchema, parsed: ParsedSchema) -> str:
    """The record name RecordNameStrategy gives a schema: an Avro record's full name, a JSON
    Schema's `title`, a Protobuf file's first message with its package."""
    if isinstance(parsed, ProtobufSchema):
        file = parsed.descriptor
        first = file.message_type[0].name if file.message_type else ""
        return f"{file.package}.{first}" if file.package else first
    doc = orjson.loads(stored.text)
    if not isinstance(doc, dict):
        return ""
    if stored.schema_type == "JSON":
        title = doc.get("title")
        return title if isinstance(title, str) else ""
    name, namespace = doc.get("name"), doc.get("namespace")
    if not isinstance(name, str):
        return ""
    return (
        f"{namespace}.{name}"
        if isinstance(namespace, str) and namespace and "." not in name
        else name
    )
