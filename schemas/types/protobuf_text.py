"""A compiled .proto file (its FileDescriptorProto) written back as .proto text, as Confluent's
registry answers a schema registered in its serialized form.

The text is proto2 or proto3 source that protoc compiles to the same descriptor: labels,
proto3 `optional`, maps (their synthetic `*Entry` messages), oneofs, groups, nested types,
enums, reserved and extension ranges, `extend` blocks, services, proto2 defaults, options
(custom ones too, by name, where an import declares them) and json_name where it is not the
default. Types are named by the shortest name protoc resolves to them from where they are
used (`qualified`: by their full names). Comments and source locations are not kept; Protobuf
editions are not printed. What no text says raises `Unprintable`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_encoding,
    text_format,
    unknown_fields,
)

_FDP = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    _FDP.TYPE_DOUBLE: "double",
    _FDP.TYPE_FLOAT: "float",
    _FDP.TYPE_INT64: "int64",
    _FDP.TYPE_UINT64: "uint64",
    _FDP.TYPE_INT32: "int32",
    _FDP.TYPE_FIXED64: "fixed64",
    _FDP.TYPE_FIXED32: "fixed32",
    _FDP.TYPE_BOOL: "bool",
    _FDP.TYPE_STRING: "string",
    _FDP.TYPE_BYTES: "bytes",
    _FDP.TYPE_UINT32: "uint32",
    _FDP.TYPE_SFIXED32: "sfixed32",
    _FDP.TYPE_SFIXED64: "sfixed64",
    _FDP.TYPE_SINT32: "sint32",
    _FDP.TYPE_SINT64: "sint64",
}
_LABELS = {_FDP.LABEL_OPTIONAL: "optional", _FDP.LABEL_REQUIRED: "required"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_FIELD = 536870911  # the highest field number: "max" in a message's ranges
_MAX_ENUM = 2147483647  # the highest enum number: "max" in an enum's reserved ranges
_DESCRIPTOR_PROTO = "google/protobuf/descriptor.proto"
_INDENT = "  "
_AGGREGATES = frozenset(("package", "message", "enum", "service"))
_TYPES = frozenset(("message", "enum"))
_MEMBERS = frozenset(("member",))


class Unprintable(ValueError):
    """A descriptor that no .proto text expresses (or one this printer does not)."""


def proto_text(
    file: descriptor_pb2.FileDescriptorProto,
    imported: Sequence[descriptor_pb2.FileDescriptorProto],
    qualified: bool = False,
) -> str:
    """`file` as .proto text; `imported` are the files it imports and theirs (dependencies
    first), whose types and custom options the text names."""
    return _Printer(readable(file, imported), imported, qualified).text()


def readable(
    file: descriptor_pb2.FileDescriptorProto,
    imported: Sequence[descriptor_pb2.FileDescriptorProto],
) -> Any:
    """`file` read again through a pool holding it and its imports, so that its custom
    options are known extensions (read by name) rather than unknown fields."""
    pool = descriptor_pool.DescriptorPool()
    files = {f.name: f for f in imported if f.name != file.name}
    bundled = files.pop(_DESCRIPTOR_PROTO, None) or descriptor_pb2.FileDescriptorProto.FromString(
        descriptor_pb2.DESCRIPTOR.serialized_pb
    )
    defines_descriptors = file.package == "google.protobuf" and any(
        declared.name == "FileDescriptorProto" for declared in file.message_type
    )
    try:
        if not defines_descriptors:  # descriptor.proto itself, under any name
            pool.Add(bundled)
        for dependency in files.values():
            pool.Add(dependency)
        pool.Add(file)
        pool.FindFileByName(file.name)
        found = pool.FindMessageTypeByName("google.protobuf.FileDescriptorProto")
    except (TypeError, ValueError, KeyError) as e:
        raise Unprintable(f"not a valid descriptor: {e}") from None
    return message_factory.GetMessageClass(found).FromString(file.SerializeToString())


def comparable(
    file: descriptor_pb2.FileDescriptorProto,
    imported: Sequence[descriptor_pb2.FileDescriptorProto],
) -> str:
    """What compiling the printed text must give back: the descriptor in text format, custom
    options by name, without its file name, source locations and default json names."""
    plain = readable(file, imported)
    plain.name = ""
    plain.ClearField("source_code_info")
    scopes: list[Any] = [plain]
    while scopes:
        scope = scopes.pop()
        fields = list(scope.extension)
        if hasattr(scope, "field"):
            fields.extend(scope.field)
            scopes.extend(scope.nested_type)
        else:
            scopes.extend(scope.message_type)
        for field in fields:
            if field.HasField("json_name") and field.json_name == json_name(field.name):
                field.ClearField("json_name")
    return str(text_format.MessageToString(plain, print_unknown_fields=True))


def json_name(name: str) -> str:
    """protoc's default json_name of a field: underscores dropped, the letter after one
    capitalised."""
    out = []
    upper = False
    for char in name:
        if char == "_":
            upper = True
        else:
            out.append(char.upper() if upper else char)
            upper = False
    return "".join(out)


class _Printer:
    """One file's text, line by line."""

    def __init__(self, file: Any, imported: Iterable[Any], qualified: bool) -> None:
        self._file = file
        self._proto3 = file.syntax == "proto3"
        self._qualified = qualified
        self._symbols = _symbols([*imported, file])
        self._lines: list[str] = []
        self._kind = "syntax"

    def text(self) -> str:
        file = self._file
        if file.syntax not in ("", "proto2", "proto3"):
            raise Unprintable(f"syntax {file.syntax!r} (Protobuf editions) is not supported")
        if len(getattr(file, "option_dependency", ())):
            raise Unprintable("option imports (Protobuf editions) are not supported")
        self._line(0, f'syntax = "{file.syntax or "proto2"}";')
        if file.package:
            for part in file.package.split("."):
                _identifier(part, "package")
            self._line(0, f"package {file.package};")
        public, weak = set(file.public_dependency), set(file.weak_dependency)
        for index, name in enumerate(file.dependency):
            kind = "public " if index in public else "weak " if index in weak else ""
            self._section(0, "import")
            self._line(0, f"import {kind}{_string(name)};")
        if file.options.ListFields():
            self._section(0, "option")
        self._statements(0, file.options, file.package)
        self._scope(0, file.package, file.message_type, file.enum_type, file.extension, [])
        for service in file.service:
            self._service(service, file.package)
        return "\n".join(self._lines) + "\n"

    # -- declarations --------------------------------------------------------------------

    def _scope(
        self,
        depth: int,
        scope: str,
        types: Sequence[Any],
        enums: Sequence[Any],
        extensions: Sequence[Any],
        fields: Sequence[Any],
        oneofs: Sequence[Any] = (),
    ) -> None:
        """A message's body (or the file's top level): its fields, then its messages, enums
        and extends, in an order that keeps each list's own (a map's and a group's message
        sits in the list where its field is declared)."""
        owners = {
            owned
            for field in [*fields, *extensions]
            if (owned := _owned(field, types, scope)) is not None
        }
        printed = 0

        def types_before(end: int) -> None:
            nonlocal printed
            while printed < end:
                if printed not in owners:
                    self._message(depth, types[printed], scope)
                printed += 1

        def declare(field: Any, in_oneof: bool, field_depth: int) -> None:
            owned = _owned(field, types, scope)
            if owned is not None and not in_oneof:
                types_before(owned + 1)
            self._field(
                field_depth, field, scope, in_oneof, types[owned] if owned is not None else None
            )

        position = 0
        declared_oneofs: set[int] = set()
        while position < len(fields):
            field = fields[position]
            if not _in_real_oneof(field):
                declare(field, False, depth)
                position += 1
                continue
            index = field.oneof_index
            if index in declared_oneofs or index >= len(oneofs):
                raise Unprintable(
                    f"the fields of oneof {index} of {scope} are not declared together"
                )
            declared_oneofs.add(index)
            end = position
            while (
                end < len(fields)
                and _in_real_oneof(fields[end])
                and fields[end].oneof_index == index
            ):
                end += 1
            owned_here = [
                o for m in fields[position:end] if (o := _owned(m, types, scope)) is not None
            ]
            types_before(min(owned_here, default=printed))
            oneof = oneofs[index]
            _identifier(oneof.name, "oneof")
            self._line(depth, f"oneof {oneof.name} {{")
            self._statements(depth + 1, oneof.options, scope)
            for member in fields[position:end]:
                declare(member, True, depth + 1)
            self._close(depth)
            position = end
        extension_owned = [o for e in extensions if (o := _owned(e, types, scope)) is not None]
        types_before(min(extension_owned, default=len(types)))
        if extension_owned:  # a group's message is declared where its extension is
            self._extends(depth, extensions, scope, declare)
        types_before(len(types))
        for enum in enums:
            self._enum(depth, enum, scope)
        if not extension_owned:
            self._extends(depth, extensions, scope, declare)

    def _message(self, depth: int, declared: Any, scope: str) -> None:
        _identifier(declared.name, "message")
        name = _join(scope, declared.name)
        self._section(depth, "type")
        self._line(depth, f"message {declared.name} {{")
        self._body(depth + 1, declared, name)
        self._close(depth)

    def _body(self, depth: int, declared: Any, name: str) -> None:
        self._statements(depth, declared.options, name)
        self._scope(
            depth,
            name,
            declared.nested_type,
            declared.enum_type,
            declared.extension,
            declared.field,
            declared.oneof_decl,
        )
        for extensions in declared.extension_range:
            options = (
                self._bracketed(extensions.options, name) if extensions.HasField("options") else ""
            )
            self._line(
                depth,
                f"extensions {_range(extensions.start, extensions.end - 1, _MAX_FIELD)}{options};",
            )
        self._reserved(
            depth,
            [(r.start, r.end - 1) for r in declared.reserved_range],
            declared.reserved_name,
            _MAX_FIELD,
        )

    def _extends(self, depth: int, extensions: Sequence[Any], scope: str, declare: Any) -> None:
        """`extend` blocks, one for each run of extensions of the same message."""
        extendee = None
        for extension in extensions:
            if extension.extendee != extendee:
                if extendee is not None:
                    self._close(depth)
                extendee = extension.extendee
                self._section(depth, "extend")
                self._line(depth, f"extend {self._reference(extendee, scope)} {{")
            declare(extension, False, depth + 1)
        if extendee is not None:
            self._close(depth)

    def _field(self, depth: int, field: Any, scope: str, in_oneof: bool, owned: Any) -> None:
        _identifier(field.name, "field")
        options = []
        if field.HasField("default_value"):
            options.append(("default", _default(field)))
        if field.HasField("json_name") and field.json_name != json_name(field.name):
            options.append(("json_name", _string(field.json_name)))
        options.extend(self._options(field.options, scope))
        bracket = f" [{', '.join(f'{k} = {v}' for k, v in options)}]" if options else ""
        if owned is not None and owned.options.map_entry:
            entry = _join(scope, owned.name)
            key, value = _entry_fields(owned)
            kind = f"map<{self._type(key, entry)}, {self._type(value, entry)}>"
            self._line(depth, f"{kind} {field.name} = {field.number}{bracket};")
            return
        label = self._label(field, in_oneof)
        if field.type == _FDP.TYPE_GROUP:
            if owned is None:
                raise Unprintable(f"group field {field.name!r} has its message declared elsewhere")
            if field.name != owned.name.lower():
                raise Unprintable(f"group field {field.name!r} is not named after its message")
            self._line(depth, f"{label}group {owned.name} = {field.number}{bracket} {{")
            self._body(depth + 1, owned, _join(scope, owned.name))
            self._close(depth)
            return
        self._line(
            depth, f"{label}{self._type(field, scope)} {field.name} = {field.number}{bracket};"
        )

    def _label(self, field: Any, in_oneof: bool) -> str:
        if in_oneof:
            return ""
        if field.label == _FDP.LABEL_REPEATED:
            return "repeated "
        if self._proto3:
            if field.proto3_optional:
                return "optional "
            return "required " if field.label == _FDP.LABEL_REQUIRED else ""
        return f"{_LABELS.get(field.label, 'optional')} "

    def _type(self, field: Any, scope: str) -> str:
        if field.type_name:
            return self._reference(field.type_name, scope)
        if not field.HasField("type") or field.type not in _SCALARS:
            raise Unprintable(f"field {field.name!r} has no type")
        return _SCALARS[field.type]

    def _enum(self, depth: int, enum: Any, scope: str) -> None:
        _identifier(enum.name, "enum")
        self._section(depth, "type")
        self._line(depth, f"enum {enum.name} {{")
        name = _join(scope, enum.name)
        self._statements(depth + 1, enum.options, name)
        for value in enum.value:
            _identifier(value.name, "enum value")
            options = self._bracketed(value.options, name)
            self._line(depth + 1, f"{value.name} = {value.number}{options};")
        self._reserved(
            depth + 1,
            [(r.start, r.end) for r in enum.reserved_range],
            enum.reserved_name,
            _MAX_ENUM,
        )
        self._close(depth)

    def _service(self, service: Any, scope: str) -> None:
        _identifier(service.name, "service")
        name = _join(scope, service.name)
        self._section(0, "service")
        self._line(0, f"service {service.name} {{")
        self._statements(1, service.options, name)
        for method in service.method:
            _identifier(method.name, "method")
            request = ("stream " if method.client_streaming else "") + self._reference(
                method.input_type, name
            )
            reply = ("stream " if method.server_streaming else "") + self._reference(
                method.output_type, name
            )
            head = f"rpc {method.name}({request}) returns ({reply})"
            if not method.HasField("options"):
                self._line(1, f"{head};")
                continue
            self._line(1, f"{head} {{")  # a body, even empty, gives the method its options
            self._statements(2, method.options, name)
            self._close(1)
        self._close(0)

    def _reserved(
        self, depth: int, ranges: list[tuple[int, int]], names: Sequence[str], top: int
    ) -> None:
        if ranges:
            self._line(
                depth, f"reserved {', '.join(_range(start, end, top) for start, end in ranges)};"
            )
        if names:
            self._line(depth, f"reserved {', '.join(_string(name) for name in names)};")

    # -- options -------------------------------------------------------------------------

    def _statements(self, depth: int, options: Any, scope: str) -> None:
        for key, value in self._options(options, scope):
            self._line(depth, f"option {key} = {value};")

    def _bracketed(self, options: Any, scope: str) -> str:
        found = self._options(options, scope)
        return f" [{', '.join(f'{k} = {v}' for k, v in found)}]" if found else ""

    def _options(self, options: Any, scope: str) -> list[tuple[str, str]]:
        """An options message's fields as `name = value` pairs (a repeated one once a value);
        a custom option by its extension's name in parentheses."""
        if len(unknown_fields.UnknownFieldSet(options)):
            kind = options.DESCRIPTOR.name
            raise Unprintable(f"a custom option of {kind} is declared by none of its imports")
        found = []
        for field, value in options.ListFields():
            if field.is_extension:
                name = self._reference(f".{field.full_name}", scope, _MEMBERS, everywhere=True)
                key = f"({name})"
            elif field.name == "uninterpreted_option":
                raise Unprintable("it has uninterpreted options")
            elif field.name == "map_entry" and value:
                continue  # a map field's message: the map<K, V> says it
            else:
                key = field.name
            for item in value if repeated(field) else [value]:
                found.append((key, _value(field, item)))
        return found

    # -- names ---------------------------------------------------------------------------

    def _reference(
        self, name: str, scope: str, kinds: frozenset[str] = _TYPES, everywhere: bool = False
    ) -> str:
        """The shortest name that protoc resolves to `name` (fully qualified, with its
        leading dot, a declaration of one of `kinds`) from `scope` (and, `everywhere`, from
        the scope around it too: an option's name is looked up from its element's scope or
        the one around it)."""
        if self._qualified or not name.startswith("."):
            return name
        target = name[1:]
        parts = target.split(".")
        scopes = [scope, scope.rpartition(".")[0]] if everywhere else [scope]
        for start in range(len(parts) - 1, -1, -1):
            candidate = ".".join(parts[start:])
            if all(self._resolves(candidate, where, target, kinds) for where in scopes):
                return candidate
        return name

    def _resolves(self, name: str, scope: str, target: str, kinds: frozenset[str]) -> bool:
        """Whether protoc's lookup of `name` from `scope` finds `target`: the first part is
        looked for from the innermost scope out, and the rest inside what it found. Any
        other symbol met first makes the name unsafe here."""
        first, _, rest = name.partition(".")
        while True:
            candidate = _join(scope, first)
            kind = self._symbols.get(candidate)
            if kind is not None:
                if not rest:
                    return candidate == target and kind in kinds
                return kind in _AGGREGATES and f"{candidate}.{rest}" == target
            if not scope:
                return False
            scope = scope.rpartition(".")[0]

    # -- output --------------------------------------------------------------------------

    def _line(self, depth: int, text: str) -> None:
        self._lines.append(_INDENT * depth + text)

    def _close(self, depth: int) -> None:
        """The end of a block (`{}` on the opening line when the block is empty)."""
        last = self._lines[-1]
        if last.endswith("{") and not last.startswith(_INDENT * (depth + 1)):
            self._lines[-1] = last + "}"
        else:
            self._line(depth, "}")

    def _section(self, depth: int, kind: str) -> None:
        """A blank line where the file's top level passes from one kind of statement to
        another (imports, options, types, extends, services), as Confluent's registry lays
        a file out."""
        if depth == 0 and kind != self._kind:
            self._kind = kind
            self._lines.append("")


