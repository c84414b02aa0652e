"""Avro schemas: Apache Avro's library parses them and checks reader/writer compatibility
(its port of the Java checker Confluent uses); fastavro's compiled reader, writer and
validator handle the values (a quick check compiled per schema accepts the plain ones first).

Canonical form: the schema's JSON with object keys sorted, compact. Avro's Parsing Canonical
Form would drop defaults, docs and aliases, which Confluent keeps as part of a schema's
identity; the sorted JSON only forgets whitespace and key order.

Values are JSON in Avro's JSON encoding, as Confluent's REST Proxy takes them for its `avro`
format: bytes and fixed as strings of code points 0-255, a union's value either wrapped as
`{"branch": value}` (the branch's type name or a named type's full or short name) or plain,
in which case the first branch that describes it is written. Logical types travel as their
underlying type (a `timestamp-millis` as its long, a `decimal` as its bytes). `decode` gives
the same encoding back, with union values plain.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Mapping
from typing import Any

import avro.errors
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from avro.name import Names
from fastavro import parse_schema, schemaless_reader
from fastavro._read_py import schemaless_reader as bounded_schemaless_reader
from fastavro._write import write_data  # type: ignore[attr-defined]
from fastavro.validation import ValidationError, validate

from schemas.errors import INVALID_SCHEMA, SchemaError
from schemas.types import InvalidValue, ParsedSchema, SchemaType, limits, references_of
from schemas.types.avro_check import quick_check

Converter = Callable[[Any], Any]

# fastavro's compiled writer below its public `schemaless_writer`, which parses the schema
# again and copies through a file object for every value; the options are the public one's
# defaults.
WRITE_OPTIONS = {"strict": False, "strict_allow_default": False, "disable_tuple_notation": False}

_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
_DESCRIPTIONS = {
    "name_mismatch": "the name of a named type differs between the new and the old schema",
    "fixed_size_mismatch": "the size of a fixed type differs between the new and the old schema",
    "missing_enum_symbols": "the new schema's enum lacks symbols of the old schema's",
    "reader_field_missing_default_value": (
        "a field of the new schema has no default value and is missing in the old schema"
    ),
    "type_mismatch": "a type in the new schema does not match the old schema's",
    "missing_union_branch": "the new schema's union lacks a branch of the old schema's",
}


class AvroSchema:
    """A parsed Avro schema, with its references' named types, its compatibility view
    (Apache Avro) and its compiled value codec (fastavro)."""

    schema_type: SchemaType = "AVRO"
    reference_depth: int
    """How deep its references nest (0: it has none)."""

    def __init__(self, text: str, references: Mapping[str, ParsedSchema]) -> None:
        self.text = text
        document = limits.load_json(text)
        typed, depth = references_of(references, AvroSchema, "AVRO")
        definitions: list[Any] = []
        seen: set[str] = set()
        for reference in typed.values():
            for definition in reference.definitions:
                key = _sorted_json(definition)
                if key not in seen:
                    seen.add(key)
                    definitions.append(definition)
        self.reference_depth = depth
        self.definitions: tuple[Any, ...] = (*definitions, document)
        self._canonical = _sorted_json(_as_parsed(document))
        _check_enums(document)
        self.avro = _parse_avro(definitions, document)
        named: dict[str, Any] = {}
        try:
            for definition in definitions:
                parse_schema(_without_logical_types(definition), named_schemas=named)
            self._codec = parse_schema(_without_logical_types(document), named_schemas=named)
        except Exception as e:  # fastavro raises bare exceptions of several kinds
            raise SchemaError(INVALID_SCHEMA, f"invalid Avro schema: {e}") from None
        _check_arrays(self._codec, named)
        self._named = named
        self._to_datum = _compile(self._codec, named, {})
        self._quick = quick_check(self._codec, named)
        self._has_bytes = _mentions_bytes(self._codec, named)
        self._read = bounded_schemaless_reader if _is_recursive(named) else schemaless_reader

    def canonical(self) -> str:
        """The schema's JSON, keys sorted, compact."""
        return self._canonical

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        """Apache Avro's reader/writer check of this schema reading `writer`'s data."""
        if not isinstance(writer, AvroSchema):
            return [f"the old schema is {writer.schema_type}, not AVRO"]
        checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
        result = checker.get_compatibility(self.avro, writer.avro)
        if result.compatibility is not SchemaCompatibilityType.incompatible:
            return []
        kinds = list(dict.fromkeys(kind.value for kind in result.incompatibilities))
        messages = [
            f"{{errorType:'{kind.upper()}', description:'{_DESCRIPTIONS.get(kind, kind)}'}}"
            for kind in kinds
        ]
        locations = ", ".join(sorted(result.locations))
        details = "; ".join(sorted(result.messages))
        messages.append(f"{{locations:'{locations}', additionalInfo:'{details}'}}")
        return messages

    def validate(self, value: Any) -> None:
        """Raise InvalidValue unless `value` is this schema's, in Avro's JSON encoding."""
        self._datum(value)

    def encode(self, value: Any) -> bytes:
        """The Avro binary encoding of the JSON `value`."""
        datum = self._datum(value)
        out = bytearray()
        try:
            write_data(out, datum, self._codec, self._named, "", WRITE_OPTIONS)
        except (ValueError, TypeError, OverflowError, RecursionError) as e:
            raise InvalidValue(f"not a value of this schema: {e}") from None
        return bytes(out)

    def decode(self, payload: bytes) -> Any:
        """The JSON value of an Avro binary payload written with this schema."""
        datum = self._datum_of(payload)
        return _to_json(datum) if self._has_bytes else datum

    def decode_base64_bytes(self, payload: bytes) -> Any:
        """`decode`, but bytes and fixed values as base64 (how Karapace's REST Proxy shows
        them) instead of Avro's JSON encoding."""
        datum = self._datum_of(payload)
        return _to_base64(datum) if self._has_bytes else datum

    def _datum_of(self, payload: bytes) -> Any:
        stream = io.BytesIO(payload)
        try:
            datum = self._read(stream, self._codec, None)
            if stream.tell() != len(payload):
                raise InvalidValue(
                    f"{len(payload) - stream.tell()} bytes left over after the Avro value"
                )
            return datum
        except InvalidValue:
            raise
        except Exception as e:  # a truncated or foreign payload fails in many ways
            raise InvalidValue(f"not an Avro payload of this schema: {e!r}") from None

    def _datum(self, value: Any) -> Any:
        try:
            datum = self._to_datum(value)
            if self._quick is None or not self._quick(datum):
                validate(datum, self._codec, raise_errors=True)
        except ValidationError as e:
            raise InvalidValue(
                "; ".join(str(error) for error in e.errors) or "not a value of this schema"
            ) from None
        except _BadValue as e:
            raise InvalidValue(str(e)) from None
        except RecursionError:
            raise InvalidValue("value is nested too deep to check") from None
        return datum


