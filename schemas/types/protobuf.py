"""Protobuf schemas: protoc itself (bundled by grpcio-tools, run in-process) compiles the .proto
text and its imports to descriptors, protobuf's dynamic messages encode and decode the values,
and the reader/writer check follows Confluent's documented wire-level rules.

protoc rather than a pure-Python .proto parser: it is the grammar's reference, so a schema
Sluice accepts is one every client's protoc accepts, with its error messages, name resolution
and proto2/proto3 rules, and it yields the FileDescriptorProto that dynamic messages need.

Canonical form: the compiled FileDescriptorProto in protobuf's text format, so comments,
whitespace and how a type is spelled (relative or full name) do not make a new schema.
Imports name references by import path; Google's well-known and common types (google/type)
import without one.
The payload is Confluent's message-index path (of the file's first message when encoding)
followed by the message's binary encoding; values are in protobuf's JSON mapping.

A schema registered in its serialized form (a base64 FileDescriptorProto, as confluent-kafka's
ProtobufSerializer registers one) becomes its .proto text (protobuf_text), checked to compile
to the same descriptor: that text is what is stored and answered, as Confluent's registry
answers it, and `serialized()` gives the descriptor back.
"""

from __future__ import annotations

import ast
import atexit
import base64
import difflib
import functools
import importlib
import importlib.util
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc_tools
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    json_format,
    message,
    message_factory,
    text_format,
)
from google.protobuf.descriptor import Descriptor
from grpc_tools import _protoc_compiler

from schemas import wire
from schemas.errors import INVALID_SCHEMA, SchemaError
from schemas.types import (
    InvalidValue,
    ParsedSchema,
    SchemaType,
    limits,
    protobuf_text,
    references_of,
)

MAIN = "schema.proto"
_WELL_KNOWN = str(Path(grpc_tools.__file__).parent / "_proto")
_FDP = descriptor_pb2.FieldDescriptorProto
# Scalar types that share a wire encoding, so a reader of one reads the other's data.
_WIRE_GROUPS = {
    kind: group
    for group, kinds in enumerate(
        (
            (
                _FDP.TYPE_INT32,
                _FDP.TYPE_UINT32,
                _FDP.TYPE_INT64,
                _FDP.TYPE_UINT64,
                _FDP.TYPE_BOOL,
                _FDP.TYPE_ENUM,
            ),
            (_FDP.TYPE_SINT32, _FDP.TYPE_SINT64),
            (_FDP.TYPE_FIXED32, _FDP.TYPE_SFIXED32),
            (_FDP.TYPE_FIXED64, _FDP.TYPE_SFIXED64),
            (_FDP.TYPE_STRING, _FDP.TYPE_BYTES),
            (_FDP.TYPE_MESSAGE,),
            (_FDP.TYPE_GROUP,),
            (_FDP.TYPE_FLOAT,),
            (_FDP.TYPE_DOUBLE,),
        )
    )
    for kind in kinds
}
_NAMED_TYPES = frozenset((_FDP.TYPE_MESSAGE, _FDP.TYPE_GROUP, _FDP.TYPE_ENUM))
_LENGTH_DELIMITED = frozenset((_FDP.TYPE_STRING, _FDP.TYPE_BYTES, _FDP.TYPE_MESSAGE))
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_IMPORT = re.compile(r"""\bimport\s+(?:public\s+|weak\s+)?["']([^"']+)["']""")


