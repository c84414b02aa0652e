"""The web console (`GET /console`) in headless Chromium against real nodes: every page loads
without a console error and calls nothing but the public /v1 API, the schema registry's and its
own files; each action works end to end; deep links survive a reload; the sign-in flow and a
key without ACLs; the cluster page over four nodes, and its actions; the Schemas page and
decoded values. Screenshots of the pages go to $SLUICE_CONSOLE_SCREENSHOTS (docs/console/ holds
a few), else to the test's temporary folder."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from gateway.workers.local_cluster import LocalCluster, free_port
from tests.auth.support import binding, make_basic, make_key
from tests.e2e.chromium import needs_chromium, start_chromium
from tests.e2e.conftest import (
    Server,
    finish,
    held_produce,
    start_server,
    until,
    write_in_transaction,
)

pytestmark = needs_chromium
PAGES = (
    "/cluster",
    "/topics",
    "/topics/orders",
    "/topics/orders/messages?partition=0&from=beginning&order=oldest",
    "/topics/orders/tail",
    "/groups",
    "/groups/billing",
    "/queues",
    "/queues/workers",
    "/transactions",
    "/transactions?state=Ongoing",
    "/transactions/pay-runner",
    "/subscriptions",
    "/subscriptions/orders-hook",
    "/schemas",
    "/schemas/orders-value",
    "/access",
    "/throughput",
)
CONSOLE_FILES = {"/console"} | {
    f"/console/{name}"
    for name in ("app.js", "api.js", "ui.js", "style.css", "cluster.js", "topics.js",
                 "messages.js", "groups.js", "queues.js", "subscriptions.js", "schemas.js",
                 "access.js", "throughput.js", "transactions.js")
}  # fmt: skip


ORDER_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "order", "type": "int"},
        {"name": "items", "type": {"type": "array", "items": "string"}},
    ],
}


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    driver = start_chromium(tmp_path / "profile")
    yield driver
    driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the screenshots go."""
    folder = Path(os.environ.get("SLUICE_CONSOLE_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wait(browser: Any, condition: Callable[[], object], what: str) -> None:
    """Poll the page until `condition()` is true (bounded)."""
    until(lambda: bool(condition()), what, timeout=30)


def shown(browser: Any, route: str, origin: str) -> None:
    """Open the console at `route` and wait until the page has rendered it."""
    browser.get(f"{origin}/console#{route}")
    wait(browser, lambda: ready(browser, f"#{route}"), f"the page {route}")


def ready(browser: Any, shown: str | None = None) -> bool:
    """The page has rendered (`shown`: this fragment, or "sign-in"), nothing pending."""
    return bool(
        browser.execute_script(
            "const m = document.getElementById('main');"
            "return m !== null && !m.hasAttribute('aria-busy') && m.dataset.shown !== undefined"
            "  && (arguments[0] === null || m.dataset.shown === arguments[0]);",
            shown,
        )
    )


def reloaded(browser: Any) -> str:
    """Reload the page; its text once rendered again."""
    browser.execute_script("document.getElementById('main').removeAttribute('data-shown');")
    browser.refresh()
    wait(browser, lambda: ready(browser), "the reloaded page")
    return main_text(browser)


def heading(browser: Any) -> str:
    text: str = browser.execute_script("return document.querySelector('main h1').textContent;")
    return text


def main_text(browser: Any) -> str:
    text: str = browser.execute_script("return document.getElementById('main').innerText;")
    return text


def first_column(browser: Any) -> list[str]:
    """The first cells of the page's first table."""
    cells: list[str] = browser.execute_script(
        "const t = document.querySelector('main table');"
        "return t ? [...t.tBodies[0].rows].map(r => r.cells[0].textContent) : [];"
    )
    return cells


def problems(browser: Any) -> list[str]:
    found: list[str] = browser.execute_script(
        "return [...document.querySelectorAll('.problem')].map(p => p.innerText);"
    )
    return found


def script_errors(browser: Any) -> list[dict[str, Any]]:
    """Console errors other than the network's own lines for refused requests."""
    return [
        e for e in browser.get_log("browser") if e["level"] == "SEVERE" and e["source"] != "network"
    ]


def requested(browser: Any, origin: str) -> list[str]:
    """The URL of every request made by a page from `origin` since the last call (Chromium's
    network log; the browser's own pages, such as its new tab, are left out)."""
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            params = message["params"]
            if params.get("documentURL", "").startswith(f"{origin}/"):
                urls.append(params["request"]["url"])
    return urls


def fill(browser: Any, element_id: str, text: str) -> None:
    control = browser.find_element("id", element_id)
    control.clear()
    control.send_keys(text)


def choose(browser: Any, element_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", element_id)).select_by_value(value)


def submit(browser: Any, legend: str) -> None:
    """Press the submit button of the form whose legend starts with `legend`."""
    browser.execute_script(
        "const f = [...document.querySelectorAll('form')].find("
        "  f => f.querySelector('legend')?.textContent.startsWith(arguments[0]));"
        "f.querySelector('button[type=submit]').click();",
        legend,
    )


def confirm_dialog(browser: Any, typed: str | None = None) -> None:
    wait(browser, lambda: browser.find_elements("css selector", "dialog[open]"), "the question")
    if typed is not None:
        browser.find_element("id", "confirm-typed").send_keys(typed)
    browser.find_element("css selector", "dialog[open] button[type=submit]").click()


def seed(url: str, headers: dict[str, str] | None = None) -> None:
    """A topic with records (JSON, keys, headers), a group with committed offsets and no
    members, a share group with a member holding records, a push subscription and an open
    transaction (`headers`: the credentials, on a node with --auth)."""
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        assert http.post("/v1/topics", json={"name": "orders", "partitions": 3}).status_code == 201
        records = [
            {"key": f"k{n}", "value": {"order": n, "items": ["tea", "cake"]},
             "headers": {"source": "test"}, "partition": n % 3}
            for n in range(12)
        ]  # fmt: skip
        assert http.post("/v1/topics/orders/records", json={"records": records}).status_code == 200
        joined = http.post("/v1/groups/billing/members", json={"topics": ["orders"]}).json()
        member = joined["member_id"]
        commit = {"offsets": [{"topic": "orders", "partition": p, "offset": 2} for p in range(3)]}
        answer = http.post(f"/v1/groups/billing/members/{member}/commit", json=commit)
        assert answer.status_code == 200, answer.text
        assert http.delete(f"/v1/groups/billing/members/{member}").status_code == 204
        sub = {"name": "orders-hook", "topic": "orders", "endpoint": "https://hooks.example.com/o"}
        assert http.post("/v1/subscriptions", json=sub).status_code == 201
        configs = {"configs": {"share.auto.offset.reset": "earliest"}}
        assert http.put("/v1/share-groups/workers/configs", json=configs).status_code == 200
        joined = {"topics": ["orders"], "member_id": "worker-1"}
        assert http.post("/v1/share-groups/workers/members", json=joined).status_code == 201
        answer = http.post("/v1/share-groups/workers/members/worker-1/acquire?max_records=4")
        assert len(answer.json()["records"]) == 4, answer.text
        schema = {"schema": json.dumps(ORDER_SCHEMA)}
        answer = http.post("/schema-registry/subjects/orders-value/versions", json=schema)
        assert answer.status_code == 200, answer.text
        begun = http.post("/v1/transactions/pay-runner", json={"timeout_ms": 900_000})
        assert begun.status_code == 201, begun.text


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "data")
    seed(running.url)
    yield running
    if running.process.poll() is None:
        assert running.stop() == 0


def test_every_page_loads_and_calls_only_the_public_api(
    node: Server, browser: Any, shots: Path
) -> None:
    for route in PAGES:
        shown(browser, route, node.url)
        assert problems(browser) == [], (route, problems(browser))
        name = route.strip("/").split("?")[0].replace("/", "-")
        browser.save_screenshot(str(shots / f"{name}.png"))
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    paths = set()
    for url in requested(browser, node.url):
        if url.startswith("data:"):
            continue
        parts = urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}" == node.url, url  # this node only: no CDN
        paths.add(parts.path)
    assert paths >= CONSOLE_FILES
    others = paths - CONSOLE_FILES
    assert others and all(p.startswith(("/v1/", "/schema-registry/")) for p in others), sorted(
        others
    )


def test_the_pages_read_in_a_narrow_window(node: Server, browser: Any, shots: Path) -> None:
    browser.set_window_size(390, 844)
    for route in PAGES:
        shown(browser, route, node.url)
        overflow = browser.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth;"
        )
        assert overflow <= 1, (route, overflow)  # wide tables scroll inside their own box
    shown(browser, PAGES[3], node.url)
    browser.save_screenshot(str(shots / "narrow-messages.png"))


