"""The registry's sans-IO parts: the records of `_schemas` and their codec, the view built by
applying them, and the decisions a write makes; ids survive permanent deletes and compaction."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

import pytest

from schemas import errors, registry
from schemas.errors import SchemaError
from schemas.records import (
    ConfigSet,
    HighestId,
    ModeSet,
    Record,
    SchemaVersion,
    VersionRemoved,
    decode,
    encode,
)
from schemas.state import LATEST, RegistryState
from schemas.types import Reference

T = TypeVar("T")


def avro(name: str, *fields: str) -> str:
    return json.dumps(
        {"type": "record", "name": name, "fields": [{"name": f, "type": "int"} for f in fields]}
    )


class Log:
    """A `_schemas` partition as (key, value) pairs, applied to a view as the store does."""

    def __init__(self) -> None:
        self.entries: list[tuple[bytes, bytes | None]] = []
        self.state = RegistryState()

    def write(self, decision: registry.Decision[T]) -> T:
        for record in decision.records:
            self.entries.append(encode(record))
            decoded = decode(*self.entries[-1])
            assert decoded is not None
            self.state.apply(decoded)
        return decision.answer

    def compacted(self) -> RegistryState:
        """A view rebuilt from the log as compaction leaves it: each key's last record, and no
        tombstones."""
        last: dict[bytes, bytes | None] = {}
        for key, value in self.entries:
            last.pop(key, None)
            last[key] = value
        state = RegistryState()
        for key, value in last.items():
            decoded = decode(key, value)
            if value is not None and decoded is not None:
                state.apply(decoded)
        return state


@pytest.mark.parametrize(
    "record",
    [
        SchemaVersion("s", 3, 7, "AVRO", '"int"', (), deleted=False),
        SchemaVersion("s", 1, 2, "PROTOBUF", "syntax", (Reference("a.proto", "t", 1),), True),
        VersionRemoved("s", 3),
        ConfigSet(None, "FULL"),
        ConfigSet("s", None),
        ModeSet("s", "IMPORT"),
        ModeSet(None, None),
        HighestId(41),
    ],
)
def test_records_round_trip(record: Record) -> None:
    assert decode(*encode(record)) == record


def test_keys_are_confluents() -> None:
    key, value = encode(SchemaVersion("s", 3, 7, "AVRO", '"int"', (), deleted=False))
    assert json.loads(key) == {"keytype": "SCHEMA", "subject": "s", "version": 3, "magic": 1}
    assert json.loads(value or b"") == {
        "subject": "s", "version": 3, "id": 7, "schema": '"int"', "deleted": False
    }  # fmt: skip
    assert decode(b'{"keytype": "NOOP", "magic": 0}', b"{}") is None


@pytest.mark.parametrize(
    ("key", "value"),
    [(b"[1]", b"{}"), (b'{"keytype": "SCHEMA"}', b"[]"), (b'{"keytype": "SCHEMA"}', b"{}")],
)
def test_malformed_records_are_refused(key: bytes, value: bytes) -> None:
    with pytest.raises((ValueError, KeyError)):
        decode(key, value)


def test_ids_are_never_given_again_after_permanent_deletes_and_compaction() -> None:
    log = Log()
    first = log.write(registry.register(log.state, "a", "AVRO", avro("R", "x"), ()))
    second = log.write(registry.register(log.state, "b", "AVRO", avro("S", "y"), ()))
    assert (first, second) == (registry.Registered(1, 1), registry.Registered(2, 1))
    log.write(registry.delete_subject(log.state, "b", permanent=False))
    log.write(registry.delete_subject(log.state, "b", permanent=True))
    rebuilt = log.compacted()
    assert 2 not in rebuilt.schemas and rebuilt.highest_id == 2
    again = registry.register(rebuilt, "c", "AVRO", avro("T", "z"), ())
    assert again.answer == registry.Registered(3, 1)


def test_register_is_decided_on_the_view() -> None:
    log = Log()
    log.write(registry.register(log.state, "a", "AVRO", avro("R", "x"), ()))
    same = registry.register(log.state, "a", "AVRO", json.dumps(json.loads(avro("R", "x"))), ())
    assert same.records == [] and same.answer == registry.Registered(1, 1)
    elsewhere = registry.register(log.state, "b", "AVRO", avro("R", "x"), ())
    assert elsewhere.answer == registry.Registered(1, 1)
    assert [type(r) for r in elsewhere.records] == [SchemaVersion]  # no new id
    with pytest.raises(SchemaError) as incompatible:
        registry.register(log.state, "a", "AVRO", avro("R", "x", "y"), ())
    assert incompatible.value.error_code == errors.INCOMPATIBLE_SCHEMA


def test_versions_count_on_after_deletes() -> None:
    log = Log()
    log.write(registry.set_config(log.state, "a", "NONE"))
    for n in range(3):
        log.write(registry.register(log.state, "a", "AVRO", avro("R", f"f{n}"), ()))
    assert log.write(registry.delete_version(log.state, "a", LATEST, permanent=False)) == 3
    assert log.write(registry.delete_version(log.state, "a", 3, permanent=True)) == 3
    registered = log.write(registry.register(log.state, "a", "AVRO", avro("R", "g"), ()))
    assert registered == registry.Registered(4, 3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("latest", LATEST), ("-1", LATEST), ("1", 1), (str(2**31 - 1), 2**31 - 1)],
)
def test_versions_as_paths_name_them(text: str, expected: int) -> None:
    assert registry.parse_version(text) == expected


@pytest.mark.parametrize("text", ["0", "-2", "abc", str(2**31), "", "1.5"])
def test_invalid_versions(text: str) -> None:
    with pytest.raises(SchemaError) as refused:
        registry.parse_version(text)
    assert refused.value.error_code == errors.INVALID_VERSION


def test_a_reference_to_a_deleted_version_is_invalid() -> None:
    log = Log()
    log.write(registry.register(log.state, "base", "AVRO", avro("Base", "x"), ()))
    log.write(registry.delete_subject(log.state, "base", permanent=False))
    child = json.dumps({"type": "record", "name": "C", "fields": [{"name": "b", "type": "Base"}]})
    with pytest.raises(SchemaError) as refused:
        registry.register(log.state, "c", "AVRO", child, (Reference("Base", "base", 1),))
    assert refused.value.error_code == errors.INVALID_SCHEMA


def referencing(log: Log, subject: str, base: str, version: int = 1) -> None:
    """Register under `subject` a record whose field is `base`'s record `Base`."""
    child = json.dumps({"type": "record", "name": "C", "fields": [{"name": "b", "type": "Base"}]})
    reference = (Reference("Base", base, version),)
    log.write(registry.register(log.state, subject, "AVRO", child, reference))


