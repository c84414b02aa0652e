"""JSON Schema schemas: `jsonschema` checks a schema against its draft's meta-schema (draft-07
unless `$schema` names another, as Confluent assumes), `jsonschema_rs` compiles it into the
validator values meet on the produce path, and the reader/writer check follows the rules
Confluent and Karapace document for JSON Schema.

Canonical form: the schema's JSON with object keys sorted, compact. A `$ref` names another
schema by its reference name (`"$ref": "address.json"` or `"address.json#/definitions/x"`).
Values are JSON; the payload is the value's UTF-8 JSON text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema_rs

from schemas.errors import INVALID_SCHEMA, SchemaError
from schemas.types import InvalidValue, ParsedSchema, SchemaType, limits, references_of

_COMBINATORS = ("anyOf", "oneOf", "allOf")
_OBJECT_KEYWORDS = frozenset(
    ("properties", "required", "additionalProperties", "patternProperties", "dependencies")
)
_TYPES = frozenset(("null", "boolean", "integer", "number", "string", "array", "object"))
# (keyword, True if a larger reader value narrows what the reader accepts)
_BOUNDS = (
    ("minimum", True),
    ("exclusiveMinimum", True),
    ("minLength", True),
    ("minItems", True),
    ("minProperties", True),
    ("maximum", False),
    ("exclusiveMaximum", False),
    ("maxLength", False),
    ("maxItems", False),
    ("maxProperties", False),
)


class JsonSchema:
    """A parsed JSON Schema with its references' documents and its compiled validator."""

    schema_type: SchemaType = "JSON"
    reference_depth: int
    """How deep its references nest (0: it has none)."""
    resources: dict[str, Any]
    """The documents its `$ref`s may name: its references and theirs, by reference name."""

    def __init__(self, text: str, references: Mapping[str, ParsedSchema]) -> None:
        self.text = text
        self.document = limits.load_json(text)
        if not isinstance(self.document, (dict, bool)):
            raise SchemaError(INVALID_SCHEMA, "a JSON Schema is an object or a boolean")
        typed, depth = references_of(references, JsonSchema, "JSON")
        resources: dict[str, Any] = {}
        for name, reference in typed.items():
            resources.update(reference.resources)
            resources[name] = reference.document
        self.reference_depth = depth
        self.resources = resources
        _check_enums(self.document)
        self._canonical = json.dumps(
            self.document, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        draft = jsonschema.validators.validator_for(self.document, jsonschema.Draft7Validator)
        try:
            draft.check_schema(self.document)
        except jsonschema.exceptions.SchemaError as e:
            where = "/".join(str(part) for part in e.path)
            raise SchemaError(
                INVALID_SCHEMA, f"invalid JSON Schema at '/{where}': {e.message}"
            ) from None
        options: dict[str, Any] = {"retriever": _refuse_retrieval}
        if resources:
            options["registry"] = jsonschema_rs.Registry(
                list(resources.items()), retriever=_refuse_retrieval
            )
        declared = isinstance(self.document, dict) and "$schema" in self.document
        compile_validator = (
            jsonschema_rs.validator_for if declared else jsonschema_rs.Draft7Validator
        )
        try:
            self._validator = compile_validator(self.document, **options)
        except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as e:
            raise SchemaError(INVALID_SCHEMA, f"invalid JSON Schema: {e}") from None
        self._compile = compile_validator
        old_id = draft in (jsonschema.Draft3Validator, jsonschema.Draft4Validator)
        self._nestable = not resources and not _names_a_location(self.document, old_id)
        self._objects_validators: dict[str, Any] = {}

    def canonical(self) -> str:
        """The schema's JSON, keys sorted, compact."""
        return self._canonical

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        """What values `writer` allows that this schema refuses, by Confluent's change types."""
        if not isinstance(writer, JsonSchema):
            return [f"the old schema is {writer.schema_type}, not JSON"]
        try:
            changes = _Checker(self, writer).compare(self.document, writer.document, "")
        except _TooComplex:
            return [
                "{errorType:'COMPARISON_TOO_COMPLEX', jsonPath:'#', description:'the schemas "
                f"need more than {_MAX_COMPARISONS} subschema comparisons'}}"
            ]
        return [
            f"{{errorType:'{kind}', jsonPath:'#{path}', description:'{why}'}}"
            for kind, path, why in changes
        ]

    def validate(self, value: Any) -> None:
        """Raise InvalidValue (where in the value, and why) unless the schema allows `value`."""
        try:
            self._validator.validate(value)
        except jsonschema_rs.ValidationError as e:
            where = "".join(f"/{part}" for part in e.instance_path)
            raise InvalidValue(f"at '{where or '/'}': {e.message}") from None

    def all_valid_at(self, objects: list[Any], field: str) -> bool:
        """Whether every item is an object whose `field` holds a value (not null) the schema
        allows. One validator call for the whole list where the schema is self-contained (a
        third of the cost of a call per value), else one call per value."""
        if field not in self._objects_validators:
            self._objects_validators[field] = self._objects_validator(field)
        validator = self._objects_validators[field]
        if validator is not None:
            return bool(validator.is_valid(objects))
        return all(
            type(item) is dict
            and item.get(field) is not None
            and self._validator.is_valid(item[field])
            for item in objects
        )

    def _objects_validator(self, field: str) -> Any:
        """The schema nested in one of the lists `all_valid_at` checks; None where nesting
        would change what it means (a location named from its root) or does not compile."""
        if not self._nestable:
            return None
        present = {"allOf": [{"not": {"type": "null"}}, self.document]}
        wrapper: dict[str, Any] = {
            "type": "array",
            "items": {"type": "object", "required": [field], "properties": {field: present}},
        }
        if isinstance(self.document, dict) and "$schema" in self.document:
            wrapper["$schema"] = self.document["$schema"]
        try:
            return self._compile(wrapper, retriever=_refuse_retrieval)
        except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError):
            return None

    def encode(self, value: Any) -> bytes:
        """The value's compact UTF-8 JSON, once validated."""
        self.validate(value)
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

    def decode(self, payload: bytes) -> Any:
        """The JSON value of a payload, once validated."""
        try:
            value = json.loads(payload)
        except (ValueError, RecursionError) as e:
            raise InvalidValue(f"payload is not JSON: {e}") from None
        self.validate(value)
        return value