def _symbols(files: Iterable[Any]) -> dict[str, str]:
    """Every name the files declare (packages and their parents too), by kind: what protoc's
    lookup of a relative name may meet."""
    found: dict[str, str] = {}

    def enums(scope: str, declared: Iterable[Any]) -> None:
        for enum in declared:
            found[_join(scope, enum.name)] = "enum"
            for value in enum.value:
                found.setdefault(_join(scope, value.name), "value")

    def messages(scope: str, declared: Iterable[Any]) -> None:
        for item in declared:
            name = _join(scope, item.name)
            found[name] = "message"
            for member in [*item.field, *item.extension, *item.oneof_decl]:
                found.setdefault(_join(name, member.name), "member")
            enums(name, item.enum_type)
            messages(name, item.nested_type)

    for file in files:
        parts = file.package.split(".") if file.package else []
        for end in range(1, len(parts) + 1):
            found.setdefault(".".join(parts[:end]), "package")
        for extension in file.extension:
            found.setdefault(_join(file.package, extension.name), "member")
        for service in file.service:
            name = _join(file.package, service.name)
            found[name] = "service"
            for method in service.method:
                found.setdefault(_join(name, method.name), "member")
        enums(file.package, file.enum_type)
        messages(file.package, file.message_type)
    return found


def _owned(field: Any, types: Sequence[Any], scope: str) -> int | None:
    """The index of the message a map field or a group declares beside itself, if any."""
    is_map = field.type == _FDP.TYPE_MESSAGE and field.label == _FDP.LABEL_REPEATED
    if field.type != _FDP.TYPE_GROUP and not is_map:
        return None
    for index, declared in enumerate(types):
        if field.type_name == f".{_join(scope, declared.name)}" and (
            field.type == _FDP.TYPE_GROUP or declared.options.map_entry
        ):
            return index
    return None