def test_keyboard_reaches_every_page_from_the_navigation(node: Server, browser: Any) -> None:
    from selenium.webdriver.common.keys import Keys

    shown(browser, "/cluster", node.url)
    body = browser.find_element("tag name", "body")
    reached = []
    for _ in range(11):  # the skip link, the brand, then the nine pages
        body.send_keys(Keys.TAB)
        reached.append(browser.execute_script("return document.activeElement.textContent;"))
    assert reached[0] == "Skip to the page"
    pages = ("Cluster", "Topics", "Groups", "Queues", "Transactions", "Subscriptions", "Schemas",
             "Access", "Throughput")  # fmt: skip
    for page in pages:
        assert page in reached
    browser.switch_to.active_element.send_keys(Keys.ENTER)  # the last one: Throughput
    wait(browser, lambda: ready(browser) and heading(browser) == "Throughput", "the page")
    labelled = browser.execute_script(
        "return [...document.querySelectorAll('main input, main select, main textarea')]"
        ".every(c => c.labels && c.labels.length > 0);"
    )
    assert labelled


def test_actions_end_to_end(node: Server, browser: Any, shots: Path) -> None:
    http = httpx.Client(base_url=node.url, timeout=30)
    # Create a topic from the form.
    shown(browser, "/topics", node.url)
    fill(browser, "create-name", "payments")
    fill(browser, "create-partitions", "2")
    submit(browser, "Create a topic")
    wait(browser, lambda: ready(browser) and heading(browser) == "Topic payments", "the topic")
    assert len(http.get("/v1/topics/payments").json()["partitions"]) == 2
    # Change a config.
    choose(browser, "alter-config", "retention.ms")
    fill(browser, "alter-value", "3600000")
    submit(browser, "Change a config")
    until(lambda: http.get("/v1/topics/payments").json()["overrides"] != {}, "the override")
    assert http.get("/v1/topics/payments").json()["overrides"] == {"retention.ms": 3600000}
    # Follow it live, produce from the form, then from outside: both show in the tail.
    shown(browser, "/topics/payments/tail", node.url)
    wait(browser, lambda: main_text(browser).count("connected") > 0, "the live tail")
    fill(browser, "produce-key", "card-1")
    fill(browser, "produce-value", '{"amount": 5, "currency": "EUR"}')
    fill(browser, "produce-headers", "source: console")
    choose(browser, "produce-partition", "1")
    submit(browser, "Produce a record")
    wait(browser, lambda: "Written to partition 1 at offset 0" in main_text(browser), "the write")
    outside = {"records": [{"key": "card-2", "value": {"amount": 7}, "partition": 0}]}
    assert http.post("/v1/topics/payments/records", json=outside).status_code == 200
    count = "return document.getElementById('tail-count').textContent;"
    wait(browser, lambda: browser.execute_script(count) == "2", "both records in the tail")
    tail = browser.find_element("id", "tail").text
    assert '"currency":"EUR"' in tail and "card-2" in tail and "source" in tail
    browser.save_screenshot(str(shots / "tail-live.png"))
    # Browse the partition the form wrote to: pretty-printed JSON, key and header.
    shown(browser, "/topics/payments/messages?partition=1&from=beginning&order=oldest", node.url)
    text = main_text(browser)
    assert '"amount": 5,' in text and "card-1" in text and "source: console" in text
    # Reset a group's offsets, with confirmation.
    shown(browser, "/groups/billing", node.url)
    choose(browser, "reset-to", "earliest")
    submit(browser, "Reset committed offsets")
    confirm_dialog(browser)
    until(
        lambda: (
            {p["committed_offset"] for p in http.get("/v1/groups/billing").json()["partitions"]}
            == {0}
        ),
        "the offsets reset",
    )
    # Pause and resume a subscription.
    shown(browser, "/subscriptions/orders-hook", node.url)
    browser.find_element("id", "pause").click()
    wait(browser, lambda: browser.find_elements("id", "resume"), "the resume button")
    assert http.get("/v1/subscriptions/orders-hook").json()["paused"] is True
    browser.find_element("id", "resume").click()
    wait(browser, lambda: browser.find_elements("id", "pause"), "the pause button")
    assert http.get("/v1/subscriptions/orders-hook").json()["paused"] is False
    # Delete the topic: the name must be typed.
    shown(browser, "/topics/payments", node.url)
    browser.find_element("id", "delete-topic").click()
    confirm_dialog(browser, typed="payments")
    wait(browser, lambda: ready(browser) and heading(browser) == "Topics", "the topic list")
    assert http.get("/v1/topics/payments").status_code == 404
    # An API refusal shows as the problem's title and detail.
    shown(browser, "/groups/nobody", node.url)
    assert "UNKNOWN_GROUP" in problems(browser)[0]
    assert script_errors(browser) == []
    http.close()