_LOCATION_KEYWORDS = frozenset(
    (
        "$ref",
        "$id",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
    )
)


def _names_a_location(document: Any, old_id: bool) -> bool:
    """Whether a keyword anywhere in the document names or resolves a location relative to its
    root (`$ref`, `$id`, anchors; `id` before draft-06), which nesting it in another schema would
    move. Property names count too: a false positive only costs the fast path."""
    if isinstance(document, dict):
        return any(
            key in _LOCATION_KEYWORDS or (old_id and key == "id") or _names_a_location(item, old_id)
            for key, item in document.items()
        )
    if isinstance(document, list):
        return any(_names_a_location(item, old_id) for item in document)
    return False


def parse(text: str, references: Mapping[str, ParsedSchema]) -> JsonSchema:
    """Parse a JSON Schema; SchemaError(INVALID_SCHEMA) says why it is not one."""
    return JsonSchema(text, references)


def _refuse_retrieval(uri: str) -> Any:
    """jsonschema_rs would fetch a `$ref` it does not know over HTTP or from a file: a schema
    names only its references, so nothing is fetched."""
    raise ValueError(f"{uri} is not one of the schema's references")


def _check_enums(document: Any) -> None:
    for node in limits.objects(document):
        values = node.get("enum")
        if isinstance(values, list):
            limits.check_enum(len(values), "an enum")


Change = tuple[str, str, str]
_MAX_COMPARISONS = 20_000


class _TooComplex(Exception):
    """The comparison met more pairs of subschemas than it may."""


