"""The quick Avro check never accepts a datum fastavro's validator refuses (generated values
against schemas of every kind), and it does accept the plain values it exists for."""

from __future__ import annotations

from typing import Any

import pytest
from fastavro import parse_schema
from fastavro.validation import validate
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.types.avro_check import quick_check

KEYS = ["id", "name", "score", "tags", "kind", "next", "-type", "raw", "x"]
SCHEMAS: dict[str, Any] = {
    "primitives": {
        "type": "record", "name": "P", "namespace": "t",
        "fields": [
            {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
            {"name": "score", "type": "double"}, {"name": "x", "type": "int"},
            {"name": "kind", "type": "boolean"}, {"name": "raw", "type": "bytes"},
            {"name": "tags", "type": "float"},
        ],
    },
    "defaults": {
        "type": "record", "name": "D",
        "fields": [{"name": "id", "type": "int", "default": 0}, {"name": "x", "type": "null"}],
    },
    "nested": {
        "type": "record", "name": "N",
        "fields": [
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "score", "type": {"type": "map", "values": ["null", "long"]}},
            {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["id", "x"]}},
            {"name": "raw", "type": {"type": "fixed", "name": "F", "size": 2}},
            {"name": "next", "type": ["null", {
                "type": "record", "name": "Inner", "fields": [{"name": "id", "type": "int"}],
            }]},
            {"name": "x", "type": ["null", "Inner"]},
        ],
    },
    "union": ["null", "int", "string", {"type": "array", "items": "double"}],
    "top-level map": {"type": "map", "values": {"type": "array", "items": "boolean"}},
}  # fmt: skip
RECURSIVE = {
    "type": "record", "name": "Node",
    "fields": [{"name": "id", "type": "int"}, {"name": "next", "type": ["null", "Node"]}],
}  # fmt: skip
PLAIN: dict[str, Any] = {
    "primitives": {
        "id": 2**40, "name": "n", "score": 1.5, "x": -7, "kind": True, "raw": b"\x00", "tags": 2,
    },
    "defaults": {"id": 3, "x": None},
    "nested": {
        "tags": ["a"], "score": {"a": None, "b": 4}, "kind": "x", "raw": b"ab",
        "next": {"id": 1}, "x": None,
    },
    "union": [1.0, 2],
    "top-level map": {"a": [True, False]},
}  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63) - 1]),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.sampled_from(["id", "x", "K", "Inner", "-type"]),
    st.binary(max_size=3),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(st.sampled_from(["Inner", "int", "t.P"]), inner),
        st.dictionaries(st.sampled_from(KEYS), inner, max_size=6),
    ),
    max_leaves=20,
)


INNER = SCHEMAS["nested"]["fields"][4]["type"][1]
VALID: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "float": st.one_of(st.floats(), st.integers(-(2**40), 2**40)),
    "double": st.one_of(st.floats(), st.integers(-(2**40), 2**40)),
    "string": st.text(max_size=4),
    "bytes": st.binary(max_size=4),
}


def valid(node: Any) -> st.SearchStrategy[Any]:
    """Values of the schema `node`."""
    if isinstance(node, list):
        return st.one_of(*(valid(branch) for branch in node))
    if isinstance(node, str):
        return valid(INNER) if node == "Inner" else VALID[node]
    kind = node["type"]
    if kind in ("record", "error"):
        return st.fixed_dictionaries({f["name"]: valid(f["type"]) for f in node["fields"]})
    if kind == "array":
        return st.lists(valid(node["items"]), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=2), valid(node["values"]), max_size=3)
    if kind == "enum":
        return st.sampled_from(node["symbols"])
    if kind == "fixed":
        return st.binary(min_size=node["size"], max_size=node["size"])
    return valid(kind)


def places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in `value`: itself, its items, its dictionaries' values and keys."""
    found = [path]
    if isinstance(value, list):
        for i, item in enumerate(value):
            found += places(item, (*path, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            found += [(*path, ("key", key)), *places(item, (*path, key))]
    return found


def changed(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """`value` with the place `path` replaced by `new` (a key place: the key renamed, or the
    entry dropped when `new` is None)."""
    if not path:
        return new
    step, rest = path[0], path[1:]
    if isinstance(step, tuple):
        copy = dict(value)
        item = copy.pop(step[1])
        if new is not None:
            copy[new if isinstance(new, str | int | float | bytes) else str(new)] = item
        return copy
    if isinstance(value, list):
        return [*value[:step], changed(value[step], rest, new), *value[step + 1 :]]
    return {**value, step: changed(value[step], rest, new)}


@st.composite
def near(draw: st.DrawFn, node: Any) -> Any:
    """A value of `node`, then mostly one place in it replaced by anything."""
    value = draw(valid(node))
    if draw(st.integers(0, 3)):
        path = draw(st.sampled_from(places(value)))
        value = changed(value, path, draw(st.one_of(scalars, values)))
    return value


def parsed(schema: Any) -> tuple[Any, dict[str, Any]]:
    named: dict[str, Any] = {}
    return parse_schema(schema, named_schemas=named), named


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=600, deadline=None)
@given(data=st.data())
def test_what_the_quick_check_accepts_fastavro_accepts(name: str, data: st.DataObject) -> None:
    value = data.draw(near(SCHEMAS[name]))
    codec, named = parsed(SCHEMAS[name])
    check = quick_check(codec, named)
    assert check is not None
    if check(value):
        assert validate(value, codec, raise_errors=False), value


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_plain_values_pass_the_quick_check(name: str) -> None:
    codec, named = parsed(SCHEMAS[name])
    check = quick_check(codec, named)
    assert check is not None and check(PLAIN[name])
    assert validate(PLAIN[name], codec, raise_errors=False)


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ("long", True),
        ("long", 2**63),
        ("int", 2**31),
        ("int", -(2**31) - 1),
        ("double", False),
        ({"type": "enum", "name": "E", "symbols": ["a"]}, "b"),
        ({"type": "fixed", "name": "F", "size": 2}, b"a"),
        ({"type": "map", "values": "int"}, {1: 1}),
        ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]},
         {"a": 1, "-type": "S"}),
        (["null", "int"], ("int", 1)),
        ({"type": "array", "items": "int"}, (1, 2)),
    ],
)  # fmt: skip
def test_what_fastavro_refuses_the_quick_check_refuses(schema: Any, value: Any) -> None:
    codec, named = parsed(schema)
    check = quick_check(codec, named)
    assert check is not None and not check(value)


def test_a_missing_field_is_left_to_fastavro_and_its_default() -> None:
    codec, named = parsed(SCHEMAS["defaults"])
    check = quick_check(codec, named)
    assert check is not None and not check({"x": None})
    assert validate({"x": None}, codec, raise_errors=False)


def test_a_schema_that_refers_to_itself_has_no_quick_check() -> None:
    assert quick_check(*parsed(RECURSIVE)) is None
