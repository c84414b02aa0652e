"""Compatibility levels: which versions a new schema is checked against and in which
direction. Cases from Karapace's tests/unit/test_avro_compatibility.py (Confluent's
AvroCompatibilityTest): schema1 has f1; schema2 adds f2 with a default; schema3 adds f2
without one."""

from __future__ import annotations

import json
from typing import Any

import pytest

from schemas.compatibility import LEVELS, Level, incompatibilities
from schemas.types import ParsedSchema, parse


def avro(*fields: dict[str, Any]) -> ParsedSchema:
    return parse(
        "AVRO", json.dumps({"type": "record", "name": "myrecord", "fields": list(fields)}), {}
    )


F1 = {"type": "string", "name": "f1"}
SCHEMA1 = avro(F1)
SCHEMA2 = avro(F1, {"type": "string", "name": "f2", "default": "foo"})
SCHEMA3 = avro(F1, {"type": "string", "name": "f2"})


@pytest.mark.parametrize(
    ("level", "new", "existing", "compatible"),
    [
        ("BACKWARD", SCHEMA2, [SCHEMA1], True),
        ("BACKWARD", SCHEMA3, [SCHEMA1], False),
        ("BACKWARD", SCHEMA3, [SCHEMA1, SCHEMA2], True),
        ("BACKWARD_TRANSITIVE", SCHEMA3, [SCHEMA1, SCHEMA2], False),
        ("BACKWARD_TRANSITIVE", SCHEMA2, [SCHEMA1], True),
        ("FORWARD", SCHEMA1, [SCHEMA3], False),
        ("FORWARD", SCHEMA3, [SCHEMA1], True),
        ("FORWARD", SCHEMA1, [SCHEMA3, SCHEMA2], True),
        ("FORWARD_TRANSITIVE", SCHEMA1, [SCHEMA3, SCHEMA2], False),
        ("FULL", SCHEMA2, [SCHEMA1], True),
        ("FULL", SCHEMA3, [SCHEMA1], False),
        ("FULL", SCHEMA1, [SCHEMA3], False),
        ("FULL", SCHEMA3, [SCHEMA1, SCHEMA2], True),
        ("FULL_TRANSITIVE", SCHEMA3, [SCHEMA1, SCHEMA2], False),
        ("FULL_TRANSITIVE", SCHEMA2, [SCHEMA1, SCHEMA2], True),
        ("NONE", SCHEMA3, [SCHEMA1], True),
        ("BACKWARD", SCHEMA3, [], True),
    ],
)
def test_levels(
    level: Level, new: ParsedSchema, existing: list[ParsedSchema], compatible: bool
) -> None:
    found = incompatibilities(level, new, existing)
    assert (found == []) is compatible, found


def test_messages_name_the_level_after_the_types_own() -> None:
    found = incompatibilities("BACKWARD", SCHEMA3, [SCHEMA1])
    assert found[0].startswith("{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE'")
    assert found[-1] == "{compatibility: 'BACKWARD'}"
    both = incompatibilities("FULL", SCHEMA3, [SCHEMA1])
    assert both[-1] == "{compatibility: 'FULL'}"


def test_a_schema_of_another_type_is_incompatible_at_every_level_but_none() -> None:
    other = parse("JSON", '{"type": "object"}', {})
    for level in LEVELS:
        assert (incompatibilities(level, other, [SCHEMA1]) == []) is (level == "NONE"), level
