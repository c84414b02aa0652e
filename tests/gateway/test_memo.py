"""gateway.http.memo, the bounded memory behind the HTTP/1.1 heads, HTTP/2 header blocks and produce
targets the gateway remembers (tests/e2e/test_fast_routes.py shows a known head served without
aiohttp's parser on a real server)."""

from __future__ import annotations

from gateway.http.memo import Memo


def test_a_memo_holds_at_most_its_limit() -> None:
    memo: Memo[int, str] = Memo(3)
    for key in range(3):
        memo.remember(key, str(key))
    assert memo == {0: "0", 1: "1", 2: "2"}
    memo.remember(3, "3")  # full: forgotten wholesale, then kept
    assert memo == {3: "3"}
    assert memo.get(0) is None and memo.get(3) == "3"