class _BadValue(ValueError):
    """A JSON value that cannot even be converted to an Avro datum."""


def parse(text: str, references: Mapping[str, ParsedSchema]) -> AvroSchema:
    """Parse an Avro schema; SchemaError(INVALID_SCHEMA) says why it is not one."""
    return AvroSchema(text, references)


_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# Attributes Avro's parsers take for their own: on a primitive type they mean nothing and are
# dropped (Java's Schema.parse, so Confluent's canonical string, and Python's avro alike).
_RESERVED = frozenset(
    {"name", "namespace", "doc", "aliases", "fields", "items", "size", "symbols", "values"}
)


def _as_parsed(node: Any) -> Any:
    """The schema as Avro reads it, for matching schemas: a primitive type's reserved
    attributes are dropped and a primitive left with its type alone is its name, so that
    {"type": "int", "name": "x"} is the schema "int" (Karapace's
    test_schema_same_subject_unnamed; Confluent matches them too). Everything else (docs,
    logical types, custom attributes, defaults) is kept."""
    if isinstance(node, list):
        return [_as_parsed(branch) for branch in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if isinstance(kind, str) and kind in _PRIMITIVES:
        kept = {k: v for k, v in node.items() if k not in _RESERVED}
        return kind if len(kept) == 1 else kept
    if isinstance(kind, dict | list):
        if set(node) == {"type"}:
            return _as_parsed(kind)
        return {**node, "type": _as_parsed(kind)}
    found = dict(node)
    fields = node.get("fields")
    if kind in ("record", "error") and isinstance(fields, list):
        found["fields"] = [
            {**f, "type": _as_parsed(f["type"])} if isinstance(f, dict) and "type" in f else f
            for f in fields
        ]
    for key, holder in (("items", "array"), ("values", "map")):
        if kind == holder and key in node:
            found[key] = _as_parsed(node[key])
    return found


def _sorted_json(document: Any) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _parse_avro(definitions: list[Any], document: Any) -> avro.schema.Schema:
    names = Names()
    try:
        for definition in definitions:
            avro.schema.make_avsc_object(definition, names)
        return avro.schema.make_avsc_object(document, names)
    except (avro.errors.AvroException, TypeError, ValueError, AttributeError) as e:
        raise SchemaError(INVALID_SCHEMA, f"invalid Avro schema: {e}") from None


def _check_enums(document: Any) -> None:
    for node in limits.objects(document):
        symbols = node.get("symbols")
        if node.get("type") == "enum" and isinstance(symbols, list):
            limits.check_enum(len(symbols), f"enum {node.get('name')!r}")


def _without_logical_types(node: Any) -> Any:
    """The schema with its logical types removed: values then stay in their underlying
    type, as in Avro's JSON encoding."""
    if isinstance(node, list):
        return [_without_logical_types(branch) for branch in node]
    if not isinstance(node, dict):
        return node
    stripped = {key: value for key, value in node.items() if key != "logicalType"}
    kind = stripped.get("type")
    if isinstance(kind, (dict, list)):
        stripped["type"] = _without_logical_types(kind)
    elif kind in ("record", "error") and isinstance(stripped.get("fields"), list):
        stripped["fields"] = [
            {**field, "type": _without_logical_types(field.get("type"))}
            if isinstance(field, dict)
            else field
            for field in stripped["fields"]
        ]
    elif kind == "array":
        stripped["items"] = _without_logical_types(stripped.get("items"))
    elif kind == "map":
        stripped["values"] = _without_logical_types(stripped.get("values"))
    return stripped


def _identity(value: Any) -> Any:
    return value


def _latin1(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        raise _BadValue(
            f"bytes in Avro's JSON encoding are code points 0-255, not {max(value, key=ord)!r}"
        ) from None


def _compile(node: Any, named: dict[str, Any], compiled: dict[str, Converter]) -> Converter:
    """A function from a JSON value to the datum fastavro takes for `node` (a parsed schema:
    a named type is spelled out once, then referred to by its full name)."""
    if isinstance(node, str):
        if node == "bytes":
            return _latin1
        if node in _PRIMITIVES:
            return _identity
        if node not in compiled:
            return _compile(named[node], named, compiled)
        return compiled[node]
    if isinstance(node, list):
        return _union(node, named, compiled)
    kind = node["type"]
    if kind == "fixed":
        return _latin1
    if kind in ("record", "error"):
        final: list[Converter] = []
        compiled[node["name"]] = lambda value: final[0](value)
        fields = [
            (field["name"], _compile(field["type"], named, compiled)) for field in node["fields"]
        ]
        needed = [(name, convert) for name, convert in fields if convert is not _identity]
        final.append(_record(needed) if needed else _identity)
        compiled[node["name"]] = final[0]
        return final[0]
    if kind == "array":
        items = _compile(node["items"], named, compiled)
        if items is _identity:
            return _identity
        return lambda value: [items(v) for v in value] if isinstance(value, list) else value
    if kind == "map":
        values = _compile(node["values"], named, compiled)
        if values is _identity:
            return _identity
        return lambda value: (
            {k: values(v) for k, v in value.items()} if isinstance(value, dict) else value
        )
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return _compile(kind, named, compiled)
    return _identity


def _record(fields: list[tuple[str, Converter]]) -> Converter:
    def record(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        datum = dict(value)
        for name, convert in fields:
            if name in datum:
                datum[name] = convert(datum[name])
        return datum

    return record


def _json_kind(node: Any, named: dict[str, Any]) -> tuple[type, ...]:
    """The Python types of the JSON values that a union's branch `node` takes plain."""
    if isinstance(node, str) and node not in _PRIMITIVES:
        node = named[node]
    kind = node if isinstance(node, str) else node["type"]
    kinds: dict[str, tuple[type, ...]] = {
        "null": (type(None),),
        "boolean": (bool,),
        "int": (int,),
        "long": (int,),
        "float": (int, float),
        "double": (int, float),
        "array": (list,),
        "map": (dict,),
        "record": (dict,),
        "error": (dict,),
    }
    return kinds.get(kind, (str,))


def _branch_names(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node, node.rsplit(".", 1)[-1]]
    if node.get("type") in ("record", "error", "enum", "fixed"):
        return [node["name"], node["name"].rsplit(".", 1)[-1]]
    return [node["type"]]


def _union(branches: list[Any], named: dict[str, Any], compiled: dict[str, Converter]) -> Converter:
    by_name: dict[str, Converter] = {}
    plain: list[tuple[tuple[type, ...], Converter]] = []
    for branch in branches:
        convert = _compile(branch, named, compiled)
        for name in _branch_names(branch):
            by_name.setdefault(name, convert)
        plain.append((_json_kind(branch, named), convert))

    def union(value: Any) -> Any:
        if isinstance(value, dict) and len(value) == 1:
            ((name, inner),) = value.items()
            if name in by_name:
                return by_name[name](inner)
        for kinds, convert in plain:
            if isinstance(value, kinds) and (isinstance(value, bool) == (bool in kinds)):
                return convert(value)
        return value

    return union


def _mentions_bytes(node: Any, named: dict[str, Any]) -> bool:
    seen: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, str):
            if current == "bytes":
                return True
            if current in named and current not in seen:
                seen.add(current)
                stack.append(named[current])
        elif isinstance(current, list):
            stack.extend(current)
        elif isinstance(current, dict):
            if current.get("type") == "fixed":
                return True
            stack.extend(current.get(key) for key in ("type", "items", "values"))
            stack.extend(field["type"] for field in current.get("fields", ()))
    return False


def _check_arrays(codec: Any, named: dict[str, Any]) -> None:
    """Refuse an array whose items take no bytes (null, an empty record, a zero-size fixed):
    a payload of a few bytes could declare billions of them, all built on decode."""
    stack = [codec, *named.values()]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("type") == "array" and _zero_width(node["items"], named, set()):
                raise SchemaError(
                    INVALID_SCHEMA,
                    "an array's items take no bytes (null, an empty record or a zero-size "
                    "fixed): a payload of a few bytes could decode to billions of them",
                )
            stack.extend(node.get(key) for key in ("type", "items", "values"))
            stack.extend(field["type"] for field in node.get("fields", ()))


def _zero_width(node: Any, named: dict[str, Any], visiting: set[str]) -> bool:
    """True if every value of `node` encodes to no bytes at all."""
    if isinstance(node, str):
        if node == "null":
            return True
        if node in _PRIMITIVES or node in visiting or node not in named:
            return False
        return _zero_width(named[node], named, visiting | {node})
    if not isinstance(node, dict):
        return False
    kind = node["type"]
    if kind == "fixed":
        return bool(node["size"] == 0)
    if kind in ("record", "error"):
        inside = visiting | {node["name"]}
        return all(_zero_width(field["type"], named, inside) for field in node["fields"])
    return isinstance(kind, str) and kind == "null"


def _is_recursive(named: dict[str, Any]) -> bool:
    """True if a named type contains itself. A payload of such a schema can nest without end,
    and fastavro's compiled reader recurses on the C stack, so its pure-Python reader, which
    stops at Python's recursion limit, reads those."""
    edges = {name: _named_children(definition) for name, definition in named.items()}
    done: set[str] = set()
    for start in edges:
        if start in done:
            continue
        path = {start}
        stack = [(start, iter(edges[start]))]
        while stack:
            name, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.discard(name)
                done.add(name)
            elif child in path:
                return True
            elif child not in done and child in edges:
                path.add(child)
                stack.append((child, iter(edges[child])))
    return False


def _named_children(definition: Any) -> set[str]:
    """The named types a named type's definition uses directly."""
    found: set[str] = set()
    stack = [definition.get("fields", ()) if isinstance(definition, dict) else ()]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            found.add(node)
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "error", "enum", "fixed") and "name" in node:
                found.add(node["name"])
            elif "fields" not in node:
                stack.extend(node.get(key) for key in ("type", "items", "values"))
            else:
                stack.extend(field.get("type") for field in node["fields"])
    return found


def _code_points(data: bytes) -> str:
    return data.decode("latin-1")


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _to_json(datum: Any, text_of: Callable[[bytes], str] = _code_points) -> Any:
    """A datum as JSON: its bytes values as `text_of` writes them."""
    if isinstance(datum, bytes):
        return text_of(datum)
    if isinstance(datum, dict):
        return {key: _to_json(value, text_of) for key, value in datum.items()}
    if isinstance(datum, list):
        return [_to_json(value, text_of) for value in datum]
    return datum


def _to_base64(datum: Any) -> Any:
    return _to_json(datum, _base64)