def test_schemas_and_decoded_values(node: Server, browser: Any, shots: Path) -> None:
    registry = SchemaRegistryClient({"url": f"{node.url}/schema-registry"})
    context = SerializationContext("orders", MessageField.VALUE)
    avro = AvroSerializer(registry, json.dumps(ORDER_SCHEMA))({"order": 7, "items": []}, context)
    assert avro is not None
    note = {"name": "note", "type": "string", "default": ""}
    later = {**ORDER_SCHEMA, "fields": [*ORDER_SCHEMA["fields"], note]}
    assert registry.register_schema("orders-value", Schema(json.dumps(later), "AVRO")) == 2
    values = [avro, b"\x00\x00\x00\x03\xe7\x02"]  # the second: an id nobody registered
    records = [
        {"value": base64.b64encode(v).decode(), "value_encoding": "base64", "partition": 1}
        for v in values
    ]
    answer = httpx.post(f"{node.url}/v1/topics/orders/records", json={"records": records})
    assert answer.status_code == 200, answer.text
    # The subjects and their versions; a version's schema, pretty-printed.
    shown(browser, "/schemas", node.url)
    assert first_column(browser) == ["orders-value"] and "1, 2" in main_text(browser)
    browser.find_element("link text", "orders-value").click()
    wait(browser, lambda: ready(browser, "#/schemas/orders-value"), "the subject")
    assert browser.find_element("id", "schema-version").text == "2"
    assert '"name": "note"' in browser.find_element("id", "schema-text").text
    browser.find_element("link text", "1").click()
    wait(browser, lambda: ready(browser, "#/schemas/orders-value?version=1"), "version 1")
    text = browser.find_element("id", "schema-text").text
    assert '"namespace": "shop"' in text and "note" not in text
    assert "BACKWARD" in main_text(browser)
    browser.save_screenshot(str(shots / "schemas.png"))
    # The records view shows the Avro value decoded, and the other as stored with why.
    route = "/topics/orders/messages?partition=1&from=offset&offset=4&order=oldest"
    shown(browser, route, node.url)
    text = main_text(browser)
    assert '"order": 7' in text and "decoded with schema id 1" in text
    assert "not decoded: schema id 999 is not registered" in text
    browser.save_screenshot(str(shots / "decoded-records.png"))
    shown(browser, f"{route}&values=stored", node.url)
    text = main_text(browser)
    assert '"order": 7' not in text and f"base64: {records[0]['value']}" in text
    # The live tail decodes too.
    shown(browser, "/topics/orders/tail?from=earliest", node.url)
    wait(browser, lambda: "decoded with schema id 1" in main_text(browser), "the decoded tail")
    assert script_errors(browser) == []


def test_deep_links_survive_a_reload(node: Server, browser: Any) -> None:
    route = "/topics/orders/messages?partition=2&from=offset&offset=3&order=newest&limit=20"
    shown(browser, route, node.url)
    before = main_text(browser)
    assert "offsets 0 to 3" in before  # newest first, up to offset 3
    assert reloaded(browser) == before
    assert browser.current_url.endswith(f"#{route}")
    assert heading(browser) == "Records of orders"
    selected = "return document.getElementById('browse-partition').value;"
    assert browser.execute_script(selected) == "2"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[Server, dict[str, str]]]:
    """A node with --auth: `admin` a super user, `bob` a key without any ACL, `carol` a Basic
    login."""
    data = tmp_path / "data"
    keys = {"admin": make_key(data, "admin"), "bob": make_key(data, "bob")}
    keys["carol"] = make_basic(data, "carol")
    running = start_server(data, "--auth", "--auth-basic", "--super-user", "admin")
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    with httpx.Client(base_url=running.url, headers=admin, timeout=30) as http:
        for name in ("orders", "secret"):
            assert http.post("/v1/topics", json={"name": name}).status_code == 201
    yield running, keys
    assert running.stop() == 0


def sign_in(browser: Any, kind: str, first: str, second: str = "") -> None:
    wait(browser, lambda: ready(browser, "sign-in"), "the sign-in form")
    choose(browser, "login-kind", kind)
    if kind == "basic":
        fill(browser, "login-user", first)
        fill(browser, "login-password", second)
    else:
        fill(browser, "login-key", first)
    submit(browser, "Credentials")


def test_sign_in_and_what_a_key_without_acls_sees(
    secured: tuple[Server, dict[str, str]], browser: Any, shots: Path
) -> None:
    server, keys = secured
    browser.get(f"{server.url}/console#/topics")
    browser.save_screenshot(str(shots / "sign-in.png"))
    sign_in(browser, "key", keys["admin"])
    wait(browser, lambda: ready(browser) and heading(browser) == "Topics", "the topics")
    assert first_column(browser) == ["orders", "secret"]
    # The registry's pages call it with the credentials too.
    assert httpx.get(f"{server.url}/schema-registry/subjects").status_code == 401
    shown(browser, "/schemas", server.url)
    assert heading(browser) == "Schemas" and problems(browser) == []
    assert browser.get_cookies() == []  # nothing but this tab's session storage
    # A new key's secret is shown once.
    shown(browser, "/access", server.url)
    fill(browser, "key-principal", "dave")
    submit(browser, "Create a credential")
    wait(browser, lambda: browser.find_elements("id", "new-secret"), "the new secret")
    secret = browser.find_element("id", "new-secret").text
    assert secret.startswith("sluice_")
    browser.save_screenshot(str(shots / "access.png"))
    dave = {"Authorization": f"Bearer {secret}"}
    assert httpx.get(f"{server.url}/v1/topics", headers=dave).status_code == 200
    text = reloaded(browser)
    assert "dave" in text and secret not in text
    # Bob's key has no ACL: the cluster's pages refused without asking, no topics listed.
    browser.find_element("css selector", "#account button").click()
    sign_in(browser, "key", keys["bob"])
    shown(browser, "/topics", server.url)
    assert first_column(browser) == [] and "No topics yet" in main_text(browser)
    shown(browser, "/cluster", server.url)
    assert heading(browser) == "Access refused"
    assert "Principal 'bob' may not describe the cluster" in problems(browser)[0]
    shown(browser, "/access", server.url)
    assert problems(browser) == []
    assert "Only super users manage credentials" in main_text(browser)
    assert "You may not see the ACL bindings" in main_text(browser)
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    grant = binding("bob", "topic", "orders", "describe")
    assert httpx.post(f"{server.url}/v1/acls", json=grant, headers=admin).status_code == 201
    shown(browser, "/topics", server.url)
    assert first_column(browser) == ["orders"]
    # A Basic login, and a wrong key asks again.
    browser.find_element("css selector", "#account button").click()
    sign_in(browser, "basic", "carol", keys["carol"])
    wait(browser, lambda: ready(browser, "#/topics"), "carol's topics")
    browser.find_element("css selector", "#account button").click()
    sign_in(browser, "key", "sluice_not-a-key")
    wait(browser, lambda: problems(browser), "the refusal")
    assert "UNAUTHENTICATED" in problems(browser)[0] and heading(browser) == "Sign in"
    assert script_errors(browser) == []


