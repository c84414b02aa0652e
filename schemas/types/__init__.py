"""Schema types (Avro, JSON Schema, Protobuf): parse a schema's text, its canonical form,
reader/writer compatibility, and the values it describes.

`parse` is the one entry: each type's module implements `ParsedSchema`. A schema's references
arrive resolved (name → the referenced schema, itself parsed with its own references), so the
types never reach the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from schemas.errors import INVALID_SCHEMA, InvalidValue, SchemaError

__all__ = [
    "SCHEMA_TYPES",
    "InvalidValue",
    "ParsedSchema",
    "Reference",
    "SchemaType",
    "parse",
    "references_of",
]

SchemaType = Literal["AVRO", "JSON", "PROTOBUF"]
SCHEMA_TYPES: tuple[SchemaType, ...] = ("AVRO", "JSON", "PROTOBUF")


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema's reference to another subject's version, under the name its text uses
    (an Avro full name, a JSON Schema `$ref` URL, a Protobuf import path)."""

    name: str
    subject: str
    version: int


class ParsedSchema(Protocol):
    """A valid schema of one type."""

    schema_type: SchemaType
    text: str  # as registered (a Protobuf descriptor registered serialized: its .proto text)
    reference_depth: int  # how deep its chain of references nests (0: it has none)

    def canonical(self) -> str:
        """The normalised text: two registrations with the same canonical text (and the same
        references) are the same schema and get the same id."""

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        """Why data written with `writer` cannot be read with this schema; empty if it can."""

    def validate(self, value: Any) -> None:
        """Raise InvalidValue (where in the value, and why) if the schema does not describe
        this JSON value."""

    def encode(self, value: Any) -> bytes:
        """The JSON value as the type's binary payload (what follows the wire format's header)."""

    def decode(self, payload: bytes) -> Any:
        """A binary payload back to a JSON value; InvalidValue if it is not one of
        this schema's."""


Typed = TypeVar("Typed")


def references_of(
    references: Mapping[str, ParsedSchema], kind: type[Typed], type_name: SchemaType
) -> tuple[dict[str, Typed], int]:
    """A schema's references as schemas of its own type, and the depth of its reference chain
    (SchemaError(INVALID_SCHEMA) for a reference of another type or a chain too deep)."""
    from schemas.types import limits

    typed: dict[str, Typed] = {}
    depth = 0
    for name, reference in references.items():
        if not isinstance(reference, kind):
            raise SchemaError(
                INVALID_SCHEMA,
                f"reference {name!r} is {reference.schema_type}, not {type_name}",
            )
        typed[name] = reference
        depth = max(depth, reference.reference_depth + 1)
    limits.check_reference_depth(depth)
    return typed, depth


def parse(
    schema_type: SchemaType, text: str, references: Mapping[str, ParsedSchema]
) -> ParsedSchema:
    """Parse `text` as a schema of `schema_type`; SchemaError(INVALID_SCHEMA) says why not."""
    if schema_type == "AVRO":
        from schemas.types import avro

        return avro.parse(text, references)
    if schema_type == "JSON":
        from schemas.types import json_schema

        return json_schema.parse(text, references)
    from schemas.types import protobuf

    return protobuf.parse(text, references)