class _Checker:
    """Reader/writer comparison of two schemas, each with its own `$ref` targets. A pair of
    subschemas is compared once (later meetings reuse the answer, a pair met again inside
    itself is taken as compatible), and the whole comparison is bounded: combinators nested in
    combinators would otherwise cost exponential time."""

    def __init__(self, reader: JsonSchema, writer: JsonSchema) -> None:
        self._roots = (reader, writer)
        self._answers: dict[tuple[int, int], list[Change]] = {}
        self._kept: list[Any] = []
        self._in_progress: set[tuple[int, int]] = set()

    def compare(self, reader: Any, writer: Any, path: str) -> list[Change]:
        """The changes by which `reader` refuses a value `writer` allows."""
        reader = self._resolve(reader, 0)
        writer = self._resolve(writer, 1)
        pair = (id(reader), id(writer))
        known = self._answers.get(pair)
        if known is not None:
            return known
        if pair in self._in_progress:
            return []
        if len(self._answers) >= _MAX_COMPARISONS:
            raise _TooComplex
        self._kept.append((reader, writer))
        self._in_progress.add(pair)
        try:
            found = list(self._changes(_normal(reader), _normal(writer), path))
        finally:
            self._in_progress.discard(pair)
        self._answers[pair] = found
        return found

    def _resolve(self, node: Any, side: int) -> Any:
        for _ in range(limits.MAX_DEPTH):
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                return node
            name, _, pointer = node["$ref"].partition("#")
            root = self._roots[side]
            target = root.resources.get(name) if name else root.document
            for part in pointer.split("/")[1:]:
                key = part.replace("~1", "/").replace("~0", "~")
                if isinstance(target, dict):
                    target = target.get(key)
                elif isinstance(target, list) and key.isdigit() and int(key) < len(target):
                    target = target[int(key)]
                else:
                    target = None
            node = {} if target is None else target
        return {}

    def _changes(
        self, reader: dict[str, Any], writer: dict[str, Any], path: str
    ) -> Iterator[Change]:
        if _accepts_everything(reader) or writer.get("not") == {}:
            return
        if reader.get("not") == {}:
            yield "SCHEMA_ADDED", path, "the new schema refuses every value"
            return
        if "not" in reader or "not" in writer:
            yield from self._negation(reader, writer, path)
            return
        if any(key in reader or key in writer for key in _COMBINATORS):
            yield from self._combined(reader, writer, path)
            return
        reader_types, writer_types = _types(reader), _types(writer)
        if reader_types is not None:
            if writer_types is None:
                yield "TYPE_NARROWED", path, f"the type became {sorted(reader_types)}"
                return
            lost = {kind for kind in writer_types if not _covers(reader_types, kind)}
            if lost:
                narrowed = lost == {"number"} and "integer" in reader_types
                yield (
                    "TYPE_NARROWED" if narrowed else "TYPE_CHANGED",
                    path,
                    f"values of type {sorted(lost)} are no longer allowed",
                )
                return
        yield from _enum(reader, writer, path)
        yield from _bounds(reader, writer, path)
        if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
            kind = "PATTERN_ADDED" if "pattern" not in writer else "PATTERN_CHANGED"
            yield kind, f"{path}/pattern", "the pattern restricts strings written before"
        if reader.get("uniqueItems") is True and writer.get("uniqueItems") is not True:
            yield "UNIQUE_ITEMS_ADDED", f"{path}/uniqueItems", "items must now be unique"
        if writer_types is None or writer_types & {"object"}:
            yield from self._object(reader, writer, path)
        if writer_types is None or writer_types & {"array"}:
            yield from self._array(reader, writer, path)

    def _negation(
        self, reader: dict[str, Any], writer: dict[str, Any], path: str
    ) -> Iterator[Change]:
        if "not" in reader and "not" in writer:
            yield from self.compare(writer["not"], reader["not"], f"{path}/not")
        elif "not" in reader:
            yield "NOT_TYPE_EXTENDED", f"{path}/not", "the new schema refuses more values"

    def _combined(
        self, reader: dict[str, Any], writer: dict[str, Any], path: str
    ) -> Iterator[Change]:
        for key in ("anyOf", "oneOf"):
            if key in writer:
                rest = {k: v for k, v in writer.items() if k != key}
                for index, branch in enumerate(writer[key]):
                    merged = {**rest, **branch} if rest and isinstance(branch, dict) else branch
                    found = self.compare(reader, merged, path)
                    if found:
                        yield (
                            "SUM_TYPE_NARROWED" if _sum(reader) else "COMBINED_TYPE_CHANGED",
                            f"{path}/{key}/{index}",
                            "a value of this alternative is no longer allowed",
                        )
                return
        if "allOf" in writer:
            if "allOf" in reader:
                for index, branch in enumerate(reader["allOf"]):
                    if all(self.compare(branch, other, path) for other in writer["allOf"]):
                        yield (
                            "PRODUCT_TYPE_EXTENDED",
                            f"{path}/allOf/{index}",
                            "the new schema adds a condition all values must meet",
                        )
                return
            if all(self.compare(reader, branch, path) for branch in writer["allOf"]):
                yield (
                    "COMBINED_TYPE_CHANGED",
                    path,
                    "no condition of the old schema implies the new",
                )
            return
        for key in ("anyOf", "oneOf"):
            if key in reader:
                rest = {k: v for k, v in reader.items() if k != key}
                branches = [
                    {**rest, **b} if rest and isinstance(b, dict) else b for b in reader[key]
                ]
                if all(self.compare(branch, writer, path) for branch in branches):
                    yield (
                        "COMBINED_TYPE_CHANGED",
                        f"{path}/{key}",
                        "no alternative allows the old values",
                    )
                return
        for index, branch in enumerate(reader["allOf"]):
            yield from self.compare(branch, writer, f"{path}/allOf/{index}")

    def _object(
        self, reader: dict[str, Any], writer: dict[str, Any], path: str
    ) -> Iterator[Change]:
        reader_properties = reader.get("properties", {})
        writer_properties = writer.get("properties", {})
        writer_required = set(writer.get("required", ()))
        for name in reader.get("required", ()):
            declared = reader_properties.get(name)
            has_default = isinstance(declared, dict) and "default" in declared
            if name not in writer_required and not has_default:
                yield (
                    "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"
                    if name not in writer_properties
                    else "REQUIRED_ATTRIBUTE_ADDED",
                    f"{path}/properties/{name}",
                    f"property {name!r} became required",
                )
        for name, schema in writer_properties.items():
            where = f"{path}/properties/{name}"
            if name in reader_properties:
                yield from self.compare(reader_properties[name], schema, where)
                continue
            governing = _extra_schema(reader, name)
            if governing is False:
                yield (
                    "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                    where,
                    f"property {name!r} is no longer allowed",
                )
            elif governing is not True and self.compare(governing, schema, where):
                yield (
                    "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                    where,
                    f"property {name!r} is no longer allowed by the rest of the object",
                )
        for name, schema in reader_properties.items():
            if name in writer_properties:
                continue
            where = f"{path}/properties/{name}"
            governing = _extra_schema(writer, name)
            if governing is True:
                if not _accepts_everything(_normal(self._resolve(schema, 0))):
                    yield (
                        "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
                        where,
                        f"property {name!r} restricts values the old open object allowed",
                    )
            elif governing is not False and self.compare(schema, governing, where):
                yield (
                    "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                    where,
                    f"property {name!r} restricts values the old object allowed",
                )
        reader_extra = _normal_or_bool(reader.get("additionalProperties", True))
        writer_extra = _normal_or_bool(writer.get("additionalProperties", True))
        where = f"{path}/additionalProperties"
        if (
            writer_extra is not False
            and reader_extra is False
            and not reader.get("patternProperties")
        ):
            yield "ADDITIONAL_PROPERTIES_REMOVED", where, "other properties are no longer allowed"
        elif isinstance(reader_extra, dict) and writer_extra is not False:
            found = self.compare(reader_extra, {} if writer_extra is True else writer_extra, where)
            if found:
                yield "ADDITIONAL_PROPERTIES_NARROWED", where, "other properties allow fewer values"
        for name, required in reader.get("dependencies", {}).items():
            written = writer.get("dependencies", {}).get(name)
            if isinstance(required, list):
                if written is None:
                    yield (
                        "DEPENDENCY_ARRAY_ADDED",
                        f"{path}/dependencies/{name}",
                        "a dependency was added",
                    )
                elif isinstance(written, list) and set(required) - set(written):
                    yield (
                        "DEPENDENCY_ARRAY_EXTENDED",
                        f"{path}/dependencies/{name}",
                        "a dependency grew",
                    )
            elif written is None:
                yield (
                    "DEPENDENCY_SCHEMA_ADDED",
                    f"{path}/dependencies/{name}",
                    "a dependency was added",
                )
            else:
                yield from self.compare(required, written, f"{path}/dependencies/{name}")

    def _array(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> Iterator[Change]:
        reader_items = reader.get("items", True)
        writer_items = writer.get("items", True)
        reader_tuple, writer_tuple = isinstance(reader_items, list), isinstance(writer_items, list)
        if reader_tuple != writer_tuple:
            if not (not reader_tuple and _accepts_everything(_normal(reader_items))):
                yield "TYPE_CHANGED", f"{path}/items", "a list became a tuple or a tuple a list"
            return
        if not reader_tuple:
            yield from self.compare(reader_items, writer_items, f"{path}/items")
            return
        reader_more = _normal_or_bool(reader.get("additionalItems", True))
        writer_more = _normal_or_bool(writer.get("additionalItems", True))
        for index in range(max(len(reader_items), len(writer_items))):
            where = f"{path}/items/{index}"
            if index < len(reader_items) and index < len(writer_items):
                yield from self.compare(reader_items[index], writer_items[index], where)
            elif index < len(writer_items):
                if reader_more is False:
                    yield (
                        "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                        where,
                        "the item is no longer allowed",
                    )
                elif reader_more is not True and self.compare(
                    reader_more, writer_items[index], where
                ):
                    yield (
                        "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                        where,
                        "the item is no longer allowed by additionalItems",
                    )
            elif writer_more is True:
                yield (
                    "ITEM_ADDED_TO_OPEN_CONTENT_MODEL",
                    where,
                    "the item restricts values allowed before",
                )
            elif writer_more is not False and self.compare(reader_items[index], writer_more, where):
                yield (
                    "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                    where,
                    "the item restricts values additionalItems allowed",
                )
        where = f"{path}/additionalItems"
        if reader_more is False and writer_more is not False:
            yield "ADDITIONAL_ITEMS_REMOVED", where, "more items are no longer allowed"
        elif (
            isinstance(reader_more, dict)
            and writer_more is not False
            and self.compare(reader_more, {} if writer_more is True else writer_more, where)
        ):
            yield "ADDITIONAL_ITEMS_NARROWED", where, "more items allow fewer values"


def _normal(node: Any) -> dict[str, Any]:
    """A schema as an object: `true` is `{}`, `false` is `{"not": {}}`."""
    if node is True:
        return {}
    if node is False:
        return {"not": {}}
    if isinstance(node, dict):
        if node.get("not") is True:
            return {**node, "not": {}}
        return node
    return {}


def _normal_or_bool(node: Any) -> Any:
    """`additionalProperties`/`additionalItems`: True (anything), False (nothing) or a schema."""
    if node is True or node == {}:
        return True
    if node is False or (isinstance(node, dict) and node.get("not") in ({}, True)):
        return False
    return node


_ANNOTATIONS = frozenset(
    (
        "$schema",
        "$id",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "definitions",
        "$defs",
    )
)


def _accepts_everything(schema: dict[str, Any]) -> bool:
    """True if the schema asserts nothing (only annotations)."""
    return schema.keys() <= _ANNOTATIONS


def _sum(schema: dict[str, Any]) -> bool:
    return "anyOf" in schema or "oneOf" in schema


def _types(schema: dict[str, Any]) -> set[str] | None:
    """The JSON types a schema allows, or None if it does not say."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {kind for kind in declared if kind in _TYPES}
    for key in ("enum", "const"):
        if key in schema:
            values = schema[key] if key == "enum" else [schema[key]]
            return {_type_of(value) for value in values}
    if _OBJECT_KEYWORDS & schema.keys():
        return {"object"}
    return None


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _covers(types: set[str], kind: str) -> bool:
    return kind in types or (kind == "integer" and "number" in types)


def _enum(reader: dict[str, Any], writer: dict[str, Any], path: str) -> Iterator[Change]:
    def allowed(schema: dict[str, Any]) -> list[Any] | None:
        if "const" in schema:
            return [schema["const"]]
        values = schema.get("enum")
        return values if isinstance(values, list) else None

    reader_values, writer_values = allowed(reader), allowed(writer)
    if reader_values is None:
        return
    if writer_values is None or any(value not in reader_values for value in writer_values):
        yield "ENUM_ARRAY_NARROWED", f"{path}/enum", "values allowed before are no longer allowed"


def _bounds(reader: dict[str, Any], writer: dict[str, Any], path: str) -> Iterator[Change]:
    for keyword, lower in _BOUNDS:
        bound = reader.get(keyword)
        if not isinstance(bound, (int, float)) or isinstance(bound, bool):
            continue
        before = writer.get(keyword)
        name = keyword.upper().replace("EXCLUSIVE", "EXCLUSIVE_").replace("LENGTH", "_LENGTH")
        name = name.replace("ITEMS", "_ITEMS").replace("PROPERTIES", "_PROPERTIES")
        if not isinstance(before, (int, float)) or isinstance(before, bool):
            yield f"{name}_ADDED", f"{path}/{keyword}", f"{keyword} {bound} was added"
        elif (bound > before) if lower else (bound < before):
            change = "INCREASED" if lower else "DECREASED"
            yield (
                f"{name}_{change}",
                f"{path}/{keyword}",
                f"{keyword} went from {before} to {bound}",
            )
    multiple = reader.get("multipleOf")
    if isinstance(multiple, (int, float)) and not isinstance(multiple, bool):
        before = writer.get("multipleOf")
        if not isinstance(before, (int, float)):
            yield "MULTIPLE_OF_ADDED", f"{path}/multipleOf", f"multipleOf {multiple} was added"
        elif (before / multiple) != int(before / multiple):
            yield (
                "MULTIPLE_OF_CHANGED",
                f"{path}/multipleOf",
                f"multipleOf went from {before} to {multiple}",
            )


def _extra_schema(schema: dict[str, Any], name: str) -> Any:
    """What an object schema says of a property it does not declare: True (anything), False
    (refused), or the schema its patternProperties or additionalProperties give it."""
    for pattern, governing in schema.get("patternProperties", {}).items():
        try:
            if re.search(pattern, name):
                return _normal_or_bool(governing)
        except re.error:
            continue
    return _normal_or_bool(schema.get("additionalProperties", True))