def unauthenticated(server: Server) -> str:
    """The browser's line for the console's first call without credentials on a node with
    --auth: the deliberate 401 that opens the sign-in form."""
    return (
        f"{server.url}/v1/auth/whoami - Failed to load resource: the server responded with a "
        "status of 401 (Unauthorized)"
    )


def severe(browser: Any) -> list[str]:
    """Every SEVERE line of the browser's console since the last call: script errors, and the
    network's own line for each request answered 4xx or 5xx."""
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


@pytest.fixture
def seeded_with_auth(tmp_path: Path) -> Iterator[tuple[Server, dict[str, str]]]:
    """A node with --auth holding what `seed` makes; the keys of `admin`, its super user, and of
    `bob`, who has no ACL."""
    data = tmp_path / "data"
    keys = {name: make_key(data, name) for name in ("admin", "bob")}
    running = start_server(data, "--auth", "--super-user", "admin")
    seed(running.url, {"Authorization": f"Bearer {keys['admin']}"})
    yield running, keys
    assert running.stop() == 0


NAVIGATION = ("/cluster", "/topics", "/groups", "/queues", "/transactions", "/subscriptions",
              "/schemas", "/access", "/throughput")  # fmt: skip


def test_a_tour_with_auth_logs_nothing_severe(
    seeded_with_auth: tuple[Server, dict[str, str]], browser: Any
) -> None:
    """Signed in with --auth, every page loads without a red line in the browser's console, for
    a super user and for a principal without ACLs (each page of the navigation): the console
    asks what the principal may do and sends no request it expects to be refused. The one
    deliberate refusal is the 401 of its first call before any credentials, which is how it
    learns that it must ask for them."""
    server, keys = seeded_with_auth
    logged: dict[str, list[str]] = {}

    def tour(who: str, routes: tuple[str, ...]) -> None:
        wait(browser, lambda: ready(browser, "sign-in"), "the sign-in form")
        logged[f"{who}, before signing in"] = severe(browser)
        sign_in(browser, "key", keys[who])
        wait(browser, lambda: ready(browser) and heading(browser) != "Sign in", "the page")
        logged[f"{who}, signing in"] = severe(browser)
        for route in routes:
            shown(browser, route, server.url)
            logged[f"{who}, {route}"] = severe(browser)

    browser.get(f"{server.url}/console#/cluster")
    tour("admin", PAGES)
    browser.find_element("css selector", "#account button").click()  # sign out
    tour("bob", NAVIGATION)
    found = {when: lines for when, lines in logged.items() if lines}
    assert found == {
        "admin, before signing in": [unauthenticated(server)],
        "bob, before signing in": [unauthenticated(server)],
    }, json.dumps(found, indent=1)


def acted(browser: Any, act: Callable[[], None], what: str) -> None:
    """Do `act`, an action after which the page shows itself again, and wait until it has (so
    that its requests are done)."""
    browser.execute_script("document.getElementById('main').removeAttribute('data-shown');")
    act()
    wait(browser, lambda: ready(browser), what)


def plan_text(browser: Any) -> str:
    """The cluster page's plan panel (a balance's, a decommission's, a removal's)."""
    text: str = browser.execute_script("return document.getElementById('plan').innerText;")
    return text


def listing(reassignments: str) -> dict[str, Any]:
    """The throttle and the moving partitions' (topic, target replicas), as the API lists them."""
    doc = httpx.get(reassignments, timeout=30).json()
    moving = [(m["topic"], m["replicas"]) for m in doc["reassignments"]]
    return {"throttle_bytes_per_second": doc["throttle_bytes_per_second"], "moving": moving}


def planned(browser: Any) -> bool:
    """The plan panel shows a plan or a refusal (no longer "Planning…")."""
    return bool(plan_text(browser)) and "Planning…" not in plan_text(browser)


def cluster_nodes(url: str) -> dict[int, dict[str, Any]]:
    nodes = httpx.get(f"{url}/v1/cluster", timeout=30).json()["nodes"]
    return {n["node_id"]: n for n in nodes}


def replicas(url: str) -> dict[str, list[int]]:
    """Every partition (internal topics too) -> its replicas, as the node at `url` tells."""
    with httpx.Client(base_url=url, timeout=30) as http:
        names = [t["name"] for t in http.get("/v1/topics?internal=true").json()["topics"]]
        return {
            f"{name}-{p['partition']}": p["replicas"]
            for name in names
            for p in http.get(f"/v1/topics/{name}").json()["partitions"]
        }


def applied_until_removed(browser: Any, url: str, node: int, typed: str | None) -> None:
    """Apply the plan shown (a decommission's or a removal's, confirmed, `typed` if asked) and
    wait until the node is marked removed and no partition lists it."""

    def apply() -> None:
        browser.find_element("id", "apply-plan").click()
        confirm_dialog(browser, typed=typed)

    acted(browser, apply, f"node {node}'s plan applied")
    until(
        lambda: (
            cluster_nodes(url)[node].get("state") == "removed"
            and not any(node in r for r in replicas(url).values())
        ),
        f"node {node} removed, holding nothing",
        timeout=120,
    )


