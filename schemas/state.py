"""The registry's view: what the records of `_schemas` read so far say (sans-IO), and the
questions the API asks of it (subjects, versions, schemas by id, levels and modes)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from schemas import errors
from schemas.errors import SchemaError
from schemas.records import ConfigSet, HighestId, ModeSet, Record, SchemaVersion, VersionRemoved
from schemas.types import ParsedSchema, Reference, SchemaType, parse
from schemas.types.protobuf import ProtobufSchema, is_serialized

DEFAULT_COMPATIBILITY = "BACKWARD"
DEFAULT_MODE = "READWRITE"
LATEST = -1  # Confluent's alias of "latest" as a version


@dataclass(frozen=True, slots=True)
class StoredSchema:
    """A schema by its id: the same for every subject and version using it."""

    schema_id: int
    schema_type: SchemaType
    text: str
    references: tuple[Reference, ...]


@dataclass
class RegistryState:
    """Subjects, their versions and schemas by id, as applied from the topic in order."""

    subjects: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    schemas: dict[int, StoredSchema] = field(default_factory=dict)
    uses: dict[int, set[tuple[str, int]]] = field(default_factory=dict)  # id -> its versions
    compatibility: dict[str | None, str] = field(default_factory=dict)  # None: the global one
    modes: dict[str | None, str] = field(default_factory=dict)
    highest_id: int = 0
    _parsed: dict[int, ParsedSchema] = field(default_factory=dict)
    _canonical: dict[tuple[SchemaType, str, tuple[Reference, ...]], int] = field(
        default_factory=dict
    )
    _indexed: set[int] = field(default_factory=set)  # ids in _canonical

    def apply(self, record: Record) -> None:
        """One record of the topic, in offset order."""
        match record:
            case SchemaVersion():
                versions = self.subjects.setdefault(record.subject, {})
                previous = versions.get(record.version)
                if previous is not None:
                    self._unuse(previous.schema_id, record.subject, record.version)
                versions[record.version] = record
                self.uses.setdefault(record.schema_id, set()).add((record.subject, record.version))
                if record.schema_id not in self.schemas:
                    self.schemas[record.schema_id] = StoredSchema(
                        record.schema_id, record.schema_type, record.text, record.references
                    )
                self.highest_id = max(self.highest_id, record.schema_id)
            case VersionRemoved():
                versions = self.subjects.get(record.subject, {})
                removed = versions.pop(record.version, None)
                if not versions:
                    self.subjects.pop(record.subject, None)
                if removed is not None:
                    self._unuse(removed.schema_id, record.subject, record.version)
            case ConfigSet():
                _set(self.compatibility, record.subject, record.compatibility)
            case ModeSet():
                _set(self.modes, record.subject, record.mode)
            case HighestId():
                self.highest_id = max(self.highest_id, record.schema_id)

    def _unuse(self, schema_id: int, subject: str, version: int) -> None:
        users = self.uses.get(schema_id)
        if users is None:
            return
        users.discard((subject, version))
        if not users:
            del self.uses[schema_id]
            self.schemas.pop(schema_id, None)
            self._parsed.pop(schema_id, None)
            if schema_id in self._indexed:
                self._indexed.discard(schema_id)
                self._canonical = {k: v for k, v in self._canonical.items() if v != schema_id}

    # -- subjects and versions -----------------------------------------------------------------

    def subject_names(self, deleted: bool = False) -> list[str]:
        """The subjects with a live version (any version with `deleted`), sorted."""
        return sorted(
            name
            for name, versions in self.subjects.items()
            if deleted or any(not v.deleted for v in versions.values())
        )

    def versions(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        """The subject's versions, oldest first; 40401 if it has none (live ones, unless
        `deleted`)."""
        found = [
            v for _, v in sorted(self.subjects.get(subject, {}).items()) if deleted or not v.deleted
        ]
        if not found:
            raise SchemaError(errors.SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        return found

    def version(self, subject: str, version: int, deleted: bool = False) -> SchemaVersion:
        """A version of the subject (LATEST: its newest live one); 40401 or 40402 if absent."""
        known = self.versions(subject, deleted)
        if version == LATEST:
            return known[-1]
        found = self.subjects[subject].get(version)
        if found is None or (found.deleted and not deleted):
            raise SchemaError(errors.VERSION_NOT_FOUND, f"Version {version} not found.")
        return found

    def referrers(self, subject: str, version: int, deleted: bool = False) -> list[SchemaVersion]:
        """The live versions whose schemas' references name this version (with `deleted`,
        the soft-deleted ones too), sorted by subject and version."""
        return [
            self.subjects[s][v]
            for schema_id, stored in self.schemas.items()
            if any(r.subject == subject and r.version == version for r in stored.references)
            for s, v in sorted(self.uses.get(schema_id, ()))
            if deleted or not self.subjects[s][v].deleted
        ]

    def referenced_by(self, subject: str, version: int, deleted: bool = False) -> list[int]:
        """The ids of the live schemas whose references name this version (with `deleted`,
        of the soft-deleted ones too)."""
        return sorted({v.schema_id for v in self.referrers(subject, version, deleted)})

    # -- schemas -------------------------------------------------------------------------------

    def schema(self, schema_id: int) -> StoredSchema:
        """The schema with this id; 40403 if there is none."""
        found = self.schemas.get(schema_id)
        if found is None:
            raise SchemaError(errors.SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")
        return found

    def users(self, schema_id: int, deleted: bool = False) -> list[tuple[str, int]]:
        """The (subject, version) pairs using this id, sorted; 40403 if it is unknown."""
        self.schema(schema_id)
        return sorted(
            (s, v) for s, v in self.uses[schema_id] if deleted or not self.subjects[s][v].deleted
        )

    def parsed(self, schema_id: int) -> ParsedSchema:
        """The schema with this id parsed, its references resolved (kept once parsed)."""
        found = self._parsed.get(schema_id)
        if found is None:
            stored = self.schema(schema_id)
            found = parse(stored.schema_type, stored.text, self.resolve(stored.references))
            self._parsed[schema_id] = found
        return found

    def text_as(self, schema_id: int, form: str | None) -> str:
        """The schema's text in the form a reader asks for: `serialized` gives a Protobuf
        schema's FileDescriptorProto in base64, as confluent-kafka's Protobuf serializers
        ask for it; any other form, the text as stored (a Protobuf descriptor stored in its
        serialized form, as one was before descriptors were stored as .proto text: its
        .proto text)."""
        stored = self.schema(schema_id)
        if stored.schema_type != "PROTOBUF":
            return stored.text
        if form == "serialized":
            parsed = self.parsed(schema_id)
            if isinstance(parsed, ProtobufSchema):
                return parsed.serialized()
        elif is_serialized(stored.text):
            try:
                return self.parsed(schema_id).text
            except SchemaError:
                pass  # no longer parses: answered as stored
        return stored.text

    def version_text(self, version: SchemaVersion) -> str:
        """A version's text as registered, but a Protobuf descriptor stored in its serialized
        form (see `text_as`): the .proto text of its schema."""
        if version.schema_type == "PROTOBUF" and is_serialized(version.text):
            return self.text_as(version.schema_id, None)
        return version.text

    def resolve(self, references: Iterable[Reference]) -> dict[str, ParsedSchema]:
        """The schemas references name, parsed; 42201 for a reference to nothing."""
        resolved: dict[str, ParsedSchema] = {}
        for reference in references:
            try:
                target = self.version(reference.subject, reference.version)
            except SchemaError:
                raise SchemaError(
                    errors.INVALID_SCHEMA,
                    f"Invalid schema: reference {reference.name!r} names subject "
                    f"'{reference.subject}' version {reference.version}, which does not exist",
                ) from None
            resolved[reference.name] = self.parsed(target.schema_id)
        return resolved

    def same_schema(self, parsed: ParsedSchema, references: tuple[Reference, ...]) -> int | None:
        """The id already given to this schema (same type, canonical text and references)."""
        for schema_id in self.schemas.keys() - self._indexed:
            stored = self.schemas[schema_id]
            try:
                canonical = self.parsed(schema_id).canonical()
            except SchemaError:
                canonical = stored.text  # stored under older rules: matched by its text
            key = (stored.schema_type, canonical, stored.references)
            self._canonical.setdefault(key, schema_id)
            self._indexed.add(schema_id)
        return self._canonical.get((parsed.schema_type, parsed.canonical(), references))

    def find_in_subject(
        self, subject: str, parsed: ParsedSchema, references: tuple[Reference, ...]
    ) -> SchemaVersion | None:
        """The subject's newest version (live first, else soft-deleted) with this schema."""
        schema_id = self.same_schema(parsed, references)
        if schema_id is None:
            return None
        candidates = [
            v for v in self.subjects.get(subject, {}).values() if v.schema_id == schema_id
        ]
        candidates.sort(key=lambda v: (not v.deleted, v.version))
        return candidates[-1] if candidates else None

    # -- configuration -------------------------------------------------------------------------

    def compatibility_of(self, subject: str | None, default_to_global: bool = True) -> str | None:
        """The level that applies to the subject (its own, else the global one)."""
        return _applying(self.compatibility, subject, default_to_global, DEFAULT_COMPATIBILITY)

    def mode_of(self, subject: str | None, default_to_global: bool = True) -> str | None:
        """The mode that applies to the subject (its own, else the global one)."""
        return _applying(self.modes, subject, default_to_global, DEFAULT_MODE)


def _applying(
    values: dict[str | None, str], subject: str | None, default_to_global: bool, default: str
) -> str | None:
    """A subject's own setting, else the global one (None: the subject has none and the global
    one is not to stand in)."""
    if subject is not None and subject in values:
        return values[subject]
    if subject is not None and not default_to_global:
        return None
    return values.get(None, default)


def _set(values: dict[str | None, str], subject: str | None, value: str | None) -> None:
    if value is None:
        values.pop(subject, None)
    else:
        values[subject] = value
