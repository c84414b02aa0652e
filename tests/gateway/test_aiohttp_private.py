"""The aiohttp private names the gateway uses (gateway.http.aiohttp_private) are all still there,
with the parameters the adapter calls them with: an aiohttp release that renames or reshapes
one fails here, naming it, before a connection misbehaves. And no other module of the gateway
reaches for one of them."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import ModuleType

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from gateway.http import aiohttp_private
from gateway.http.aiohttp_private import PRIVATE, Private

GATEWAY = Path(aiohttp_private.__file__).resolve().parents[1]


def _instance(owner: type) -> object:
    """An instance of `owner`, for the names aiohttp sets in __init__ rather than declares."""
    if owner is web.BaseRequest:
        return make_mocked_request("GET", "/")
    assert owner is web.Server, owner
    return web.Server(_handler, keepalive_timeout=7.0)


async def _handler(request: web.BaseRequest) -> web.StreamResponse:
    return web.Response()


def _has(private: Private) -> bool:
    """Whether `private.owner` (or its instances) has the name: an attribute, slot or method."""
    owner, name = private.owner, private.name
    if isinstance(owner, ModuleType):
        return hasattr(owner, name)
    if private.instance:
        return hasattr(_instance(owner), name)
    return any(name in vars(klass) for klass in owner.__mro__)


def _named(owner: type | ModuleType) -> str:
    return (
        owner.__name__
        if isinstance(owner, ModuleType)
        else f"{owner.__module__}.{owner.__qualname__}"
    )


@pytest.mark.parametrize("private", PRIVATE, ids=lambda p: f"{p.owner.__name__}.{p.name}")
async def test_each_private_name_is_still_there(private: Private) -> None:
    owner = _named(private.owner)
    assert _has(private), (
        f"aiohttp {aiohttp.__version__}: {owner} has no {private.name} any more; "
        f"gateway/http/aiohttp_private.py uses it: {private.why}"
    )
    if private.parameters is None:
        return
    found = tuple(inspect.signature(getattr(private.owner, private.name)).parameters)
    assert found == private.parameters, (
        f"aiohttp {aiohttp.__version__}: {owner}.{private.name} takes {found}, "
        f"gateway/http/aiohttp_private.py uses {private.parameters}: {private.why}"
    )


async def test_a_server_keeps_its_handler_arguments() -> None:
    server = _instance(web.Server)
    assert isinstance(server, web.Server)
    assert aiohttp_private.handler_kwargs(server) == {"keepalive_timeout": 7.0}, (
        f"aiohttp {aiohttp.__version__}: web.Server no longer keeps its handler arguments as "
        "gateway/http/aiohttp_private.py reads them"
    )


def _private_names_reached(path: Path, names: set[str]) -> list[str]:
    """`module:line name` for each attribute of `names` read or written, and each underscore
    name imported from aiohttp, in one source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f"{path.relative_to(GATEWAY.parent)}:{node.lineno} {node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiohttp"):
            found += [
                f"{path.relative_to(GATEWAY.parent)}:{node.lineno} {alias.name}"
                for alias in node.names
                if alias.name.startswith("_")
            ]
    return found


def test_no_other_module_reaches_for_a_private_name() -> None:
    """The names of PRIVATE that are aiohttp's own (not words our classes use too) appear in
    no other module of the gateway, and nothing imports an underscore name from aiohttp."""
    ours = {"_buffer", "_size", "_server", "_close", "_task"}  # words our own classes use too
    names = {p.name for p in PRIVATE} - ours
    adapter = Path(aiohttp_private.__file__).resolve()
    found = [
        hit
        for path in sorted(GATEWAY.rglob("*.py"))
        if path.resolve() != adapter
        for hit in _private_names_reached(path, names)
    ]
    assert found == [], "aiohttp private names outside gateway/http/aiohttp_private.py"