def _entry_fields(entry: Any) -> tuple[Any, Any]:
    """A map's key and value fields (numbers 1 and 2 of its `*Entry` message)."""
    by_number = {field.number: field for field in entry.field}
    if len(entry.field) != 2 or set(by_number) != {1, 2}:
        raise Unprintable(f"map entry {entry.name!r} does not have a key and a value")
    return by_number[1], by_number[2]


def _in_real_oneof(field: Any) -> bool:
    return field.HasField("oneof_index") and not field.proto3_optional


def repeated(field: Any) -> bool:
    """Whether a field (a FieldDescriptor) is repeated, in protobuf's releases before and
    after `label` gave way to `is_repeated`."""
    flag = getattr(field, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return bool(field.label == field.LABEL_REPEATED)


def _value(field: Any, value: Any) -> str:
    """An option's value as .proto text: a message in braces (text format)."""
    kind = field.type
    if kind == field.TYPE_BOOL:
        return "true" if value else "false"
    if kind == field.TYPE_ENUM:
        named = field.enum_type.values_by_number.get(value)
        if named is None:
            raise Unprintable(f"option {field.name} has the unnamed enum number {value}")
        return str(named.name)
    if kind == field.TYPE_STRING:
        return _string(value)
    if kind == field.TYPE_BYTES:
        return f'"{text_encoding.CEscape(value, as_utf8=False)}"'
    if kind in (field.TYPE_MESSAGE, field.TYPE_GROUP):
        return f"{{ {text_format.MessageToString(value, as_one_line=True)} }}"
    if kind in (field.TYPE_FLOAT, field.TYPE_DOUBLE):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return str(value)


def _default(field: Any) -> str:
    """A proto2 default as the descriptor keeps it (a string as is, bytes C-escaped, a number
    or an enum value's name as text)."""
    value = field.default_value
    if field.type == _FDP.TYPE_STRING:
        return _string(value)
    if field.type == _FDP.TYPE_BYTES:
        return f'"{value}"'
    return str(value)


def _string(text: str) -> str:
    return f'"{text_encoding.CEscape(text, as_utf8=True)}"'


def _range(start: int, end: int, top: int) -> str:
    """A range of numbers, its end included."""
    if start == end:
        return str(start)
    return f"{start} to {'max' if end == top else end}"


def _join(scope: str, name: str) -> str:
    return f"{scope}.{name}" if scope else name


def _identifier(name: str, what: str) -> None:
    if not _IDENTIFIER.fullmatch(name):
        raise Unprintable(f"{what} name {name!r} is not an identifier")