class ProtobufSchema:
    """A compiled .proto file with its imports, its descriptors and their message classes."""

    schema_type: SchemaType = "PROTOBUF"
    reference_depth: int
    """How deep its references nest (0: it has none)."""
    files: dict[str, str]
    """The texts its imports may name: its references and theirs, by import path."""
    compiled: list[descriptor_pb2.FileDescriptorProto]
    """Its descriptor and those it imports, dependencies first."""
    text: str
    """Its .proto text: as registered, or the text of a descriptor registered serialized."""
    unprintable: str | None
    """Why a descriptor registered serialized has no .proto text (then `text` is the base64
    as registered, and the registry refuses to register it); None otherwise."""

    def __init__(self, text: str, references: Mapping[str, ParsedSchema]) -> None:
        limits.check_text(text)
        typed, depth = references_of(references, ProtobufSchema, "PROTOBUF")
        self.reference_depth = depth
        files: dict[str, str] = {}
        for name, reference in typed.items():
            files.update(reference.files)
            files[name] = reference.text
        self.files = files
        self.unprintable = None
        serialized = _serialized_form(text)
        if serialized is None:
            _check_nesting(text)
            compiled = _compile(text, files)
        else:
            imported = _dependencies(serialized, typed)
            try:
                text, compiled = _as_text(serialized, imported, files)
            except SchemaError as e:
                self.unprintable = e.message
                compiled = [*imported, serialized]
        self.text = text
        self.compiled = compiled
        self.descriptor = compiled[-1]
        for enum_values, where in _enums(self.descriptor):
            limits.check_enum(enum_values, where)
        self._canonical: str = text_format.MessageToString(_named_as_main(self.descriptor))
        self._pool = descriptor_pool.DescriptorPool()
        try:
            for file in compiled:
                self._pool.Add(file)
            self._pool.FindFileByName(self.descriptor.name)
        except (TypeError, ValueError, KeyError) as e:
            raise SchemaError(INVALID_SCHEMA, f"invalid Protobuf schema: {e}") from None
        self._classes: dict[tuple[int, ...], type[message.Message]] = {}

    def serialized(self) -> str:
        """The schema as confluent-kafka's Protobuf serializers register and ask for it
        (`format=serialized`): its FileDescriptorProto, base64."""
        return base64.standard_b64encode(self.descriptor.SerializeToString()).decode("ascii")

    def canonical(self) -> str:
        """The compiled descriptor in protobuf's text format."""
        return self._canonical

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        """Confluent's incompatible changes between `writer`'s messages and this schema's."""
        if not isinstance(writer, ProtobufSchema):
            return [f"the old schema is {writer.schema_type}, not PROTOBUF"]
        return [
            f"{{errorType:'{kind}', location:'{where}', description:'{why}'}}"
            for kind, where, why in _Comparison(self, writer).changes()
        ]

    def validate(self, value: Any) -> None:
        """Raise InvalidValue unless `value` is the first message's, in protobuf's JSON mapping."""
        self._message(value)

    def encode(self, value: Any) -> bytes:
        """The first message's index path and the value's binary encoding."""
        body: bytes = self._message(value).SerializeToString()
        return wire.message_indexes([0]) + body

    def decode(self, payload: bytes) -> Any:
        """The JSON value of a payload: its message-index path, then that message's bytes."""
        return json_format.MessageToDict(self._decoded(payload), preserving_proto_field_name=True)

    def decode_with_defaults(self, payload: bytes) -> Any:
        """`decode`, with the fields that hold their default value too (as Karapace's REST
        Proxy shows a message)."""
        return json_format.MessageToDict(
            self._decoded(payload),
            preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,
        )

    def _decoded(self, payload: bytes) -> message.Message:
        indexes, body = wire.read_message_indexes(payload)
        decoded = self._class(indexes)()
        try:
            decoded.ParseFromString(body)
        except message.DecodeError as e:
            raise InvalidValue(f"not a Protobuf payload of this schema: {e}") from None
        return decoded

    def _message(self, value: Any) -> message.Message:
        if not isinstance(value, dict):
            raise InvalidValue(
                f"a Protobuf message's JSON is an object, not {type(value).__name__}"
            )
        parsed = self._class([0])()
        try:
            json_format.ParseDict(value, parsed)
        except (json_format.ParseError, RecursionError) as e:
            raise InvalidValue(str(e)) from None
        if not parsed.IsInitialized():
            missing = ", ".join(parsed.FindInitializationErrors())
            raise InvalidValue(f"required fields are missing: {missing}")
        return parsed

    def message_class(self, indexes: list[int]) -> type[message.Message]:
        """The message class (protobuf's compiled, upb) of the message at the index path
        `indexes` ([0]: the file's first message); InvalidValue if the path names none."""
        return self._class(indexes)

    def _class(self, indexes: list[int]) -> type[message.Message]:
        key = tuple(indexes)
        found = self._classes.get(key)
        if found is None:
            found = message_factory.GetMessageClass(self._descriptor_at(indexes))
            self._classes[key] = found
        return found

    def _descriptor_at(self, indexes: list[int]) -> Descriptor:
        names = [self.descriptor.package] if self.descriptor.package else []
        messages = self.descriptor.message_type
        for index in indexes:
            if index >= len(messages):
                raise InvalidValue(f"message index {indexes} names no message of this schema")
            names.append(messages[index].name)
            messages = messages[index].nested_type
        return self._pool.FindMessageTypeByName(".".join(names))


