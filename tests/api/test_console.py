"""The web console's routes (gateway.api.console): its page and files, only those, with a
content security policy that keeps it to this node; public with --auth; off with --no-console;
shipped as package data. And `GET /v1/traffic`, the counters its Throughput page draws."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from gateway.console import STATIC
from tests.api.support import Client, Start, create_topic, fetch, problem, produce
from tests.auth.support import bearer, make_key

REPO = Path(__file__).resolve().parents[2]


async def test_the_page_and_its_files(client: Client) -> None:
    page = await client.get("/console")
    assert page.status == 200 and page.content_type == "text/html"
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    html = await page.text()
    assert 'src="console/app.js"' in html and "http" not in html.replace("http-equiv", "")
    script = await client.get("/console/app.js")
    assert script.status == 200 and script.content_type == "text/javascript"
    style = await client.get("/console/style.css")
    assert style.status == 200 and style.content_type == "text/css"
    again = await client.get("/console/app.js", headers={"If-None-Match": script.headers["ETag"]})
    assert again.status == 304


async def test_a_trailing_slash_is_sent_to_the_page(client: Client) -> None:
    moved = await client.get("/console/", allow_redirects=False)
    assert moved.status == 308 and moved.headers["Location"] == "../console"
    page = await client.get("/console/")
    assert page.status == 200 and page.url.path == "/console"


async def test_only_the_consoles_own_files(client: Client) -> None:
    for name in ("nope.js", "..%2Fapp.py", "%2E%2E", "index.html%00.js"):
        await problem(await client.get(f"/console/{name}"), 404, "NOT_FOUND")
    await problem(await client.get("/console/static/app.js"), 404, "NOT_FOUND")


async def test_every_module_the_page_imports_is_served(client: Client) -> None:
    """A module named in an import but missing from the folder would break the page."""
    for path in STATIC.glob("*.js"):
        for line in path.read_text().splitlines():
            if line.startswith("import ") and ' from "./' in line:
                name = line.split(' from "./', 1)[1].split('"', 1)[0]
                assert (await client.get(f"/console/{name}")).status == 200, (path.name, name)


async def test_the_console_is_public_with_auth_and_the_api_is_not(
    start: Start, data_dir: Path
) -> None:
    key = make_key(data_dir, "admin")
    client = await start(auth=True, super_users=("admin",))
    assert (await client.get("/console")).status == 200
    assert (await client.get("/console/api.js")).status == 200
    await problem(await client.get("/v1/cluster"), 401, "UNAUTHENTICATED")
    assert (await client.get("/v1/cluster", headers=bearer(key))).status == 200


async def test_no_console_turns_it_off(start: Start) -> None:
    client = await start(no_console=True)
    await problem(await client.get("/console"), 404, "NOT_FOUND")
    await problem(await client.get("/console/app.js"), 404, "NOT_FOUND")
    assert (await client.get("/v1/cluster")).status == 200


def test_the_files_ship_in_the_wheel() -> None:
    """Every file of the folder matches the package data globs of pyproject.toml."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = project["tool"]["setuptools"]["package-data"]["gateway.console"]
    files = [p.relative_to(STATIC.parent).as_posix() for p in STATIC.rglob("*") if p.is_file()]
    assert files
    for name in files:
        assert any(fnmatch.fnmatch(name, g) for g in globs), name


async def test_traffic_counts_per_topic(client: Client) -> None:
    empty = await (await client.get("/v1/traffic")).json()
    assert empty["topics"] == [] and empty["time_ms"] > 0
    await create_topic(client, "a")
    await create_topic(client, "b")
    await produce(client, [{"value": n} for n in range(3)], topic="a")
    await produce(client, [{"value": 1}], topic="b")
    await fetch(client, "a")
    doc = await (await client.get("/v1/traffic")).json()
    assert doc["time_ms"] >= empty["time_ms"]
    by_topic = {t["topic"]: t for t in doc["topics"]}
    assert [t["topic"] for t in doc["topics"]] == ["a", "b"]
    assert by_topic["a"]["records_in"] == 3 and by_topic["a"]["records_out"] == 3
    assert by_topic["b"]["records_in"] == 1 and by_topic["b"]["records_out"] == 0
    assert by_topic["a"]["bytes_in"] > by_topic["b"]["bytes_in"] > 0
    assert by_topic["a"]["bytes_out"] > 0


async def test_traffic_needs_describe_on_the_cluster(start: Start, data_dir: Path) -> None:
    bob = make_key(data_dir, "bob")
    client = await start(auth=True)
    await problem(await client.get("/v1/traffic"), 401, "UNAUTHENTICATED")
    await problem(await client.get("/v1/traffic", headers=bearer(bob)), 403, "ACL_DENIED")