def refused(code: int, decide: Callable[[], object]) -> None:
    """`decide` raises the registry error `code`."""
    with pytest.raises(SchemaError) as raised:
        decide()
    assert raised.value.error_code == code


def test_a_soft_deleted_referrer_holds_its_reference_against_permanent_deletes() -> None:
    """As Confluent's registry: a soft delete goes on once no live schema references the
    version, a permanent one (of the version or its subject) not while a soft-deleted schema's
    record still names it, until that schema is permanently deleted too."""
    log = Log()
    log.write(registry.register(log.state, "base", "AVRO", avro("Base", "x"), ()))
    referencing(log, "child", "base")
    refused(errors.REFERENCE_EXISTS, lambda: registry.delete_version(log.state, "base", 1, False))
    refused(errors.REFERENCE_EXISTS, lambda: registry.delete_subject(log.state, "base", False))
    # A permanent delete of a referenced live version is refused for the reference first.
    refused(errors.REFERENCE_EXISTS, lambda: registry.delete_version(log.state, "base", 1, True))
    refused(errors.REFERENCE_EXISTS, lambda: registry.delete_subject(log.state, "base", True))

    log.write(registry.delete_version(log.state, "child", 1, permanent=False))
    assert log.state.referenced_by("base", 1) == []
    assert log.state.referenced_by("base", 1, deleted=True) == [2]
    assert log.write(registry.delete_version(log.state, "base", 1, permanent=False)) == 1
    refused(errors.REFERENCE_EXISTS, lambda: registry.delete_version(log.state, "base", 1, True))
    refused(errors.REFERENCE_EXISTS, lambda: registry.delete_subject(log.state, "base", True))

    log.write(registry.delete_version(log.state, "child", 1, permanent=True))
    assert log.state.referenced_by("base", 1, deleted=True) == []
    assert log.write(registry.delete_subject(log.state, "base", permanent=True)) == [1]


def test_a_subjects_own_references_do_not_hold_its_delete() -> None:
    """As Confluent's registry: a subject whose later version references an earlier one is
    deleted whole, softly then permanently; its versions one by one still are not."""
    log = Log()
    log.write(registry.set_config(log.state, "s", "NONE"))
    log.write(registry.register(log.state, "s", "AVRO", avro("Base", "x"), ()))
    referencing(log, "s", "s")
    refused(errors.REFERENCE_EXISTS, lambda: registry.delete_version(log.state, "s", 1, False))
    assert log.write(registry.delete_subject(log.state, "s", permanent=False)) == [1, 2]
    refused(errors.REFERENCE_EXISTS, lambda: registry.delete_version(log.state, "s", 1, True))
    assert log.write(registry.delete_subject(log.state, "s", permanent=True)) == [1, 2]
    assert "s" not in log.state.subjects


def test_another_subjects_reference_holds_a_subject_delete() -> None:
    log = Log()
    log.write(registry.register(log.state, "base", "AVRO", avro("Base", "x"), ()))
    referencing(log, "child", "base")
    log.write(registry.delete_subject(log.state, "child", permanent=False))
    assert log.write(registry.delete_subject(log.state, "base", permanent=False)) == [1]
    refused(errors.REFERENCE_EXISTS, lambda: registry.delete_subject(log.state, "base", True))
    log.write(registry.delete_subject(log.state, "child", permanent=True))
    assert log.write(registry.delete_subject(log.state, "base", permanent=True)) == [1]