def test_the_cluster_page_and_its_actions_over_four_nodes(
    tmp_path: Path, browser: Any, shots: Path
) -> None:
    """The cluster page, then every action on it from the browser: a throttled move started,
    cancelled, its throttle lifted, a refused plan, a balance planned, node 0 decommissioned;
    then node 3 killed (under-replicated partitions) and removed, its replicas re-created."""
    # Every topic at 2 replicas (the offsets and schemas topics too): once node 0 is
    # decommissioned and node 3 lost, nodes 1 and 2 can still hold them all.
    options = ["--lease-ttl", "2", "--offsets-topic-replication-factor", "2"]
    options += ["--schemas-topic-replication-factor", "2"]
    cluster = LocalCluster(tmp_path, 4, node_options=options)
    cluster.start()
    try:
        first, here = cluster.nodes[0].url, cluster.nodes[1].url
        spec = {"name": "orders", "partitions": 6, "replication_factor": 2}
        assert httpx.post(f"{first}/v1/topics", json=spec, timeout=30).status_code == 201
        shown(browser, "/cluster", here)
        text = main_text(browser)
        assert "4 alive of 4" in text and "controller" in text
        led = browser.execute_script(
            "return [...document.querySelectorAll('table')[0].tBodies[0].rows]"
            ".map(r => Number(r.cells[4].textContent));"
        )
        assert len(led) == 4 and sum(led) >= 6  # orders' 6, and the offsets topic's
        assert "None: every replica is in sync." in text
        assert "None: no partition is moving." in text
        assert browser.find_elements("id", "throttle-rate") == []  # no move, no throttle
        browser.save_screenshot(str(shots / "cluster-4-nodes.png"))
        # A move started from the form, held by its throttle, shows the bytes its copy holds.
        spec = {"name": "moving", "partitions": 1, "replication_factor": 1}
        created = httpx.post(f"{first}/v1/topics", json=spec, timeout=30).json()
        (source,) = created["partitions"][0]["replicas"]
        records = {"records": [{"value": "x" * 1000} for _ in range(10)]}
        url = f"{cluster.nodes[source].url}/v1/topics/moving/partitions/0/records"
        for _ in range(30):  # 30 batches of 10 kB: 30 s at the throttle (a batch moves whole)
            assert httpx.post(url, json=records, timeout=30).status_code == 200
        reassignments = f"{here}/v1/cluster/reassignments"
        target = (source + 1) % 4
        plan = {
            "version": 1,
            "partitions": [{"topic": "moving", "partition": 0, "replicas": [target]}],
        }
        fill(browser, "move-plan", json.dumps(plan))
        fill(browser, "move-throttle", "10000")
        acted(browser, lambda: submit(browser, "Move partitions"), "the move started")
        started = {"throttle_bytes_per_second": 10_000, "moving": [("moving", [target])]}
        until(lambda: listing(reassignments) == started, "the move and its throttle listed")
        until(lambda: f"node {target}: " in reloaded(browser), "the move shown")
        text = main_text(browser)
        assert "Moves in progress" in text and "9.8 KiB/s per node" in text, text
        throttle = "return document.getElementById('throttle-rate').value;"
        assert browser.execute_script(throttle) == "10000"
        browser.save_screenshot(str(shots / "cluster-moving.png"))
        # Cancelled from its row: back on its original replica, the moves' list empty.
        cancel = 'button[aria-label="Cancel the move of moving partition 0"]'

        def cancelled() -> None:
            browser.find_element("css selector", cancel).click()
            confirm_dialog(browser)

        acted(browser, cancelled, "the move cancelled")
        until(lambda: listing(reassignments)["moving"] == [], "the move cancelled")
        until(lambda: replicas(here)["moving-0"] == [source], "moving-0 back on its replica")
        until(lambda: "None: no partition is moving." in reloaded(browser), "the move gone")
        # The throttle, still set, is lifted from its form (empty: none).
        fill(browser, "throttle-rate", "")
        acted(browser, lambda: submit(browser, "Reassignment throttle"), "the throttle lifted")
        until(
            lambda: listing(reassignments)["throttle_bytes_per_second"] is None,
            "the throttle lifted",
        )
        assert browser.find_elements("id", "throttle-rate") == []
        # A plan naming an unknown node is refused whole: its detail shown, its throttle undone.
        refused = {"partitions": [{"topic": "moving", "partition": 0, "replicas": [99]}]}
        fill(browser, "move-plan", json.dumps(refused))
        fill(browser, "move-throttle", "5000")
        submit(browser, "Move partitions")
        wait(browser, lambda: problems(browser), "the plan's refusal")
        assert "moving-0: no node [99] is known to the cluster" in problems(browser)[0]
        idle: dict[str, Any] = {"throttle_bytes_per_second": None, "moving": []}
        until(lambda: listing(reassignments) == idle, "the throttle put back, nothing moving")
        # Its one replica could be on the node lost below: it would stay there, lost.
        assert httpx.delete(f"{here}/v1/topics/moving", timeout=30).status_code == 204
        until(lambda: "moving-0" not in replicas(here), "the topic moving deleted")
        # A balance is planned (a dry run: nothing moves) and its plan shown.
        browser.find_element("id", "plan-balance").click()
        wait(browser, lambda: planned(browser), "the balance's plan")
        text = plan_text(browser)
        assert "Balance: the plan" in text and "Bytes to copy" in text, text
        assert "Each node before → after" in text, text
        assert browser.find_elements("id", "apply-plan") or "balanced already" in text
        assert listing(reassignments) == idle
        browser.save_screenshot(str(shots / "cluster-balance-plan.png"))
        # Node 0 decommissioned from its row: the plan first, then confirmed; it ends removed,
        # holding nothing.
        browser.find_element("id", "decommission-node-0").click()
        wait(browser, lambda: planned(browser), "the decommission's plan")
        text = plan_text(browser)
        assert "Decommission node 0" in text and "Bytes to copy" in text, text
        assert cluster_nodes(here)[0].get("state") is None  # a dry run
        browser.save_screenshot(str(shots / "cluster-decommission-plan.png"))
        applied_until_removed(browser, here, 0, None)
        until(lambda: "removed" in reloaded(browser), "node 0 shown removed")
        assert browser.find_elements("id", "decommission-node-0") == []
        assert browser.find_elements("id", "decommission-node-1")  # three in service left
        # Node 3 down: under-replicated partitions. Removed from its row (the plan first, then
        # its id typed), its replicas are re-created on nodes 1 and 2.
        cluster.nodes[3].kill()
        until(lambda: "3 alive of 4" in reloaded(browser), "node 3 shown down")
        until(
            lambda: "None: every replica is in sync." not in reloaded(browser),
            "under-replicated partitions listed",
        )
        assert "down" in main_text(browser)
        browser.save_screenshot(str(shots / "cluster-node-down.png"))
        browser.find_element("id", "remove-node-3").click()
        wait(browser, lambda: planned(browser), "the removal's plan")
        text = plan_text(browser)
        assert "Remove node 3" in text and "Bytes to copy" in text, text
        applied_until_removed(browser, here, 3, "node 3")
        until(
            lambda: "None: every replica is in sync." in reloaded(browser),
            "every replica in sync again",
        )
        assert browser.find_elements("id", "remove-node-3") == []
        assert script_errors(browser) == []
    finally:
        cluster.stop()


def test_browsing_from_a_time(node: Server, browser: Any) -> None:
    here = "/topics/orders/messages?partition=0&from=time&order=oldest&time="
    shown(browser, f"{here}2000-01-01T00:00:00", node.url)
    assert "offsets 0 to 3" in main_text(browser)  # every record is later than that
    shown(browser, f"{here}2100-01-01T00:00:00", node.url)
    assert first_column(browser) == [] and "No records there." in main_text(browser)


