"""JSON Schema schemas: drafts and meta-validation, `$ref` to references, values and their
payload as confluent-kafka's JSONSerializer writes them, schema bombs, and reader/writer
compatibility. The compatibility cases (KARAPACE_SCHEMAS, KARAPACE_CASES) are from
Karapace's tests/unit/compatibility/jsonschema/test_jsonschema_compatibility.py with the
schemas of its tests/schemas/json_schemas.py; DIVERGENCES lists where we answer otherwise
and why."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
    MockSchemaRegistryClient,
)
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas import wire
from schemas.errors import INVALID_SCHEMA, SchemaError
from schemas.types import InvalidValue, limits, parse
from schemas.types.json_schema import JsonSchema


def schema(document: Any, references: dict[str, Any] | None = None) -> JsonSchema:
    parsed = parse("JSON", json.dumps(document), references or {})
    assert isinstance(parsed, JsonSchema)
    return parsed


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name"],
    "additionalProperties": False,
}


def test_canonical_form_ignores_whitespace_and_key_order() -> None:
    one = parse("JSON", '{"type": "object", "properties": {"a": {"type": "string"}}}', {})
    two = parse("JSON", '{"properties":{"a":{"type":"string"}},\n"type":"object"}', {})
    assert (
        one.canonical()
        == two.canonical()
        == '{"properties":{"a":{"type":"string"}},"type":"object"}'
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{nope", "not valid JSON"),
        ("42", "an object or a boolean"),
        ('{"type": "strin"}', "invalid JSON Schema at '/type'"),
        ('{"type": "object", "required": "name"}', "invalid JSON Schema at '/required'"),
        (
            '{"properties": {"a": {"minimum": "1"}}}',
            "invalid JSON Schema at '/properties/a/minimum'",
        ),
        ('{"type": "string", "pattern": "(unclosed"}', "invalid JSON Schema"),
        ('{"$ref": "missing.json"}', "missing.json"),
        (
            '{"$schema": "https://json-schema.org/draft/2020-12/schema", "prefixItems": 3}',
            "prefixItems",
        ),
    ],
)
def test_invalid_schemas_are_refused_with_invalid_schema(text: str, why: str) -> None:
    with pytest.raises(SchemaError, match=why) as refused:
        parse("JSON", text, {})
    assert refused.value.error_code == INVALID_SCHEMA


def test_draft_07_by_default_and_the_draft_schema_names() -> None:
    old_style = schema({"type": "array", "items": [{"type": "integer"}], "additionalItems": False})
    old_style.validate([1])
    with pytest.raises(InvalidValue):
        old_style.validate([1, 2])
    newer = schema(
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "array",
            "prefixItems": [{"type": "integer"}],
            "items": False,
        }
    )
    newer.validate([1])
    with pytest.raises(InvalidValue):
        newer.validate([1, 2])


def test_values_validate_encode_and_decode() -> None:
    person = schema(PERSON)
    value = {"name": "ada", "age": 36, "tags": ["x"]}
    person.validate(value)
    payload = person.encode(value)
    assert payload == b'{"name":"ada","age":36,"tags":["x"]}'
    assert person.decode(payload) == value
    assert person.decode('{"name": "\u00e9"}'.encode()) == {"name": "\u00e9"}


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"age": 1}, "at '/'"),
        ({"name": "a" * 11}, "at '/name'"),
        ({"name": "a", "age": -1}, "at '/age'"),
        ({"name": "a", "age": 1.5}, "at '/age'"),
        ({"name": "a", "tags": ["x", 2]}, "at '/tags/1'"),
        ({"name": "a", "extra": 1}, "at '/'"),
        ([], "at '/'"),
    ],
)
def test_values_the_schema_does_not_allow_are_invalid(value: Any, where: str) -> None:
    person = schema(PERSON)
    with pytest.raises(InvalidValue, match=where):
        person.validate(value)
    with pytest.raises(InvalidValue):
        person.encode(value)
    with pytest.raises(InvalidValue):
        person.decode(json.dumps(value).encode())


ROOT_RELATIVE = {  # each names a location from its root: a list of them checks value by value
    "$ref": "#/definitions/name",
    "definitions": {"name": {"type": "string", "maxLength": 3}},
}
ANCHORED = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {"small": {"$anchor": "small", "type": "integer", "maximum": 9}},
    "type": "array",
    "items": {"$ref": "#small"},
}
OLD_ID = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "id": "http://example.com/root.json",
    "type": "object",
    "properties": {"n": {"$ref": "#/definitions/n"}},
    "definitions": {"n": {"type": "integer"}},
}
TREE = {
    "type": "object",
    "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#"}},
    },
}
DRAFT_2020 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "unevaluatedProperties": False,
}


@pytest.mark.parametrize(
    ("document", "values"),
    [
        (PERSON, [{"name": "ada"}, {"name": "a", "age": 2, "tags": []}]),
        (PERSON, [{"name": "ada"}, {"name": "a", "age": -2}]),
        (PERSON, [{"name": "ada"}, []]),
        (PERSON, []),
        (True, [1, "x", []]),
        (False, [1]),
        ({"type": "integer"}, [1, 2, 3.5]),
        ({"type": "integer"}, [1, 2, 3]),
        (ROOT_RELATIVE, ["abc", "ab"]),
        (ROOT_RELATIVE, ["abc", "abcd"]),
        (TREE, [{"value": 1, "children": [{"value": 2}]}]),
        (TREE, [{"value": 1, "children": [{"value": "x"}]}]),
        (ANCHORED, [[1, 2], [9]]),
        (ANCHORED, [[1, 2], [10]]),
        (OLD_ID, [{"n": 1}]),
        (OLD_ID, [{"n": 1}, {"n": "x"}]),
        (DRAFT_2020, [{"n": 1}]),
        (DRAFT_2020, [{"n": 1}, {"n": 1, "m": 2}]),
    ],
)
def test_a_list_of_values_is_valid_when_each_value_is(document: Any, values: list[Any]) -> None:
    parsed = schema(document)
    each = []
    for value in values:
        try:
            parsed.validate(value)
            each.append(True)
        except InvalidValue:
            each.append(False)
    assert parsed.all_valid_at([{"value": v, "key": "k"} for v in values], "value") is all(each)


@pytest.mark.parametrize("document", [True, {"type": "string"}, ROOT_RELATIVE])
@pytest.mark.parametrize(
    "objects",
    [[{"value": "ab"}, {"value": None}], [{"value": "ab"}, {"key": "k"}], [{"value": "ab"}, []]],
)
def test_a_list_with_a_null_a_missing_value_or_not_an_object_is_not_valid(
    document: Any, objects: list[Any]
) -> None:
    assert schema(document).all_valid_at(objects, "value") is False
    assert schema(document).all_valid_at(objects[:1], "value") is True


@pytest.mark.parametrize("payload", [b"", b"{", b"\xff", b"[" * 100_000])
def test_payloads_that_are_not_json_are_invalid(payload: bytes) -> None:
    with pytest.raises(InvalidValue):
        schema(True).decode(payload)


def test_ref_names_a_reference_and_a_definition_inside_it() -> None:
    address = schema(
        {
            "type": "object",
            "properties": {"city": {"$ref": "#/definitions/city"}},
            "required": ["city"],
            "definitions": {"city": {"type": "string", "minLength": 1}},
        }
    )
    person = schema(
        {
            "type": "object",
            "properties": {
                "home": {"$ref": "address.json"},
                "city": {"$ref": "address.json#/definitions/city"},
            },
        },
        {"address.json": address},
    )
    person.validate({"home": {"city": "Paris"}, "city": "Lyon"})
    with pytest.raises(InvalidValue, match="at '/home/city'"):
        person.validate({"home": {"city": ""}})
    with pytest.raises(InvalidValue, match="at '/city'"):
        person.validate({"city": 3})


@pytest.mark.parametrize(
    "ref", ["http://127.0.0.1:1/x.json", "file:///etc/passwd", "https://json-schema.org/x.json"]
)
def test_a_ref_outside_the_references_is_never_fetched(ref: str) -> None:
    with pytest.raises(SchemaError, match="is not one of the schema's references") as refused:
        schema({"properties": {"a": {"$ref": ref}}})
    assert refused.value.error_code == INVALID_SCHEMA


def test_references_of_references_resolve() -> None:
    city = schema({"type": "string", "minLength": 1})
    address = schema(
        {"type": "object", "properties": {"city": {"$ref": "city.json"}}}, {"city.json": city}
    )
    person = schema({"properties": {"home": {"$ref": "address.json"}}}, {"address.json": address})
    with pytest.raises(InvalidValue, match="at '/home/city'"):
        person.validate({"home": {"city": ""}})
    assert person.reference_depth == 2


def test_a_reference_of_another_type_is_refused() -> None:
    avro = parse("AVRO", '"string"', {})
    with pytest.raises(SchemaError, match="is AVRO, not JSON"):
        schema({"$ref": "a.avsc"}, {"a.avsc": avro})


def test_a_recursive_schema_validates_and_compares() -> None:
    tree = schema(
        {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#"}},
            },
        }
    )
    tree.validate({"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]})
    with pytest.raises(InvalidValue, match="at '/children/0/children/0/value'"):
        tree.validate({"children": [{"children": [{"value": "x"}]}]})
    assert tree.incompatibilities(tree) == []


def test_bytes_decode_with_confluent_kafka_json_serde() -> None:
    client = MockSchemaRegistryClient({"url": "mock://json-types"})
    text = json.dumps(PERSON)
    value = {"name": "ada", "age": 36, "tags": ["x"]}
    context = SerializationContext("t", MessageField.VALUE)
    theirs = JSONSerializer(text, client)(value, context)
    assert theirs is not None
    schema_id, payload = wire.unframe(theirs)
    ours = schema(PERSON)
    assert ours.decode(payload) == value
    assert JSONDeserializer(text)(wire.frame(schema_id, ours.encode(value)), context) == value


def test_a_schema_nested_too_deep_is_refused() -> None:
    deep: Any = {"type": "string"}
    for _ in range(limits.MAX_DEPTH):
        deep = {"items": deep}
    with pytest.raises(SchemaError, match="nested more than 64 levels") as refused:
        schema(deep)
    assert refused.value.error_code == INVALID_SCHEMA


def test_an_enum_too_large_and_a_text_too_long_are_refused() -> None:
    with pytest.raises(SchemaError, match="an enum has 10001 symbols"):
        schema({"enum": list(range(limits.MAX_ENUM_SYMBOLS + 1))})
    with pytest.raises(SchemaError, match="more than the limit"):
        schema({"description": "x" * limits.MAX_SCHEMA_CHARS})


def test_references_nested_too_deep_are_refused() -> None:
    current = schema({"type": "integer"})
    with pytest.raises(SchemaError, match="references nest more than 32 deep"):
        for i in range(limits.MAX_REFERENCE_DEPTH + 1):
            current = schema({"$ref": f"r{i}.json"}, {f"r{i}.json": current})


@pytest.mark.parametrize(
    ("reader", "writer", "kind"),
    [
        ({"type": "integer"}, {"type": "number"}, "TYPE_NARROWED"),
        ({"type": "string"}, {"type": "integer"}, "TYPE_CHANGED"),
        ({"type": "string", "maxLength": 5}, {"type": "string"}, "MAX_LENGTH_ADDED"),
        (
            {"type": "string", "maxLength": 5},
            {"type": "string", "maxLength": 9},
            "MAX_LENGTH_DECREASED",
        ),
        ({"type": "integer", "minimum": 5}, {"type": "integer", "minimum": 1}, "MINIMUM_INCREASED"),
        (
            {"type": "integer", "exclusiveMaximum": 5},
            {"type": "integer"},
            "EXCLUSIVE_MAXIMUM_ADDED",
        ),
        ({"type": "array", "minItems": 2}, {"type": "array", "minItems": 1}, "MIN_ITEMS_INCREASED"),
        (
            {"type": "integer", "multipleOf": 4},
            {"type": "integer", "multipleOf": 2},
            "MULTIPLE_OF_CHANGED",
        ),
        ({"type": "string", "pattern": "^a"}, {"type": "string"}, "PATTERN_ADDED"),
        ({"enum": ["a"]}, {"enum": ["a", "b"]}, "ENUM_ARRAY_NARROWED"),
        ({"type": "array", "uniqueItems": True}, {"type": "array"}, "UNIQUE_ITEMS_ADDED"),
        (
            {"type": "object", "properties": {"a": {}}, "required": ["a"]},
            {"type": "object", "properties": {"a": {}}},
            "REQUIRED_ATTRIBUTE_ADDED",
        ),
        (
            {"type": "object", "additionalProperties": False},
            {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
            "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}},
            {"type": "object"},
            "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
        ),
        (
            {"type": "object", "additionalProperties": False},
            {"type": "object"},
            "ADDITIONAL_PROPERTIES_REMOVED",
        ),
        (
            {"oneOf": [{"type": "string"}]},
            {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "SUM_TYPE_NARROWED",
        ),
        (
            {"allOf": [{"type": "integer"}, {"minimum": 1}]},
            {"allOf": [{"type": "integer"}]},
            "PRODUCT_TYPE_EXTENDED",
        ),
    ],
)
def test_incompatibilities_name_confluents_change_type(reader: Any, writer: Any, kind: str) -> None:
    found = schema(reader).incompatibilities(schema(writer))
    assert any(f"errorType:'{kind}'" in message for message in found), found
    assert schema(reader).incompatibilities(schema(reader)) == []


def test_widening_is_compatible() -> None:
    pairs = [
        ({"type": "number"}, {"type": "integer"}),
        ({"type": "string", "maxLength": 9}, {"type": "string", "maxLength": 5}),
        ({"enum": ["a", "b"]}, {"enum": ["a"]}),
        ({"type": "integer", "multipleOf": 2}, {"type": "integer", "multipleOf": 4}),
        ({"type": ["string", "null"]}, {"type": "string"}),
        (
            {"type": "object", "properties": {"a": {}, "b": {"default": 1}}, "required": ["b"]},
            {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
        ),
    ]
    for reader, writer in pairs:
        assert schema(reader).incompatibilities(schema(writer)) == [], (reader, writer)


def test_combinators_nested_in_combinators_compare_in_bounded_time() -> None:
    definitions: dict[str, Any] = {"d0": {"type": "string"}}
    for i in range(1, 40):
        below = {"$ref": f"#/definitions/d{i - 1}"}
        definitions[f"d{i}"] = {"anyOf": [below, {"type": "object", "properties": {"x": below}}]}
    reader = schema({"definitions": definitions, "$ref": "#/definitions/d39"})
    writer = schema(
        {"definitions": {**definitions, "d0": {"type": "integer"}}, "$ref": "#/definitions/d39"}
    )
    assert reader.incompatibilities(reader) == []
    assert "SUM_TYPE_NARROWED" in reader.incompatibilities(writer)[0]

    def inline(depth: int, kind: str) -> Any:
        node: Any = {"type": kind}
        for i in range(depth):
            node = {"anyOf": [node, {"type": "object", "properties": {f"a{i}": node}}]}
        return node

    found = schema(inline(12, "string")).incompatibilities(schema(inline(12, "integer")))
    assert found == [
        "{errorType:'COMPARISON_TOO_COMPLEX', jsonPath:'#', description:'the schemas need more "
        "than 20000 subschema comparisons'}"
    ]


def test_ref_to_references_compares_their_targets() -> None:
    narrow = schema({"type": "string", "maxLength": 5})
    wide = schema({"type": "string"})
    reader = schema({"properties": {"a": {"$ref": "s.json"}}}, {"s.json": narrow})
    writer = schema({"properties": {"a": {"$ref": "s.json"}}}, {"s.json": wide})
    assert "MAX_LENGTH_ADDED" in reader.incompatibilities(writer)[0]
    assert writer.incompatibilities(reader) == []


DIVERGENCES = {
    # A `false` writer writes nothing, so every reader reads all it wrote; Karapace flags these.
    ("A_INT_OBJECT_SCHEMA", "FALSE_SCHEMA"),
    ("A_INT_B_INT_REQUIRED_OBJECT_SCHEMA", "FALSE_SCHEMA"),
    ("FALSE_SCHEMA", "NOT_OF_TRUE_SCHEMA"),
    ("NOT_OF_TRUE_SCHEMA", "FALSE_SCHEMA"),
    ("NOT_OF_EMPTY_SCHEMA", "FALSE_SCHEMA"),
    ("FALSE_SCHEMA", "NOT_OF_EMPTY_SCHEMA"),
    ("TRUE_SCHEMA", "NOT_OF_EMPTY_SCHEMA"),
    ("TRUE_SCHEMA", "NOT_OF_TRUE_SCHEMA"),
    # A `false` reader refuses what a `true` writer wrote; Karapace lets it pass.
    ("FALSE_SCHEMA", "TRUE_SCHEMA"),
    # A new property or pattern whose schema accepts anything restricts nothing.
    ("PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA", "B_INT_OBJECT_SCHEMA"),
    ("A_OBJECT_SCHEMA", "OBJECT_SCHEMA"),
    ("A_OBJECT_SCHEMA", "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA"),
}


KARAPACE_SCHEMAS: dict[str, Any] = {
    "ARRAY_OF_INT_SCHEMA": {"type": "array", "items": {"type": "integer"}},
    "ARRAY_OF_NUMBER_SCHEMA": {"type": "array", "items": {"type": "number"}},
    "ARRAY_OF_POSITIVE_INTEGER": {
        "type": "array",
        "items": {"type": "integer", "exclusiveMinimum": 0},
    },
    "ARRAY_OF_POSITIVE_INTEGER_THROUGH_REF": {
        "type": "array",
        "items": {"$ref": "#/$defs/positiveInteger"},
        "$defs": {"positiveInteger": {"type": "integer", "exclusiveMinimum": 0}},
    },
    "ARRAY_OF_STRING_SCHEMA": {"type": "array", "items": {"type": "string"}},
    "ARRAY_SCHEMA": {"type": "array"},
    "A_DINT_B_DINT_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "a": {"type": "integer", "default": 0},
            "b": {"type": "integer", "default": 0},
        },
    },
    "A_DINT_B_INT_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "integer", "default": 0}, "b": {"type": "integer"}},
    },
    "A_DINT_B_NUM_C_DINT_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "a": {"type": "integer", "default": 1},
            "b": {"type": "number"},
            "c": {"type": "integer", "default": 0},
        },
    },
    "A_DINT_B_NUM_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "integer", "default": 1}, "b": {"type": "number"}},
    },
    "A_DINT_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "integer", "default": 0}},
    },
    "A_INT_B_DINT_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 0}},
    },
    "A_INT_B_DINT_REQUIRED_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "required": ["b"],
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 0}},
    },
    "A_INT_B_INT_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    },
    "A_INT_B_INT_REQUIRED_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "required": ["b"],
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    },
    "A_INT_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "integer"}},
    },
    "A_INT_OPEN_OBJECT_SCHEMA": {"type": "object", "properties": {"a": {"type": "integer"}}},
    "A_INT_OR_BOOL_OBJECT_SCHEMA": {
        "type": "object",
        "properties": {"a": {"type": ["integer", "boolean"]}},
    },
    "A_OBJECT_SCHEMA": {"type": "object", "properties": {"a": {}}},
    "A_STRING_OBJECT_SCHEMA": {"type": "object", "properties": {"a": {"type": "string"}}},
    "A_STRING_OR_NULL_OBJECT_SCHEMA": {
        "type": "object",
        "properties": {"a": {"type": ["string", "null"]}},
    },
    "BOOLEAN_SCHEMA": {"type": "boolean"},
    "B_DINT_OPEN_OBJECT_SCHEMA": {
        "type": "object",
        "properties": {"b": {"type": "integer", "default": 0}},
    },
    "B_INT_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"b": {"type": "integer"}},
    },
    "B_INT_OPEN_OBJECT_SCHEMA": {"type": "object", "properties": {"b": {"type": "integer"}}},
    "B_NUM_C_DINT_OPEN_OBJECT_SCHEMA": {
        "type": "object",
        "properties": {"b": {"type": "number"}, "c": {"type": "integer", "default": 0}},
    },
    "B_NUM_C_INT_OBJECT_SCHEMA": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"b": {"type": "number"}, "c": {"type": "integer"}},
    },
    "B_NUM_C_INT_OPEN_OBJECT_SCHEMA": {
        "type": "object",
        "properties": {"b": {"type": "number"}, "c": {"type": "integer"}},
    },
    "EMPTY_OBJECT_SCHEMA": {"type": "object", "additionalProperties": False},
    "EMPTY_SCHEMA": {},
    "ENUM_ABC_SCHEMA": {"enum": ["A", "B", "C"]},
    "ENUM_AB_SCHEMA": {"enum": ["A", "B"]},
    "ENUM_BC_SCHEMA": {"enum": ["B", "C"]},
    "EVERY_TYPE_SCHEMA": {
        "type": "object",
        "required": ["boolF", "intF", "numberF", "stringF", "enumF", "arrayF", "recordF"],
        "properties": {
            "recordF": {"type": "object", "properties": {"f": {"type": "number"}}},
            "stringF": {"type": "string"},
            "boolF": {"type": "boolean"},
            "intF": {"type": "integer"},
            "enumF": {"enum": ["S"]},
            "arrayF": {"type": "array", "items": {"type": "string"}},
            "numberF": {"type": "number"},
            "bool0": {"type": "boolean"},
        },
    },
    "EXCLUSIVE_MAXIMUM_DECREASED_INTEGER_SCHEMA": {"type": "integer", "exclusiveMaximum": 23},
    "EXCLUSIVE_MAXIMUM_DECREASED_NUMBER_SCHEMA": {"type": "number", "exclusiveMaximum": 23},
    "EXCLUSIVE_MAXIMUM_INTEGER_SCHEMA": {"type": "integer", "exclusiveMaximum": 29},
    "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA": {"type": "number", "exclusiveMaximum": 29},
    "EXCLUSIVE_MINIMUM_INCREASED_INTEGER_SCHEMA": {"type": "integer", "exclusiveMinimum": 37},
    "EXCLUSIVE_MINIMUM_INCREASED_NUMBER_SCHEMA": {"type": "number", "exclusiveMinimum": 37},
    "EXCLUSIVE_MINIMUM_INTEGER_SCHEMA": {"type": "integer", "exclusiveMinimum": 31},
    "EXCLUSIVE_MINIMUM_NUMBER_SCHEMA": {"type": "number", "exclusiveMinimum": 31},
    "FALSE_SCHEMA": False,
    "INT_SCHEMA": {"type": "integer"},
    "MAXIMUM_DECREASED_INTEGER_SCHEMA": {"type": "integer", "maximum": 11},
    "MAXIMUM_DECREASED_NUMBER_SCHEMA": {"type": "number", "maximum": 11},
    "MAXIMUM_INTEGER_SCHEMA": {"type": "integer", "maximum": 13},
    "MAXIMUM_NUMBER_SCHEMA": {"type": "number", "maximum": 13},
    "MAX_ITEMS_DECREASED_SCHEMA": {"type": "array", "maxItems": 59},
    "MAX_ITEMS_SCHEMA": {"type": "array", "maxItems": 61},
    "MAX_LENGTH_DECREASED_SCHEMA": {"type": "string", "maxLength": 2},
    "MAX_LENGTH_SCHEMA": {"type": "string", "maxLength": 3},
    "MAX_PROPERTIES_DECREASED_SCHEMA": {"type": "object", "maxProperties": 41},
    "MAX_PROPERTIES_SCHEMA": {"type": "object", "maxProperties": 43},
    "MINIMUM_INCREASED_INTEGER_SCHEMA": {"type": "integer", "minimum": 19},
    "MINIMUM_INCREASED_NUMBER_SCHEMA": {"type": "number", "minimum": 19},
    "MINIMUM_INTEGER_SCHEMA": {"type": "integer", "minimum": 17},
    "MINIMUM_NUMBER_SCHEMA": {"type": "number", "minimum": 17},
    "MIN_ITEMS_INCREASED_SCHEMA": {"type": "array", "minItems": 71},
    "MIN_ITEMS_SCHEMA": {"type": "array", "minItems": 67},
    "MIN_LENGTH_INCREASED_SCHEMA": {"type": "string", "minLength": 7},
    "MIN_LENGTH_SCHEMA": {"type": "string", "minLength": 5},
    "MIN_PATTERN_SCHEMA": {"type": "string", "pattern": "a*"},
    "MIN_PATTERN_STRICT_SCHEMA": {"type": "string", "pattern": "a+"},
    "MIN_PROPERTIES_INCREASED_SCHEMA": {"type": "object", "minProperties": 53},
    "MIN_PROPERTIES_SCHEMA": {"type": "object", "minProperties": 47},
    "NOT_ARRAY_SCHEMA": {"not": {"type": "array"}},
    "NOT_BOOLEAN_SCHEMA": {"not": {"type": "boolean"}},
    "NOT_INT_SCHEMA": {"not": {"type": "integer"}},
    "NOT_NUMBER_SCHEMA": {"not": {"type": "number"}},
    "NOT_OBJECT_SCHEMA": {"not": {"type": "object"}},
    "NOT_OF_EMPTY_SCHEMA": {"not": {}},
    "NOT_OF_TRUE_SCHEMA": {"not": True},
    "NOT_STRING_SCHEMA": {"not": {"type": "string"}},
    "NUMBER_SCHEMA": {"type": "number"},
    "OBJECT_SCHEMA": {"type": "object"},
    "ONEOF_ARRAY_A_DINT_B_NUM_SCHEMA": {
        "oneOf": [
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"a": {"type": "integer", "default": 1}, "b": {"type": "number"}},
                },
            }
        ]
    },
    "ONEOF_ARRAY_B_NUM_C_DINT_OPEN_SCHEMA": {
        "oneOf": [
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"b": {"type": "number"}, "c": {"type": "integer", "default": 0}},
                },
            }
        ]
    },
    "ONEOF_ARRAY_B_NUM_C_INT_SCHEMA": {
        "oneOf": [
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"b": {"type": "number"}, "c": {"type": "integer"}},
                },
            }
        ]
    },
    "ONEOF_INT_SCHEMA": {"oneOf": [{"type": "integer"}]},
    "ONEOF_NUMBER_SCHEMA": {"oneOf": [{"type": "number"}]},
    "ONEOF_STRING_INT_SCHEMA": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "ONEOF_STRING_SCHEMA": {"oneOf": [{"type": "string"}]},
    "PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA": {"type": "object", "patternProperties": {"^a*": {}}},
    "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA": {"type": "object", "propertyNames": {"pattern": "a*"}},
    "STRING_SCHEMA": {"type": "string"},
    "TRUE_SCHEMA": True,
    "TUPLE_OF_INT_INT_OPEN_SCHEMA": {
        "type": "array",
        "items": [{"type": "integer"}, {"type": "integer"}],
    },
    "TUPLE_OF_INT_INT_SCHEMA": {
        "type": "array",
        "items": [{"type": "integer"}, {"type": "integer"}],
        "additionalItems": False,
    },
    "TUPLE_OF_INT_OPEN_SCHEMA": {"type": "array", "items": [{"type": "integer"}]},
    "TUPLE_OF_INT_SCHEMA": {
        "type": "array",
        "items": [{"type": "integer"}],
        "additionalItems": False,
    },
    "TUPLE_OF_INT_WITH_ADDITIONAL_INT_SCHEMA": {
        "type": "array",
        "items": [{"type": "integer"}],
        "additionalItems": {"type": "integer"},
    },
    "TYPES_INT_BOOL_SCHEMA": {"type": ["integer", "boolean"]},
    "TYPES_STRING_INT_SCHEMA": {"type": ["string", "integer"]},
    "TYPES_STRING_NULL_BOOL_SCHEMA": {"type": ["string", "null", "boolean"]},
    "TYPES_STRING_NULL_SCHEMA": {"type": ["string", "null"]},
    "TYPES_STRING_SCHEMA": {"type": ["string"]},
}
# Every schema is compatible with itself.
SELF_COMPATIBLE = (
    "EVERY_TYPE_SCHEMA",
    "NOT_OF_EMPTY_SCHEMA",
    "NOT_OF_TRUE_SCHEMA",
    "FALSE_SCHEMA",
    "TRUE_SCHEMA",
    "EMPTY_SCHEMA",
    "BOOLEAN_SCHEMA",
    "INT_SCHEMA",
    "NUMBER_SCHEMA",
    "STRING_SCHEMA",
    "OBJECT_SCHEMA",
    "ARRAY_SCHEMA",
    "NOT_BOOLEAN_SCHEMA",
    "NOT_INT_SCHEMA",
    "NOT_NUMBER_SCHEMA",
    "NOT_STRING_SCHEMA",
    "NOT_OBJECT_SCHEMA",
    "NOT_ARRAY_SCHEMA",
    "MAX_LENGTH_SCHEMA",
    "MAX_LENGTH_DECREASED_SCHEMA",
    "MIN_LENGTH_SCHEMA",
    "MIN_LENGTH_INCREASED_SCHEMA",
    "MIN_PATTERN_SCHEMA",
    "MIN_PATTERN_STRICT_SCHEMA",
    "MAXIMUM_INTEGER_SCHEMA",
    "MAXIMUM_NUMBER_SCHEMA",
    "MAXIMUM_DECREASED_INTEGER_SCHEMA",
    "MAXIMUM_DECREASED_NUMBER_SCHEMA",
    "MINIMUM_INTEGER_SCHEMA",
    "MINIMUM_NUMBER_SCHEMA",
    "MINIMUM_INCREASED_INTEGER_SCHEMA",
    "MINIMUM_INCREASED_NUMBER_SCHEMA",
    "EXCLUSIVE_MAXIMUM_INTEGER_SCHEMA",
    "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA",
    "EXCLUSIVE_MAXIMUM_DECREASED_INTEGER_SCHEMA",
    "EXCLUSIVE_MAXIMUM_DECREASED_NUMBER_SCHEMA",
    "EXCLUSIVE_MINIMUM_INTEGER_SCHEMA",
    "EXCLUSIVE_MINIMUM_NUMBER_SCHEMA",
    "EXCLUSIVE_MINIMUM_INCREASED_INTEGER_SCHEMA",
    "EXCLUSIVE_MINIMUM_INCREASED_NUMBER_SCHEMA",
    "MAX_PROPERTIES_SCHEMA",
    "MAX_PROPERTIES_DECREASED_SCHEMA",
    "MIN_PROPERTIES_SCHEMA",
    "MIN_PROPERTIES_INCREASED_SCHEMA",
    "MAX_ITEMS_SCHEMA",
    "MAX_ITEMS_DECREASED_SCHEMA",
    "MIN_ITEMS_SCHEMA",
    "MIN_ITEMS_INCREASED_SCHEMA",
    "TUPLE_OF_INT_INT_SCHEMA",
    "TUPLE_OF_INT_SCHEMA",
    "TUPLE_OF_INT_WITH_ADDITIONAL_INT_SCHEMA",
    "TUPLE_OF_INT_OPEN_SCHEMA",
    "ARRAY_OF_INT_SCHEMA",
    "ARRAY_OF_NUMBER_SCHEMA",
    "ARRAY_OF_STRING_SCHEMA",
    "ENUM_AB_SCHEMA",
    "ENUM_ABC_SCHEMA",
    "ENUM_BC_SCHEMA",
    "ONEOF_STRING_SCHEMA",
    "ONEOF_STRING_INT_SCHEMA",
    "EMPTY_OBJECT_SCHEMA",
    "A_INT_OBJECT_SCHEMA",
    "A_INT_OPEN_OBJECT_SCHEMA",
    "A_INT_B_INT_OBJECT_SCHEMA",
    "A_INT_B_INT_REQUIRED_OBJECT_SCHEMA",
    "A_INT_B_DINT_OBJECT_SCHEMA",
    "A_INT_B_DINT_REQUIRED_OBJECT_SCHEMA",
    "A_DINT_B_DINT_OBJECT_SCHEMA",
    "A_DINT_B_NUM_OBJECT_SCHEMA",
    "A_DINT_B_NUM_C_DINT_OBJECT_SCHEMA",
    "B_NUM_C_DINT_OPEN_OBJECT_SCHEMA",
    "B_NUM_C_INT_OBJECT_SCHEMA",
    "ARRAY_OF_POSITIVE_INTEGER",
    "ARRAY_OF_POSITIVE_INTEGER_THROUGH_REF",
)
KARAPACE_CASES: list[tuple[str, str, bool]] = [
    *((name, name, True) for name in SELF_COMPATIBLE),
    ("OBJECT_SCHEMA", "A_INT_OBJECT_SCHEMA", True),
    ("TRUE_SCHEMA", "A_INT_OBJECT_SCHEMA", True),
    ("EMPTY_SCHEMA", "A_INT_OBJECT_SCHEMA", True),
    ("B_INT_OPEN_OBJECT_SCHEMA", "A_INT_OBJECT_SCHEMA", True),
    ("A_INT_B_INT_OBJECT_SCHEMA", "A_INT_OBJECT_SCHEMA", True),
    ("A_DINT_B_NUM_C_DINT_OBJECT_SCHEMA", "A_DINT_B_NUM_OBJECT_SCHEMA", True),
    ("B_NUM_C_DINT_OPEN_OBJECT_SCHEMA", "A_DINT_B_NUM_C_DINT_OBJECT_SCHEMA", True),
    ("B_NUM_C_INT_OPEN_OBJECT_SCHEMA", "A_DINT_B_NUM_OBJECT_SCHEMA", True),
    ("B_NUM_C_DINT_OPEN_OBJECT_SCHEMA", "A_DINT_B_NUM_OBJECT_SCHEMA", True),
    ("A_INT_OBJECT_SCHEMA", "FALSE_SCHEMA", False),
    ("NOT_OF_TRUE_SCHEMA", "A_INT_OBJECT_SCHEMA", False),
    ("NOT_OF_EMPTY_SCHEMA", "A_INT_OBJECT_SCHEMA", False),
    ("B_INT_OBJECT_SCHEMA", "A_INT_OBJECT_SCHEMA", False),
    ("B_NUM_C_INT_OBJECT_SCHEMA", "A_DINT_B_NUM_OBJECT_SCHEMA", False),
    ("B_NUM_C_INT_OBJECT_SCHEMA", "A_DINT_B_NUM_C_DINT_OBJECT_SCHEMA", False),
    ("A_INT_B_INT_REQUIRED_OBJECT_SCHEMA", "A_INT_OBJECT_SCHEMA", False),
    ("A_INT_OBJECT_SCHEMA", "A_INT_B_DINT_REQUIRED_OBJECT_SCHEMA", False),
    ("OBJECT_SCHEMA", "A_DINT_OBJECT_SCHEMA", True),
    ("TRUE_SCHEMA", "A_DINT_OBJECT_SCHEMA", True),
    ("EMPTY_SCHEMA", "A_DINT_OBJECT_SCHEMA", True),
    ("B_DINT_OPEN_OBJECT_SCHEMA", "A_INT_OBJECT_SCHEMA", True),
    ("A_INT_B_DINT_OBJECT_SCHEMA", "A_INT_OBJECT_SCHEMA", True),
    ("A_DINT_B_INT_OBJECT_SCHEMA", "A_INT_OBJECT_SCHEMA", True),
    ("A_DINT_B_DINT_OBJECT_SCHEMA", "A_INT_OBJECT_SCHEMA", True),
    ("A_DINT_B_DINT_OBJECT_SCHEMA", "EMPTY_OBJECT_SCHEMA", True),
    ("FALSE_SCHEMA", "TRUE_SCHEMA", True),
    ("TRUE_SCHEMA", "FALSE_SCHEMA", True),
    ("B_NUM_C_INT_OBJECT_SCHEMA", "B_NUM_C_DINT_OPEN_OBJECT_SCHEMA", False),
    ("ONEOF_ARRAY_B_NUM_C_INT_SCHEMA", "ONEOF_ARRAY_A_DINT_B_NUM_SCHEMA", False),
    ("ONEOF_ARRAY_B_NUM_C_DINT_OPEN_SCHEMA", "ONEOF_ARRAY_A_DINT_B_NUM_SCHEMA", True),
    ("TUPLE_OF_INT_OPEN_SCHEMA", "ARRAY_OF_INT_SCHEMA", False),
    ("ARRAY_OF_INT_SCHEMA", "TUPLE_OF_INT_OPEN_SCHEMA", False),
    ("NUMBER_SCHEMA", "INT_SCHEMA", True),
    ("ARRAY_OF_NUMBER_SCHEMA", "ARRAY_OF_INT_SCHEMA", True),
    ("TUPLE_OF_INT_OPEN_SCHEMA", "TUPLE_OF_INT_SCHEMA", True),
    ("TUPLE_OF_INT_WITH_ADDITIONAL_INT_SCHEMA", "TUPLE_OF_INT_SCHEMA", True),
    ("ENUM_ABC_SCHEMA", "ENUM_AB_SCHEMA", True),
    ("ONEOF_STRING_INT_SCHEMA", "ONEOF_STRING_SCHEMA", True),
    ("ONEOF_STRING_INT_SCHEMA", "STRING_SCHEMA", True),
    ("A_INT_OPEN_OBJECT_SCHEMA", "A_INT_B_INT_OBJECT_SCHEMA", True),
    ("TUPLE_OF_INT_OPEN_SCHEMA", "TUPLE_OF_INT_INT_OPEN_SCHEMA", True),
    ("TUPLE_OF_INT_OPEN_SCHEMA", "TUPLE_OF_INT_INT_SCHEMA", True),
    ("ONEOF_STRING_SCHEMA", "STRING_SCHEMA", True),
    ("STRING_SCHEMA", "ONEOF_STRING_SCHEMA", True),
    ("A_INT_OBJECT_SCHEMA", "EMPTY_OBJECT_SCHEMA", True),
    ("INT_SCHEMA", "NUMBER_SCHEMA", False),
    ("ARRAY_OF_INT_SCHEMA", "ARRAY_OF_NUMBER_SCHEMA", False),
    ("ENUM_AB_SCHEMA", "ENUM_ABC_SCHEMA", False),
    ("ENUM_BC_SCHEMA", "ENUM_ABC_SCHEMA", False),
    ("ONEOF_INT_SCHEMA", "ONEOF_NUMBER_SCHEMA", False),
    ("ONEOF_STRING_SCHEMA", "ONEOF_STRING_INT_SCHEMA", False),
    ("INT_SCHEMA", "ONEOF_STRING_INT_SCHEMA", False),
    ("BOOLEAN_SCHEMA", "INT_SCHEMA", False),
    ("INT_SCHEMA", "BOOLEAN_SCHEMA", False),
    ("STRING_SCHEMA", "BOOLEAN_SCHEMA", False),
    ("STRING_SCHEMA", "INT_SCHEMA", False),
    ("ARRAY_OF_INT_SCHEMA", "ARRAY_OF_STRING_SCHEMA", False),
    ("TUPLE_OF_INT_INT_SCHEMA", "TUPLE_OF_INT_OPEN_SCHEMA", False),
    ("TUPLE_OF_INT_INT_OPEN_SCHEMA", "TUPLE_OF_INT_OPEN_SCHEMA", False),
    ("INT_SCHEMA", "ENUM_AB_SCHEMA", False),
    ("ENUM_AB_SCHEMA", "INT_SCHEMA", False),
    ("NOT_OF_TRUE_SCHEMA", "NOT_OF_EMPTY_SCHEMA", True),
    ("EMPTY_SCHEMA", "TRUE_SCHEMA", True),
    ("NOT_OF_EMPTY_SCHEMA", "TRUE_SCHEMA", False),
    ("NOT_OF_TRUE_SCHEMA", "TRUE_SCHEMA", False),
    ("A_INT_B_INT_REQUIRED_OBJECT_SCHEMA", "TRUE_SCHEMA", False),
    ("A_INT_B_INT_REQUIRED_OBJECT_SCHEMA", "FALSE_SCHEMA", False),
    ("FALSE_SCHEMA", "NOT_OF_TRUE_SCHEMA", False),
    ("NOT_OF_TRUE_SCHEMA", "FALSE_SCHEMA", False),
    ("NOT_OF_EMPTY_SCHEMA", "FALSE_SCHEMA", False),
    ("FALSE_SCHEMA", "NOT_OF_EMPTY_SCHEMA", False),
    ("TRUE_SCHEMA", "NOT_OF_EMPTY_SCHEMA", False),
    ("TRUE_SCHEMA", "NOT_OF_TRUE_SCHEMA", False),
    ("MAX_LENGTH_SCHEMA", "STRING_SCHEMA", False),
    ("MAX_LENGTH_DECREASED_SCHEMA", "MAX_LENGTH_SCHEMA", False),
    ("MIN_LENGTH_SCHEMA", "STRING_SCHEMA", False),
    ("MIN_LENGTH_INCREASED_SCHEMA", "MIN_LENGTH_SCHEMA", False),
    ("MIN_PATTERN_SCHEMA", "STRING_SCHEMA", False),
    ("MIN_PATTERN_STRICT_SCHEMA", "MIN_PATTERN_SCHEMA", False),
    ("MAXIMUM_INTEGER_SCHEMA", "INT_SCHEMA", False),
    ("MAXIMUM_NUMBER_SCHEMA", "INT_SCHEMA", False),
    ("MAXIMUM_NUMBER_SCHEMA", "NUMBER_SCHEMA", False),
    ("MAXIMUM_DECREASED_NUMBER_SCHEMA", "MAXIMUM_NUMBER_SCHEMA", False),
    ("MINIMUM_NUMBER_SCHEMA", "INT_SCHEMA", False),
    ("MINIMUM_NUMBER_SCHEMA", "NUMBER_SCHEMA", False),
    ("MINIMUM_INCREASED_NUMBER_SCHEMA", "MINIMUM_NUMBER_SCHEMA", False),
    ("EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA", "INT_SCHEMA", False),
    ("EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA", "NUMBER_SCHEMA", False),
    ("EXCLUSIVE_MAXIMUM_DECREASED_NUMBER_SCHEMA", "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA", False),
    ("EXCLUSIVE_MINIMUM_NUMBER_SCHEMA", "NUMBER_SCHEMA", False),
    ("EXCLUSIVE_MINIMUM_NUMBER_SCHEMA", "INT_SCHEMA", False),
    ("EXCLUSIVE_MINIMUM_INCREASED_NUMBER_SCHEMA", "EXCLUSIVE_MINIMUM_NUMBER_SCHEMA", False),
    ("MAX_PROPERTIES_SCHEMA", "OBJECT_SCHEMA", False),
    ("MAX_PROPERTIES_DECREASED_SCHEMA", "MAX_PROPERTIES_SCHEMA", False),
    ("MIN_PROPERTIES_SCHEMA", "OBJECT_SCHEMA", False),
    ("MIN_PROPERTIES_INCREASED_SCHEMA", "MIN_PROPERTIES_SCHEMA", False),
    ("MAX_ITEMS_SCHEMA", "ARRAY_SCHEMA", False),
    ("MAX_ITEMS_DECREASED_SCHEMA", "MAX_ITEMS_SCHEMA", False),
    ("MIN_ITEMS_SCHEMA", "ARRAY_SCHEMA", False),
    ("MIN_ITEMS_INCREASED_SCHEMA", "MIN_ITEMS_SCHEMA", False),
    ("STRING_SCHEMA", "MAX_LENGTH_SCHEMA", True),
    ("MAX_LENGTH_SCHEMA", "MAX_LENGTH_DECREASED_SCHEMA", True),
    ("STRING_SCHEMA", "MIN_LENGTH_SCHEMA", True),
    ("MIN_LENGTH_SCHEMA", "MIN_LENGTH_INCREASED_SCHEMA", True),
    ("STRING_SCHEMA", "MIN_PATTERN_SCHEMA", True),
    ("INT_SCHEMA", "MAXIMUM_INTEGER_SCHEMA", True),
    ("NUMBER_SCHEMA", "MAXIMUM_NUMBER_SCHEMA", True),
    ("MAXIMUM_NUMBER_SCHEMA", "MAXIMUM_DECREASED_NUMBER_SCHEMA", True),
    ("INT_SCHEMA", "MINIMUM_INTEGER_SCHEMA", True),
    ("NUMBER_SCHEMA", "MINIMUM_NUMBER_SCHEMA", True),
    ("MINIMUM_NUMBER_SCHEMA", "MINIMUM_INCREASED_NUMBER_SCHEMA", True),
    ("INT_SCHEMA", "EXCLUSIVE_MAXIMUM_INTEGER_SCHEMA", True),
    ("NUMBER_SCHEMA", "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA", True),
    ("EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA", "EXCLUSIVE_MAXIMUM_DECREASED_NUMBER_SCHEMA", True),
    ("NUMBER_SCHEMA", "EXCLUSIVE_MINIMUM_NUMBER_SCHEMA", True),
    ("INT_SCHEMA", "EXCLUSIVE_MINIMUM_INTEGER_SCHEMA", True),
    ("EXCLUSIVE_MINIMUM_NUMBER_SCHEMA", "EXCLUSIVE_MINIMUM_INCREASED_NUMBER_SCHEMA", True),
    ("OBJECT_SCHEMA", "MAX_PROPERTIES_SCHEMA", True),
    ("MAX_PROPERTIES_SCHEMA", "MAX_PROPERTIES_DECREASED_SCHEMA", True),
    ("OBJECT_SCHEMA", "MIN_PROPERTIES_SCHEMA", True),
    ("MIN_PROPERTIES_SCHEMA", "MIN_PROPERTIES_INCREASED_SCHEMA", True),
    ("ARRAY_SCHEMA", "MAX_ITEMS_SCHEMA", True),
    ("MAX_ITEMS_SCHEMA", "MAX_ITEMS_DECREASED_SCHEMA", True),
    ("ARRAY_SCHEMA", "MIN_ITEMS_SCHEMA", True),
    ("MIN_ITEMS_SCHEMA", "MIN_ITEMS_INCREASED_SCHEMA", True),
    ("OBJECT_SCHEMA", "PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA", True),
    ("A_OBJECT_SCHEMA", "PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA", True),
    ("PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA", "A_OBJECT_SCHEMA", True),
    ("A_INT_OBJECT_SCHEMA", "PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA", False),
    ("PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA", "B_INT_OBJECT_SCHEMA", False),
    ("A_OBJECT_SCHEMA", "OBJECT_SCHEMA", False),
    ("OBJECT_SCHEMA", "A_OBJECT_SCHEMA", True),
    ("A_INT_OBJECT_SCHEMA", "OBJECT_SCHEMA", False),
    ("B_INT_OBJECT_SCHEMA", "OBJECT_SCHEMA", False),
    ("OBJECT_SCHEMA", "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA", True),
    ("A_OBJECT_SCHEMA", "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA", False),
    ("PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA", "A_OBJECT_SCHEMA", True),
    ("A_INT_OBJECT_SCHEMA", "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA", False),
    ("PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA", "B_INT_OBJECT_SCHEMA", True),
    ("STRING_SCHEMA", "TYPES_STRING_SCHEMA", True),
    ("TYPES_STRING_INT_SCHEMA", "TYPES_STRING_SCHEMA", True),
    ("TYPES_STRING_NULL_SCHEMA", "STRING_SCHEMA", True),
    ("A_STRING_OR_NULL_OBJECT_SCHEMA", "A_STRING_OBJECT_SCHEMA", True),
    ("TYPES_INT_BOOL_SCHEMA", "INT_SCHEMA", True),
    ("TYPES_STRING_NULL_BOOL_SCHEMA", "STRING_SCHEMA", True),
    ("TYPES_STRING_NULL_SCHEMA", "BOOLEAN_SCHEMA", False),
    ("A_STRING_OR_NULL_OBJECT_SCHEMA", "A_INT_OPEN_OBJECT_SCHEMA", False),
    ("A_INT_OR_BOOL_OBJECT_SCHEMA", "A_STRING_OBJECT_SCHEMA", False),
    ("ARRAY_OF_POSITIVE_INTEGER", "ARRAY_OF_POSITIVE_INTEGER_THROUGH_REF", True),
    ("ARRAY_OF_POSITIVE_INTEGER_THROUGH_REF", "ARRAY_OF_POSITIVE_INTEGER", True),
]


@pytest.mark.parametrize(
    ("reader", "writer", "compatible"),
    [case for case in KARAPACE_CASES if case[:2] not in DIVERGENCES],
)
def test_karapace_compatibility_cases(reader: str, writer: str, compatible: bool) -> None:
    found = schema(KARAPACE_SCHEMAS[reader]).incompatibilities(schema(KARAPACE_SCHEMAS[writer]))
    assert (found == []) is compatible, found


@pytest.mark.parametrize(("reader", "writer"), sorted(DIVERGENCES))
def test_karapace_divergences_are_answered_by_what_the_reader_reads(
    reader: str, writer: str
) -> None:
    karapace = next(case[2] for case in KARAPACE_CASES if case[:2] == (reader, writer))
    found = schema(KARAPACE_SCHEMAS[reader]).incompatibilities(schema(KARAPACE_SCHEMAS[writer]))
    assert (found == []) is not karapace, found
