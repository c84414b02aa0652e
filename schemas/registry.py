"""The registry's decisions (sans-IO): given the view, what a register, a delete, a level or a
mode change writes and answers, or the Confluent error that refuses it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from schemas import compatibility, errors
from schemas.compatibility import DEFAULT_LEVEL, LEVELS, Level
from schemas.errors import SchemaError
from schemas.records import (
    ConfigSet,
    HighestId,
    ModeSet,
    Record,
    SchemaVersion,
    VersionRemoved,
)
from schemas.state import LATEST, RegistryState
from schemas.types import ParsedSchema, Reference, SchemaType, parse
from schemas.types.protobuf import ProtobufSchema

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
MAX_VERSION = 2**31 - 1
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Decision(Generic[T]):
    """What a write appends, and what it answers once appended."""

    records: list[Record]
    answer: T


@dataclass(frozen=True, slots=True)
class Registered:
    """A register's answer: the schema's id and its version under the subject."""

    schema_id: int
    version: int


def parse_version(text: str) -> int:
    """A version as a path names it: 1 … 2³¹-1, or "latest" / -1 (LATEST); 42202 otherwise."""
    if text == "latest":
        return LATEST
    try:
        version = int(text)
    except ValueError:
        version = 0
    if version == LATEST or 1 <= version <= MAX_VERSION:
        return version
    raise SchemaError(
        errors.INVALID_VERSION,
        f"The specified version '{text}' is not a valid version id. Allowed values are "
        f'between [1, 2^31-1] and the string "latest"',
    )


def parse_schema(
    state: RegistryState, schema_type: SchemaType, text: str, references: tuple[Reference, ...]
) -> ParsedSchema:
    """The schema parsed, its references resolved through the view."""
    return parse(schema_type, text, state.resolve(references))


def pin_latest(state: RegistryState, references: tuple[Reference, ...]) -> tuple[Reference, ...]:
    """References to a subject's latest version (-1) as the version that is latest now, as
    Confluent's registry and Karapace keep them: a schema is stored with the versions it was
    parsed with, so it does not change meaning when the subject moves on, and its references
    hold those versions against deletes. A reference to nothing is left for `parse_schema`
    to refuse."""
    pinned = []
    for reference in references:
        if reference.version == LATEST:
            try:
                latest = state.version(reference.subject, LATEST).version
            except SchemaError:
                latest = LATEST
            reference = Reference(reference.name, reference.subject, latest)
        pinned.append(reference)
    return tuple(pinned)


def _writable(state: RegistryState, subject: str | None) -> str:
    mode = state.mode_of(subject) or "READWRITE"
    if mode in ("READONLY", "READONLY_OVERRIDE"):
        where = "the registry" if subject is None else f"Subject {subject}"
        raise SchemaError(errors.OPERATION_NOT_PERMITTED, f"{where} is in read-only mode")
    return mode


def register(
    state: RegistryState,
    subject: str,
    schema_type: SchemaType,
    text: str,
    references: tuple[Reference, ...],
    schema_id: int | None = None,
    version: int | None = None,
) -> Decision[Registered]:
    """Register a schema under a subject: the same schema again answers its id and version
    (nothing written); the same schema under another subject keeps its id; a new schema gets
    the next id. An explicit id or version (IMPORT mode only) is kept as given. What is
    stored is the parsed schema's text: as registered, but for a Protobuf descriptor
    registered in its serialized form, stored as its .proto text (42201 if it has none)."""
    mode = _writable(state, subject)
    if (schema_id is not None or version is not None) and mode != "IMPORT":
        raise SchemaError(
            errors.OPERATION_NOT_PERMITTED,
            f"Subject {subject} is not in import mode: a schema id or version may not be given",
        )
    references = pin_latest(state, references)
    parsed = parse_schema(state, schema_type, text, references)
    if isinstance(parsed, ProtobufSchema) and parsed.unprintable is not None:
        raise SchemaError(errors.INVALID_SCHEMA, parsed.unprintable)
    text = parsed.text
    existing = state.find_in_subject(subject, parsed, references)
    if (
        existing is not None
        and not existing.deleted
        and version in (None, existing.version)
        and schema_id in (None, existing.schema_id)
    ):
        return Decision([], Registered(existing.schema_id, existing.version))
    same = state.same_schema(parsed, references)
    if schema_id is not None:
        if schema_id < 1:
            raise SchemaError(errors.INVALID_SCHEMA, f"Invalid schema id {schema_id}")
        if schema_id in state.schemas and schema_id != same:
            raise SchemaError(
                errors.OPERATION_NOT_PERMITTED,
                f"Overwrite new schema with id {schema_id} is not permitted: another schema "
                "has that id",
            )
    all_versions = state.subjects.get(subject, {})
    if version is not None:
        if version < 1:
            raise SchemaError(errors.INVALID_VERSION, f"Invalid version {version}")
        taken = all_versions.get(version)
        if taken is not None:
            raise SchemaError(
                errors.OPERATION_NOT_PERMITTED,
                f"Overwrite new schema in subject {subject} version {version} is not permitted",
            )
    if mode != "IMPORT":
        live = [v for _, v in sorted(all_versions.items()) if not v.deleted]
        problems = compatibility.incompatibilities(
            level_of(state, subject),
            parsed,
            [state.parsed(v.schema_id) for v in live],
        )
        if problems:
            raise SchemaError(
                errors.INCOMPATIBLE_SCHEMA,
                "Schema being registered is incompatible with an earlier schema for subject "
                f'"{subject}", details: {problems}',
            )
    chosen = schema_id if schema_id is not None else same
    records: list[Record] = []
    if chosen is None:
        chosen = state.highest_id + 1
    if chosen > state.highest_id:
        records.append(HighestId(chosen))
    if version is None:
        version = max(all_versions, default=0) + 1
    records.insert(
        0,
        SchemaVersion(subject, version, chosen, schema_type, text, references, deleted=False),
    )
    return Decision(records, Registered(chosen, version))


def check(
    state: RegistryState,
    subject: str,
    version: int | None,
    schema_type: SchemaType,
    text: str,
    references: tuple[Reference, ...],
) -> list[str]:
    """Why the schema could not be registered under the subject (empty: it could): per the
    subject's level, against its live versions, or (as Confluent does) against the one live
    version named alone: `latest` is none on a subject without one (nothing to be
    incompatible with), any other version missing or soft-deleted is 40402."""
    live = [v for _, v in sorted(state.subjects.get(subject, {}).items()) if not v.deleted]
    if version == LATEST:
        live = live[-1:]
    elif version is not None:
        live = [v for v in live if v.version == version]
        if not live:
            raise SchemaError(errors.VERSION_NOT_FOUND, f"Version {version} not found.")
    parsed = parse_schema(state, schema_type, text, references)
    return compatibility.incompatibilities(
        level_of(state, subject), parsed, [state.parsed(v.schema_id) for v in live]
    )


def level_of(state: RegistryState, subject: str) -> Level:
    """The compatibility level that applies to the subject."""
    stored = state.compatibility_of(subject)
    return next((level for level in LEVELS if level == stored), DEFAULT_LEVEL)


def _referenced(
    state: RegistryState, found: SchemaVersion, permanent: bool, whole_subject: bool
) -> None:
    """42206 while a schema's references name the version: a live one holds it against a soft
    delete, a soft-deleted one too against a permanent delete (its record still names the
    version). A subject's delete goes on past its own versions' references, as they go too."""
    referrers = state.referrers(found.subject, found.version, deleted=permanent)
    if any(not (whole_subject and r.subject == found.subject) for r in referrers):
        raise SchemaError(
            errors.REFERENCE_EXISTS,
            "One or more references exist to the schema "
            f"{{magic=1,keytype=SCHEMA,subject={found.subject},version={found.version}}}.",
        )


def delete_subject(state: RegistryState, subject: str, permanent: bool) -> Decision[list[int]]:
    """Soft-delete a subject's live versions, or (permanent, once all are soft-deleted) remove
    them; answers the versions deleted. Version by version, as Confluent's: references first
    (42206), then a live version in a permanent delete (40405)."""
    _writable(state, subject)
    versions = [v for _, v in sorted(state.subjects.get(subject, {}).items())]
    if not versions:
        raise SchemaError(errors.SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
    live = [v for v in versions if not v.deleted]
    if not permanent and not live:
        raise SchemaError(
            errors.SUBJECT_SOFT_DELETED,
            f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
        )
    for v in versions if permanent else live:
        _referenced(state, v, permanent, whole_subject=True)
        if permanent and not v.deleted:
            raise SchemaError(
                errors.SUBJECT_NOT_SOFT_DELETED,
                f"Subject '{subject}' was not deleted first before being permanently deleted",
            )
    if permanent:
        removed: list[Record] = [VersionRemoved(subject, v.version) for v in versions]
        return Decision(removed, [v.version for v in versions])
    soft: list[Record] = [_soft_deleted(v) for v in live]
    return Decision(soft, [v.version for v in live])


def delete_version(
    state: RegistryState, subject: str, version: int, permanent: bool
) -> Decision[int]:
    """Soft-delete one version, or (permanent, once soft-deleted) remove it; references are
    checked before the version's state, as Confluent's (42206 before 40407)."""
    _writable(state, subject)
    found = state.version(subject, version, deleted=permanent or version != LATEST)
    if found.deleted and not permanent:
        raise SchemaError(
            errors.VERSION_SOFT_DELETED,
            f"Subject '{subject}' Version {found.version} was soft deleted.Set permanent=true "
            "to delete permanently",
        )
    _referenced(state, found, permanent, whole_subject=False)
    if permanent and not found.deleted:
        raise SchemaError(
            errors.VERSION_NOT_SOFT_DELETED,
            f"Subject '{subject}' Version {found.version} was not deleted first before being "
            "permanently deleted",
        )
    record: Record = VersionRemoved(subject, found.version) if permanent else _soft_deleted(found)
    return Decision([record], found.version)


def _soft_deleted(version: SchemaVersion) -> SchemaVersion:
    return SchemaVersion(
        version.subject,
        version.version,
        version.schema_id,
        version.schema_type,
        version.text,
        version.references,
        deleted=True,
    )


def compatibility_level(text: object) -> str:
    """A level as a body names it (any case); 42203 if it is none of Confluent's."""
    level = text.upper() if isinstance(text, str) else None
    if level not in LEVELS:
        raise SchemaError(
            errors.INVALID_COMPATIBILITY_LEVEL,
            "Invalid compatibility level. Valid values are none, backward, forward, full, "
            "backward_transitive, forward_transitive, and full_transitive",
        )
    return level