def test_throughput_refreshes(node: Server, browser: Any) -> None:
    shown(browser, "/throughput", node.url)
    rate = (
        "const row = [...document.querySelectorAll('#throughput tbody tr')]"
        "  .find(r => r.cells[0].textContent === 'orders');"
        "return row ? Number(row.cells[1].textContent.replace(/,/g, '')) : 0;"
    )
    records = {"records": [{"value": n} for n in range(100)]}
    with httpx.Client(base_url=node.url, timeout=30) as http:

        def produced() -> bool:
            assert http.post("/v1/topics/orders/records", json=records).status_code == 200
            return bool(browser.execute_script(rate) > 0)

        until(produced, "a produce rate on the page")
    assert browser.find_elements("css selector", "#throughput svg polyline")


def test_dead_letters_link_to_their_topic(tmp_path: Path, browser: Any) -> None:
    server = start_server(tmp_path / "data", "--subscription-allowed-hosts", "127.0.0.1")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for name in ("events", "events-dlt"):
                assert http.post("/v1/topics", json={"name": name}).status_code == 201
            records = {"records": [{"value": n} for n in range(3)]}
            assert http.post("/v1/topics/events/records", json=records).status_code == 200
            sub = {
                "name": "hook", "topic": "events", "start": "earliest",
                "endpoint": f"http://127.0.0.1:{free_port()}/refused",
                "dead_letter_topic": "events-dlt",
                "retry": {"max_attempts": 1, "min_backoff_ms": 1, "max_backoff_ms": 1},
            }  # fmt: skip
            assert http.post("/v1/subscriptions", json=sub).status_code == 201
            until(
                lambda: http.get("/v1/subscriptions/hook").json()["dead_lettered"] == 3,
                "the records dead-lettered",
            )
        shown(browser, "/subscriptions/hook", server.url)
        assert "3 to events-dlt" in main_text(browser)
        browser.find_element("link text", "events-dlt").click()
        wait(browser, lambda: ready(browser) and heading(browser) == "Records of events-dlt", "")
        assert first_column(browser) == ["2", "1", "0"]  # newest first
        assert script_errors(browser) == []
    finally:
        assert server.stop() == 0


# The polish found when the console was tried as a new user would: each test fails without its
# fix.

LONG_MAX = 9223372036854775807


def test_integers_beyond_2_53_keep_their_digits(node: Server, browser: Any) -> None:
    """Long.MAX (the default flush.ms) and a record's big integer show as the node sent them,
    and a config set from the form to one reaches the node exact."""
    with httpx.Client(base_url=node.url, timeout=30) as http:
        assert http.get("/v1/topics/orders").json()["configs"]["flush.ms"] == LONG_MAX
        record = {"records": [{"value": {"id": 12345678901234567891, "small": 7}, "partition": 0}]}
        assert http.post("/v1/topics/orders/records", json=record).status_code == 200
        shown(browser, "/topics/orders", node.url)
        config = (
            "return [...document.querySelectorAll('main table')[1].tBodies[0].rows]"
            "  .find(r => r.cells[0].textContent === arguments[0]).cells[1].textContent;"
        )
        assert browser.execute_script(config, "flush.ms") == str(LONG_MAX)
        choose(browser, "alter-config", "retention.ms")
        fill(browser, "alter-value", str(LONG_MAX - 1))
        acted(browser, lambda: submit(browser, "Change a config"), "the config changed")
        assert http.get("/v1/topics/orders").json()["overrides"] == {"retention.ms": LONG_MAX - 1}
        assert browser.execute_script(config, "retention.ms") == str(LONG_MAX - 1)
    shown(browser, "/topics/orders/messages?partition=0&from=end&order=newest", node.url)
    assert '"id": 12345678901234567891,' in main_text(browser)


CONTRAST = """
const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
const lum = ([r, g, b]) => [r, g, b].map((v) => {
  v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
}).reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
const background = (el) => {
  for (; el; el = el.parentElement) {
    const c = rgb(getComputedStyle(el).backgroundColor);
    if (c.length === 3 || c[3] > 0) return c.slice(0, 3);
  }
  return [255, 255, 255];
};
const ratio = (a, b) => {
  const [l1, l2] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (l1 + 0.05) / (l2 + 0.05);
};
const low = [];
for (const el of document.querySelectorAll('body *')) {
  const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  if (!own || el.disabled || !el.getClientRects().length) continue;
  const style = getComputedStyle(el);
  if (style.visibility === 'hidden') continue;
  const r = ratio(rgb(style.color).slice(0, 3), background(el));
  const text = el.textContent.trim().slice(0, 30);
  if (r < 4.5) low.push(`${el.tagName}.${el.className} "${text}" ${r.toFixed(2)}`);
}
return {low, page: lum(background(document.body))};
"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_and_filled_buttons_meet_wcag_aa_contrast(
    node: Server, browser: Any, shots: Path, scheme: str
) -> None:
    """Every text on the pages (filled buttons, a confirmation's danger button, links,
    notes, problems) is at 4.5:1 or more against its background, in both schemes."""
    media = {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", media)
    for route in ("/topics", "/topics/orders", "/groups/billing", "/access", "/groups/nobody"):
        shown(browser, route, node.url)
        found = browser.execute_script(CONTRAST)
        assert (found["page"] < 0.05) == (scheme == "dark"), found  # the scheme is applied
        assert found["low"] == [], (route, found["low"])
    shown(browser, "/groups/billing", node.url)
    browser.find_element("id", "delete-group").click()
    wait(browser, lambda: browser.find_elements("css selector", "dialog[open]"), "the question")
    browser.save_screenshot(str(shots / f"contrast-{scheme}.png"))
    assert browser.execute_script(CONTRAST)["low"] == []
    assert browser.find_element("css selector", "dialog[open] button[type=submit]").is_displayed()


def test_records_read_at_400_pixels(node: Server, browser: Any, shots: Path) -> None:
    """A value wraps at its JSON's lines and at the edge, in a cell wide enough to read."""
    words = " ".join(["a sentence of ordinary words"] * 12)
    value = {"note": words, "token": "x" * 150, "items": [{"sku": n} for n in range(3)]}
    record = {"records": [{"key": "long", "value": value, "partition": 1}]}
    assert httpx.post(f"{node.url}/v1/topics/orders/records", json=record).status_code == 200
    browser.set_window_size(400, 844)
    shown(browser, "/topics/orders/messages?partition=1&from=end&order=newest", node.url)
    browser.save_screenshot(str(shots / "narrow-records.png"))
    overflow = browser.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth;"
    )
    assert overflow <= 1
    cell = browser.execute_script(
        "const pre = document.querySelector('main pre.value');"
        "const box = pre.closest('td').getBoundingClientRect();"
        "const s = getComputedStyle(pre);"
        "return {width: box.width, right: box.right, lines: pre.offsetHeight"
        "  / parseFloat(s.lineHeight === 'normal' ? 16 : s.lineHeight),"
        "  view: document.documentElement.clientWidth};"
    )
    assert cell["width"] > 150 and cell["right"] <= cell["view"], cell
    assert cell["lines"] < 40, cell  # wrapped at sensible points, not every few characters


