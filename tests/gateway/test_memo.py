"""gateway.connections' memory of the produce heads the lane took (tests/e2e/test_lane.py
shows a known head served without aiohttp's parser on a real server)."""

from __future__ import annotations

import pytest
from aiohttp import HttpVersion11
from aiohttp.http_parser import RawRequestMessage
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from gateway import connections


def parsed(path: str) -> RawRequestMessage:
    headers = CIMultiDictProxy(CIMultiDict({"Content-Length": "3"}))
    return RawRequestMessage(
        "POST", path, HttpVersion11, headers, (), False, None, False, False, URL(path)
    )


def test_heads_are_remembered_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections, "_KNOWN_HEADS", {})
    heads = [
        b"POST /v1/topics/t%d/records HTTP/1.1\r\nContent-Length: 3\r\n\r\n" % i
        for i in range(connections._KNOWN_HEADS_KEPT + 10)
    ]
    for head in heads:
        connections.remember_head(head, parsed("/v1/topics/t/records"), 3)
    known = connections._KNOWN_HEADS
    assert 0 < len(known) <= connections._KNOWN_HEADS_KEPT
    assert known[heads[-1]][1] == 3
    large = b"POST / HTTP/1.1\r\nX: %s\r\n\r\n" % (b"y" * connections._KNOWN_HEAD_MAX_BYTES)
    connections.remember_head(large, parsed("/"), 0)
    assert large not in known