def parse(text: str, references: Mapping[str, ParsedSchema]) -> ProtobufSchema:
    """Compile a .proto text; SchemaError(INVALID_SCHEMA) says why it is not one."""
    return ProtobufSchema(text, references)


def is_serialized(text: str) -> bool:
    """Whether a Protobuf schema's text is its serialized form (base64), not .proto text."""
    return _BASE64.fullmatch(text.strip()) is not None


def imports(text: str) -> list[str]:
    """The import paths a schema's text names, without compiling it: a serialized descriptor's
    dependencies, or a .proto text's `import` statements (an import inside a comment is
    listed too, so the list may name more than protoc would read, never less)."""
    serialized = _serialized_form(text)
    if serialized is not None:
        return list(serialized.dependency)
    return _IMPORT.findall(text)


def _serialized_form(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The FileDescriptorProto of a schema registered in its serialized form (base64, as
    confluent-kafka's ProtobufSerializer registers one); None for a .proto text."""
    if not is_serialized(text):
        return None
    stripped = text.strip()
    try:
        file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(stripped))
    except (ValueError, message.DecodeError) as e:
        raise SchemaError(
            INVALID_SCHEMA, f"invalid Protobuf schema: not a serialized FileDescriptorProto ({e})"
        ) from None
    _check_utf8(file)
    return file


def _check_utf8(file: descriptor_pb2.FileDescriptorProto) -> None:
    """Refuse a descriptor with a string (a name, a default) that is not UTF-8: protobuf
    reads one in a proto2 message as bytes, which no .proto text, and no lookup, takes."""
    stack: list[message.Message] = [file]
    while stack:
        for field, value in stack.pop().ListFields():
            values = value if protobuf_text.repeated(field) else [value]
            if field.type == field.TYPE_MESSAGE:
                stack.extend(values)
            elif field.type == field.TYPE_STRING and any(isinstance(v, bytes) for v in values):
                raise SchemaError(
                    INVALID_SCHEMA,
                    f"invalid Protobuf schema: its descriptor's {field.name} is not UTF-8",
                )


def _as_text(
    file: descriptor_pb2.FileDescriptorProto,
    imported: list[descriptor_pb2.FileDescriptorProto],
    files: Mapping[str, str],
) -> tuple[str, list[descriptor_pb2.FileDescriptorProto]]:
    """A serialized schema's .proto text and what that compiles to: the same descriptor but
    for its file name, source locations and json names that are the default (types by their
    shortest names first, by their full names if those read back otherwise).
    SchemaError(INVALID_SCHEMA) if no text says the same."""
    what = "invalid Protobuf schema: the serialized descriptor has no .proto text"
    _check_descriptor_nesting(file)
    try:
        expected = protobuf_text.comparable(file, imported)
        problem = ""
        for qualified in (False, True):
            text = protobuf_text.proto_text(file, imported, qualified)
            try:
                _check_nesting(text)
                compiled = _compile(text, files)
            except SchemaError as e:
                problem = "it does not compile: " + e.message.removeprefix(
                    "invalid Protobuf schema: "
                )
                continue
            found = protobuf_text.comparable(compiled[-1], compiled[:-1])
            if found == expected:
                return text, compiled
            problem = "it would read back as " + _difference(expected, found)
    except protobuf_text.Unprintable as e:
        raise SchemaError(INVALID_SCHEMA, f"{what}: {e}") from None
    raise SchemaError(INVALID_SCHEMA, f"{what} ({problem})")


def _difference(expected: str, found: str) -> str:
    """The first lines where two descriptors' text formats differ."""
    changed = [
        line.strip()
        for line in difflib.unified_diff(expected.splitlines(), found.splitlines(), n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    return "; ".join(changed[:4])


def _check_descriptor_nesting(file: descriptor_pb2.FileDescriptorProto) -> None:
    """Refuse messages nested deeper than the limit before the printer walks them."""
    stack = [(message_type, 1) for message_type in file.message_type]
    while stack:
        declared, depth = stack.pop()
        if depth > limits.MAX_DEPTH:
            raise SchemaError(
                INVALID_SCHEMA, f"schema is nested more than {limits.MAX_DEPTH} levels deep"
            )
        stack.extend((nested, depth + 1) for nested in declared.nested_type)


def _dependencies(
    file: descriptor_pb2.FileDescriptorProto, references: Mapping[str, ProtobufSchema]
) -> list[descriptor_pb2.FileDescriptorProto]:
    """The descriptors a serialized schema's imports name, dependencies first: its references'
    (by import path, as the client registered them) and Google's well-known and common types
    (with the files they import)."""
    out: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()
    for name in file.dependency:
        reference = references.get(name)
        if reference is not None:
            chain = [d for d in reference.compiled[:-1]] + [_named(reference.descriptor, name)]
        elif name.startswith("google/"):
            chain = _bundled_chain(name)
        else:
            raise SchemaError(
                INVALID_SCHEMA, f"invalid Protobuf schema: import {name!r} names no reference"
            )
        for dependency in chain:
            if dependency.name not in seen:
                seen.add(dependency.name)
                out.append(dependency)
    return out


def _bundled_chain(name: str) -> list[descriptor_pb2.FileDescriptorProto]:
    """A Google file and the Google files it imports, dependencies first."""
    chain: list[descriptor_pb2.FileDescriptorProto] = []
    pending = [(name, False)]
    while pending:
        current, expanded = pending.pop()
        if any(found.name == current for found in chain):
            continue
        file = _bundled(current)
        if expanded:
            chain.append(file)
        else:
            pending.append((current, True))
            pending.extend((dependency, False) for dependency in reversed(file.dependency))
    return chain


def _bundled(name: str) -> descriptor_pb2.FileDescriptorProto:
    """A Google .proto file the protobuf and googleapis-common-protos packages carry."""
    module = name.removesuffix(".proto").replace("/", ".") + "_pb2"
    try:
        serialized = importlib.import_module(module).DESCRIPTOR.serialized_pb
    except ImportError:
        raise SchemaError(
            INVALID_SCHEMA, f"invalid Protobuf schema: import {name!r} names no reference"
        ) from None
    return descriptor_pb2.FileDescriptorProto.FromString(serialized)


def _named(
    file: descriptor_pb2.FileDescriptorProto, name: str
) -> descriptor_pb2.FileDescriptorProto:
    """`file` under the import path that names it."""
    renamed = descriptor_pb2.FileDescriptorProto()
    renamed.CopyFrom(file)
    renamed.name = name
    return renamed


def _named_as_main(file: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """The descriptor as compiled from a text (named MAIN, without source locations), so that a
    schema registered as text and in its serialized form are the same schema."""
    plain = _named(file, MAIN)
    plain.ClearField("source_code_info")
    return plain


def _check_nesting(text: str) -> None:
    """Refuse braces nested deeper than the limit before protoc's recursive parser sees them."""
    depth = 0
    position = 0
    length = len(text)
    while position < length:
        char = text[position]
        if text.startswith("//", position):
            end = text.find("\n", position)
            position = length if end < 0 else end
        elif text.startswith("/*", position):
            end = text.find("*/", position + 2)
            position = length if end < 0 else end + 2
            continue
        elif char in "\"'":
            position += 1
            while position < length and text[position] != char:
                position += 2 if text[position] == "\\" else 1
        elif char in "{[(<":
            depth += 1
            if depth > limits.MAX_DEPTH:
                raise SchemaError(
                    INVALID_SCHEMA, f"schema is nested more than {limits.MAX_DEPTH} levels deep"
                )
        elif char in "}])>":
            depth -= 1
        position += 1


def _compile(text: str, files: Mapping[str, str]) -> list[descriptor_pb2.FileDescriptorProto]:
    """protoc's descriptors for the schema and all it imports, dependencies first."""
    if MAIN in files:
        raise SchemaError(INVALID_SCHEMA, f"a reference may not be named {MAIN!r}")
    with tempfile.TemporaryDirectory(prefix="sluice-proto-") as root:
        for name, content in {**files, MAIN: text}.items():
            path = Path(root, name)
            if os.path.isabs(name) or ".." in Path(name).parts or not name.endswith(".proto"):
                raise SchemaError(
                    INVALID_SCHEMA, f"reference name {name!r} is not a relative .proto path"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        try:
            generated = _protoc_compiler.get_protos(
                MAIN.encode(), [root.encode(), _WELL_KNOWN.encode(), _common_types().encode()]
            )
        except _protoc_compiler.ProtocErrors as e:
            message_text = str(e).replace(root + os.sep, "")
            raise SchemaError(INVALID_SCHEMA, f"invalid Protobuf schema: {message_text}") from None
    return [_serialized_descriptor(code) for _, code in generated]


@functools.cache
def _common_types() -> str:
    """An include path holding Google's common types (`google/type/*.proto`, from
    googleapis-common-protos) and nothing else, so that a schema imports them without a
    reference, as Confluent's registry lets it. A directory of its own, made once per process,
    with the package's directory linked in: protoc has no virtual paths here, and an include
    path of the whole site-packages would expose every .proto file installed."""
    root = tempfile.mkdtemp(prefix="sluice-proto-common-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    Path(root, "google").mkdir()
    spec = importlib.util.find_spec("google.type")
    assert spec is not None and spec.submodule_search_locations, "googleapis-common-protos"
    Path(root, "google", "type").symlink_to(next(iter(spec.submodule_search_locations)))
    return root


def _serialized_descriptor(code: bytes) -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto that protoc embedded in the Python module it generated (read
    from the module's syntax tree, never run)."""
    for node in ast.walk(ast.parse(code)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
        ):
            return descriptor_pb2.FileDescriptorProto.FromString(ast.literal_eval(node.args[0]))
    raise SchemaError(INVALID_SCHEMA, "protoc gave no descriptor for the schema")


def _enums(file: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[int, str]]:
    stack: list[Any] = [file]
    while stack:
        scope = stack.pop()
        for enum in scope.enum_type:
            yield len(enum.value), f"enum {enum.name!r}"
        stack.extend(scope.nested_type if hasattr(scope, "nested_type") else scope.message_type)


Change = tuple[str, str, str]


class _Comparison:
    """Reader/writer comparison of two compiled files, message by message (by name relative
    to the package, so a package change is reported once) and field by number."""

    def __init__(self, reader: ProtobufSchema, writer: ProtobufSchema) -> None:
        self._reader = reader.descriptor
        self._writer = writer.descriptor
        self._reader_imported = _imported_messages(reader.compiled[:-1])
        self._writer_imported = _imported_messages(writer.compiled[:-1])
        self._compared: set[str] = set()

    def changes(self) -> Iterator[Change]:
        if self._reader.package != self._writer.package:
            yield (
                "PACKAGE_CHANGED",
                "#/package",
                f"package {self._writer.package!r} became {self._reader.package!r}",
            )
        readers = _messages(self._reader.message_type, "")
        for name, writer_message in _messages(self._writer.message_type, "").items():
            reader_message = readers.get(name)
            if reader_message is None:
                yield "MESSAGE_REMOVED", f"#/{name}", f"message {name} was removed"
            else:
                yield from self._message(reader_message, writer_message, name)

    def _message(
        self,
        reader: descriptor_pb2.DescriptorProto,
        writer: descriptor_pb2.DescriptorProto,
        name: str,
    ) -> Iterator[Change]:
        readers = {field.number: field for field in reader.field}
        writers = {field.number: field for field in writer.field}
        reader_numbers = {field.name: field.number for field in reader.field}
        for number, old in writers.items():
            where = f"#/{name}/{number}"
            new = readers.get(number)
            if new is None:
                if reader_numbers.get(old.name, number) != number:
                    yield (
                        "FIELD_NUMBER_CHANGED",
                        where,
                        f"field {old.name} is now number {reader_numbers[old.name]}",
                    )
                if old.label == _FDP.LABEL_REQUIRED:
                    yield "REQUIRED_FIELD_REMOVED", where, f"required field {old.name} was removed"
                continue
            yield from self._field(new, old, where)
        for number, new in readers.items():
            if number not in writers and new.label == _FDP.LABEL_REQUIRED:
                yield (
                    "REQUIRED_FIELD_ADDED",
                    f"#/{name}/{number}",
                    f"required field {new.name} was added",
                )
        yield from _oneofs(reader, writer, name)

    def _field(self, new: Any, old: Any, where: str) -> Iterator[Change]:
        if _WIRE_GROUPS[new.type] != _WIRE_GROUPS[old.type]:
            yield "FIELD_KIND_CHANGED", where, f"field {old.name} no longer has the same wire type"
            return
        if new.type == old.type and new.type in _NAMED_TYPES:
            new_name = _relative(new.type_name, self._reader.package)
            old_name = _relative(old.type_name, self._writer.package)
            if new_name != old_name:
                yield (
                    "FIELD_NAMED_TYPE_CHANGED",
                    where,
                    f"field {old.name} is now of type {new_name}",
                )
        yield from self._imported(new, old)
        repeated = (new.label == _FDP.LABEL_REPEATED, old.label == _FDP.LABEL_REPEATED)
        if repeated[0] != repeated[1] and old.type not in _LENGTH_DELIMITED:
            yield (
                "FIELD_NUMERIC_LABEL_CHANGED",
                where,
                f"field {old.name} changed between repeated and singular",
            )
        if old.label != _FDP.LABEL_REQUIRED and new.label == _FDP.LABEL_REQUIRED:
            yield "REQUIRED_FIELD_ADDED", where, f"field {old.name} became required"

    def _imported(self, new: Any, old: Any) -> Iterator[Change]:
        """A message-typed field whose message both sides import (a reference's, a Google
        type) compares that message too, as Confluent's checker follows a field into its
        type: data written with the old reference's message is read with the new one's. Each
        imported message once (types may refer to each other)."""
        name = new.type_name
        if (
            new.type != _FDP.TYPE_MESSAGE
            or old.type != _FDP.TYPE_MESSAGE
            or name != old.type_name
            or name in self._compared
        ):
            return
        reader, writer = self._reader_imported.get(name), self._writer_imported.get(name)
        if reader is not None and writer is not None:
            self._compared.add(name)
            yield from self._message(reader, writer, name.removeprefix("."))


def _imported_messages(
    files: list[descriptor_pb2.FileDescriptorProto],
) -> dict[str, descriptor_pb2.DescriptorProto]:
    """The messages of imported files by full name (`.package.Name`, as fields name them)."""
    found: dict[str, descriptor_pb2.DescriptorProto] = {}
    for file in files:
        found.update(_messages(file.message_type, f".{file.package}." if file.package else "."))
    return found


def _messages(messages: Any, prefix: str) -> dict[str, descriptor_pb2.DescriptorProto]:
    """Every message, nested ones too, by its name inside the package."""
    found: dict[str, descriptor_pb2.DescriptorProto] = {}
    for declared in messages:
        if declared.options.map_entry:
            continue
        name = f"{prefix}{declared.name}"
        found[name] = declared
        found.update(_messages(declared.nested_type, f"{name}."))
    return found


def _relative(type_name: str, package: str) -> str:
    prefix = f".{package}." if package else "."
    return type_name[len(prefix) :] if type_name.startswith(prefix) else type_name


def _oneofs(
    reader: descriptor_pb2.DescriptorProto, writer: descriptor_pb2.DescriptorProto, name: str
) -> Iterator[Change]:
    def members(declared: descriptor_pb2.DescriptorProto) -> dict[int, str]:
        return {
            field.number: declared.oneof_decl[field.oneof_index].name
            for field in declared.field
            if field.HasField("oneof_index") and not field.proto3_optional
        }

    reader_oneof, writer_oneof = members(reader), members(writer)
    writer_oneofs = set(writer_oneof.values())
    moved: dict[str, list[int]] = {}
    for number, oneof in reader_oneof.items():
        if number in writer_oneof or number not in {field.number for field in writer.field}:
            continue
        if oneof in writer_oneofs:
            yield (
                "FIELD_MOVED_TO_EXISTING_ONEOF",
                f"#/{name}/{number}",
                f"field {number} moved into oneof {oneof}",
            )
        else:
            moved.setdefault(oneof, []).append(number)
    for oneof, numbers in moved.items():
        if len(numbers) > 1:
            yield (
                "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
                f"#/{name}/{oneof}",
                f"fields {numbers} moved into oneof {oneof}",
            )
    reader_oneofs = set(reader_oneof.values())
    for number, oneof in writer_oneof.items():
        if oneof in reader_oneofs and reader_oneof.get(number) != oneof:
            yield "ONEOF_FIELD_REMOVED", f"#/{name}/{number}", f"field {number} left oneof {oneof}"