def test_error_pages_say_what_was_not_found(node: Server, browser: Any) -> None:
    for route, said in (
        ("/topics/nope", "Topic 'nope' not found"),
        ("/topics/nope/messages", "Topic 'nope' not found"),
        ("/groups/nobody", "Group 'nobody' not found"),
        ("/transactions/nobody", "Transaction 'nobody' not found"),
        ("/subscriptions/nothing", "Subscription 'nothing' not found"),
        ("/nowhere", "Page '/nowhere' not found"),
    ):
        shown(browser, route, node.url)
        assert heading(browser) == said, route
        assert browser.title == f"{said} · Sluice"


def test_a_refused_key_offers_another_sign_in_not_a_sign_out(
    secured: tuple[Server, dict[str, str]], browser: Any
) -> None:
    server, keys = secured
    browser.get(f"{server.url}/console#/topics")
    sign_in(browser, "key", "sluice_not-a-key")
    wait(browser, lambda: browser.find_elements("id", "refused"), "the refusal")
    assert heading(browser) == "Sign in"
    assert "The node refused that API key" in main_text(browser)
    assert "UNAUTHENTICATED" in problems(browser)[0]
    assert browser.find_element("id", "account").text == ""  # no "Sign out"
    sign_in(browser, "basic", "carol", "not-her-password")
    wait(browser, lambda: "refused that user and password" in main_text(browser), "the refusal")
    assert browser.execute_script("return document.getElementById('login-kind').value;") == "basic"
    assert browser.find_element("id", "account").text == ""
    sign_in(browser, "key", keys["admin"])
    wait(browser, lambda: ready(browser, "#/topics"), "the topics")
    assert browser.find_element("id", "account").text == "Sign out"
    assert browser.find_elements("id", "refused") == []


def test_counts_are_pluralised(node: Server, browser: Any) -> None:
    with httpx.Client(base_url=node.url, timeout=30) as http:
        assert http.post("/v1/topics", json={"name": "solo"}).status_code == 201
    shown(browser, "/topics", node.url)
    assert "2 topics" in main_text(browser)
    for route, said in (
        ("/groups", "2 groups"),  # billing, and the subscription's
        ("/subscriptions", "1 subscription"),
        ("/topics/orders/tail", "Following 3 partitions"),
        ("/topics/solo/tail", "Following 1 partition from"),
        ("/groups/billing", "6 records"),  # 2 of 4 records committed on each of 3 partitions
        ("/topics/orders/messages?partition=0&from=offset&offset=3&order=oldest", "1 record,"),
    ):
        shown(browser, route, node.url)
        text = main_text(browser)
        assert said in text, (route, text)
        assert not any(f"1 {noun}s" in text for noun in ("group", "subscription", "record"))


def test_a_new_key_is_listed_at_once(secured: tuple[Server, dict[str, str]], browser: Any) -> None:
    server, keys = secured
    browser.get(f"{server.url}/console#/access")
    sign_in(browser, "key", keys["admin"])
    wait(browser, lambda: ready(browser, "#/access"), "the access page")
    listed = "return document.getElementById('credentials').innerText;"
    assert "erin" not in browser.execute_script(listed)
    fill(browser, "key-principal", "erin")
    submit(browser, "Create a credential")
    wait(browser, lambda: "erin" in browser.execute_script(listed), "erin's key listed")
    secret = browser.find_element("id", "new-secret").text  # still shown, once
    assert secret.startswith("sluice_") and secret not in browser.execute_script(listed)


def test_no_create_forms_without_the_permission(
    secured: tuple[Server, dict[str, str]], browser: Any
) -> None:
    """Bob may describe a topic, a group and the cluster, create and alter nothing: the lists
    and descriptions show, the forms that would be refused do not (the console asks what he
    may do: nothing is tried, nothing changes)."""
    server, keys = secured
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    with httpx.Client(base_url=server.url, headers=admin, timeout=30) as http:
        reset = http.put("/v1/groups/billing/offsets", json={"topic": "orders", "to": "earliest"})
        assert reset.status_code == 200, reset.text
        for grant in (
            binding("bob", "topic", "orders", "describe"),
            binding("bob", "group", "billing", "describe"),
            binding("bob", "cluster", "cluster", "describe"),
        ):
            assert http.post("/v1/acls", json=grant).status_code == 201
        acls_before = http.get("/v1/acls").json()
        browser.get(f"{server.url}/console#/topics")
        sign_in(browser, "key", keys["bob"])
        wait(browser, lambda: ready(browser, "#/topics"), "bob's topics")
        assert first_column(browser) == ["orders"]
        assert browser.find_elements("id", "create-name") == []
        assert "You may not create topics" in main_text(browser)
        shown(browser, "/topics/orders", server.url)
        for control in ("alter-config", "grow-partitions", "delete-topic"):
            assert browser.find_elements("id", control) == [], control
        assert browser.find_elements("id", "no-alter") and browser.find_elements("id", "no-delete")
        shown(browser, "/groups/billing", server.url)
        assert browser.find_elements("id", "reset-topic") == []
        assert browser.find_elements("id", "delete-group") == []
        assert browser.find_elements("id", "no-reset") and browser.find_elements("id", "no-delete")
        shown(browser, "/access", server.url)
        assert browser.find_elements("id", "acl-principal") == []
        assert browser.find_elements("id", "quota-principal") == []
        assert browser.find_elements("id", "key-principal") == []  # super users only
        assert "You may not change ACL bindings" in main_text(browser)
        assert "bob" in main_text(browser)  # the bindings are listed
        # The admin sees every form.
        browser.find_element("css selector", "#account button").click()
        sign_in(browser, "key", keys["admin"])
        wait(browser, lambda: ready(browser, "#/access"), "the admin's access page")
        for control in ("acl-principal", "quota-principal", "key-principal"):
            assert browser.find_elements("id", control), control
        shown(browser, "/topics", server.url)
        assert browser.find_elements("id", "create-name")
        shown(browser, "/topics/orders", server.url)
        for control in ("alter-config", "grow-partitions", "delete-topic"):
            assert browser.find_elements("id", control), control
        shown(browser, "/groups/billing", server.url)
        assert browser.find_elements("id", "reset-topic")
        assert browser.find_elements("id", "delete-group")
        assert http.get("/v1/acls").json() == acls_before
        assert [t["name"] for t in http.get("/v1/topics").json()["topics"]] == ["orders", "secret"]
    # Nothing refused but the first call of each sign-in, made before its credentials.
    assert severe(browser) == [unauthenticated(server)] * 2