def compatibility_of(state: RegistryState, subject: str | None, default_to_global: bool) -> str:
    """The level that applies to the subject; 40408 where it has none of its own and the
    global one is not to stand in."""
    level = state.compatibility_of(subject, default_to_global)
    if level is None:
        raise SchemaError(
            errors.SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
            f"Subject '{subject}' does not have subject-level compatibility configured",
        )
    return level


def set_config(state: RegistryState, subject: str | None, level: str) -> Decision[str]:
    """Set a subject's (or the global) compatibility level."""
    _writable(state, subject)
    return Decision([ConfigSet(subject, level)], level)


def delete_config(state: RegistryState, subject: str | None) -> Decision[str]:
    """Forget a subject's level (the global one goes back to BACKWARD); answers the old one."""
    _writable(state, subject)
    old = compatibility_of(state, subject, default_to_global=False)
    return Decision([ConfigSet(subject, None)], old)


def mode(text: object) -> str:
    """A mode as a body names it; 42204 if it is none of Confluent's."""
    value = text.upper() if isinstance(text, str) else None
    if value not in MODES:
        raise SchemaError(
            errors.INVALID_MODE,
            "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT",
        )
    return value


def mode_of(state: RegistryState, subject: str | None, default_to_global: bool) -> str:
    """The mode that applies to the subject; 40409 where it has none of its own and the global
    one is not to stand in."""
    value = state.mode_of(subject, default_to_global)
    if value is None:
        raise SchemaError(
            errors.SUBJECT_MODE_NOT_CONFIGURED,
            f"Subject '{subject}' does not have subject-level mode configured",
        )
    return value


def set_mode(state: RegistryState, subject: str | None, value: str, force: bool) -> Decision[str]:
    """Set a mode; IMPORT only where there is nothing yet (the subject, or any subject for
    the global mode), unless forced."""
    if value == "IMPORT" and not force:
        taken = state.subject_names() if subject is None else state.subjects.get(subject)
        if taken:
            raise SchemaError(
                errors.OPERATION_NOT_PERMITTED,
                "Cannot import since found existing subjects",
            )
    return Decision([ModeSet(subject, value)], value)


def delete_mode(state: RegistryState, subject: str) -> Decision[str]:
    """Forget a subject's mode; answers the old one (40409 if it had none)."""
    old = mode_of(state, subject, default_to_global=False)
    return Decision([ModeSet(subject, None)], old)
