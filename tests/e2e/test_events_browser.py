"""A real EventSource: headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium) follows a topic from a page of another origin, and, when the gateway restarts under
it, reconnects with Last-Event-ID and goes on with nothing skipped and nothing twice."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.chromium import needs_chromium, start_chromium
from tests.e2e.conftest import start_server, until

pytestmark = needs_chromium
PAGE = """<!doctype html>
<title>tail</title>
<link rel="icon" href="data:,">
<script>
  window.seen = [];
  window.opened = 0;
  const source = new EventSource("GATEWAY/v1/topics/orders/events?offset=earliest");
  source.onopen = () => { window.opened += 1; };
  source.addEventListener("record", (e) => {
    window.seen.push({id: e.lastEventId, record: JSON.parse(e.data)});
  });
</script>
"""


@pytest.fixture
def page_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A static site on another port (another origin) and the folder it serves."""
    site = tmp_path / "site"
    site.mkdir()
    handler = partial(SimpleHTTPRequestHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", site
    server.shutdown()
    thread.join()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    driver = start_chromium(tmp_path / "profile")
    yield driver
    driver.quit()


def seen(browser: Any) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = browser.execute_script("return window.seen;")
    return got


def produce(url: str, first: int, count: int) -> None:
    body = {"records": [{"key": f"k{n}", "value": n} for n in range(first, first + count)]}
    assert httpx.post(f"{url}/v1/topics/orders/records", json=body).status_code == 200


def test_eventsource_follows_and_resumes_across_a_restart(
    tmp_path: Path, page_server: tuple[str, Path], browser: Any
) -> None:
    origin, site = page_server
    data = tmp_path / "data"
    gateway = start_server(data, "--cors-origins", origin)
    port = gateway.port
    try:
        answer = httpx.post(f"{gateway.url}/v1/topics", json={"name": "orders", "partitions": 2})
        assert answer.status_code == 201
        produce(gateway.url, 0, 10)
        (site / "tail.html").write_text(PAGE.replace("GATEWAY", gateway.url))
        browser.get(f"{origin}/tail.html")
        until(lambda: len(seen(browser)) == 10, "the first ten records in the page")
        produce(gateway.url, 10, 5)  # live
        until(lambda: len(seen(browser)) == 15, "the live records in the page")
        assert gateway.stop() == 0
        gateway = start_server(data, "--cors-origins", origin, "--port", str(port))
        produce(gateway.url, 15, 5)  # while the page reconnects
        until(lambda: browser.execute_script("return window.opened;") == 2, "a reconnection")
        until(lambda: len(seen(browser)) >= 20, "the records after the restart")
    finally:
        if gateway.process.poll() is None:
            assert gateway.stop() == 0
    records = [event["record"] for event in seen(browser)]
    assert sorted(r["value"] for r in records) == list(range(20))  # none skipped, none twice
    for p in (0, 1):
        offsets = [r["offset"] for r in records if r["partition"] == p]
        assert offsets == list(range(len(offsets)))
    last = seen(browser)[-1]
    pairs = dict(pair.split("-") for pair in last["id"].split("."))
    assert sum(int(o) for o in pairs.values()) == 20  # the last id covers every record
    # The console shows only the refused reconnections while the gateway was down: a CORS
    # refusal or a script error would be there too.
    for entry in browser.get_log("browser"):
        assert "/v1/topics/orders/events" in entry["message"], entry
        assert "ERR_CONNECTION_REFUSED" in entry["message"], entry