def test_the_browse_form_asks_only_for_what_from_uses(node: Server, browser: Any) -> None:
    shown(browser, "/topics/orders/messages?partition=0&from=end", node.url)

    def visible() -> tuple[bool, bool]:
        return (
            browser.find_element("id", "browse-offset").is_displayed(),
            browser.find_element("id", "browse-time").is_displayed(),
        )

    assert visible() == (False, False)
    for choice, expected in (
        ("offset", (True, False)),
        ("time", (False, True)),
        ("beginning", (False, False)),
        ("end", (False, False)),
        ("offset", (True, False)),
    ):
        choose(browser, "browse-from", choice)
        assert visible() == expected, choice
    fill(browser, "browse-offset", "2")
    acted(browser, lambda: submit(browser, "Browse"), "the records from offset 2")
    assert "from=offset" in browser.current_url and "offset=2" in browser.current_url
    assert "time=" not in browser.current_url
    assert visible() == (True, False)  # as the link says
    shown(
        browser, "/topics/orders/messages?partition=0&from=time&time=2000-01-01T00:00:00", node.url
    )
    assert visible() == (False, True)


def test_charts_without_traffic_say_so(node: Server, browser: Any) -> None:
    shown(browser, "/throughput", node.url)
    box = "return document.getElementById('throughput').innerText;"
    wait(browser, lambda: "No traffic since this page opened" in browser.execute_script(box), "")
    assert browser.find_elements("css selector", "#throughput svg") == []
    assert browser.execute_script(box).count("No traffic") == 2  # produced and fetched
    with httpx.Client(base_url=node.url, timeout=30) as http:
        # The group's lag is 0 once its offsets are at the end: said, not drawn flat.
        reset = {"topic": "orders", "to": "latest"}
        assert http.put("/v1/groups/billing/offsets", json=reset).status_code == 200
    shown(browser, "/groups/billing", node.url)
    assert "No lag since this page opened" in main_text(browser)
    assert browser.find_elements("css selector", "main svg") == []


def test_throughput_shows_produces_shed(tmp_path: Path, browser: Any) -> None:
    """Past the admission limit, the Throughput page says produces are being shed and
    charts them beside those admitted."""
    server = start_server(tmp_path / "data", "--admission-max-inflight", "1")
    body = b'{"records":[{"value":1}]}'
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.post("/v1/topics", json={"name": "orders"}).status_code == 201
            held = held_produce(server.port, "/v1/topics/orders/records", body)
            until(
                lambda: "sluice_admission_inflight 1.0" in http.get("/metrics").text,
                "the held produce admitted",
            )
            shown(browser, "/throughput", server.url)
            notice = "return document.getElementById('admission').innerText;"
            assert "No produce shed" in browser.execute_script(notice)

            def shedding() -> bool:
                answer = http.post("/v1/topics/orders/records", content=body,
                                   headers={"Content-Type": "application/json"})  # fmt: skip
                assert answer.status_code == 503
                return "SERVER_OVERLOADED" in browser.execute_script(notice)

            until(shedding, "the shedding shown on the page")
            assert browser.find_elements("css selector", "#admission svg polyline")
            assert finish(held, body).startswith(b"HTTP/1.1 200 OK")
    finally:
        assert server.stop() == 0


def state(http: httpx.Client, name: str) -> tuple[str, str | None]:
    doc = http.get(f"/v1/transactions/{name}").json()
    return doc["state"], doc["abort_cause"]


def test_list_filter_describe_and_abort(node: Server, browser: Any) -> None:
    with httpx.Client(base_url=node.url, timeout=30) as http:
        write_in_transaction(http, "pay-runner", 1, "audit", (2, 3))
        assert http.post("/v1/transactions/nightly", json={}).status_code == 201
        http.post("/v1/transactions/nightly/commit", json={"producer_epoch": 0})
        assert state(http, "nightly") == ("CompleteCommit", None)

        shown(browser, "/transactions", node.url)
        assert first_column(browser) == ["nightly", "pay-runner"]
        assert "2 transactions" in main_text(browser)
        choose(browser, "transactions-state", "Ongoing")
        submit(browser, "Show transactions in")
        wait(browser, lambda: ready(browser, "#/transactions?state=Ongoing"), "the filtered list")
        assert first_column(browser) == ["pay-runner"]
        assert "1 transaction Ongoing" in main_text(browser)

        browser.find_element("link text", "pay-runner").click()
        wait(browser, lambda: ready(browser, "#/transactions/pay-runner"), "the transaction")
        assert heading(browser) == "Transaction pay-runner"
        tables: list[list[list[str]]] = browser.execute_script(
            "return [...document.querySelectorAll('main table')].map(t =>"
            "  [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent)));"
        )
        assert tables == [[["orders", "1"]], [["audit", "orders", "2", "3"]]]

        browser.find_element("id", "abort-transaction").click()
        wait(browser, lambda: browser.find_elements("css selector", "dialog[open]"), "the question")
        browser.find_element("css selector", "dialog[open] button[value=cancel]").click()
        assert state(http, "pay-runner") == ("Ongoing", None)

        def abort() -> None:
            browser.find_element("id", "abort-transaction").click()
            wait(browser, lambda: browser.find_elements("css selector", "dialog[open]"), "it")
            browser.find_element("css selector", "dialog[open] button[type=submit]").click()

        acted(browser, abort, "the transaction aborted")
        assert state(http, "pay-runner") == ("CompleteAbort", "operator")
        text = main_text(browser)
        assert "CompleteAbort" in text and "Nothing to abort" in text
        assert browser.find_elements("id", "abort-transaction") == []
    assert severe(browser) == []


def test_no_abort_without_alter_on_the_cluster(
    secured: tuple[Server, dict[str, str]],
    browser: Any,
) -> None:
    """Bob may describe the transaction and not alter the cluster: he sees it, without the
    abort button; nothing is tried, and it stays open."""
    server, keys = secured
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    with httpx.Client(base_url=server.url, headers=admin, timeout=30) as http:
        assert http.post("/v1/transactions/pay-runner", json={}).status_code == 201
        grant = binding("bob", "transactional_id", "pay-runner", "describe")
        assert http.post("/v1/acls", json=grant).status_code == 201
        browser.get(f"{server.url}/console#/transactions")
        sign_in(browser, "key", keys["bob"])
        wait(browser, lambda: ready(browser, "#/transactions"), "bob's transactions")
        assert first_column(browser) == ["pay-runner"]
        shown(browser, "/transactions/pay-runner", server.url)
        assert browser.find_elements("id", "abort-transaction") == []
        assert "You may not abort transactions" in main_text(browser)
        browser.find_element("css selector", "#account button").click()
        sign_in(browser, "key", keys["admin"])
        wait(browser, lambda: ready(browser, "#/transactions/pay-runner"), "the admin's page")
        assert browser.find_elements("id", "abort-transaction")
        assert state(http, "pay-runner") == ("Ongoing", None)
    assert severe(browser) == [unauthenticated(server)] * 2
