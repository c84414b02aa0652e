"""Bad input to the subscription routes: clear problems with stable codes, never a 500."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.support import Client, Start, create_topic, problem

GOOD = {"name": "s", "topic": "t", "endpoint": "https://hooks.example.com/x"}


@pytest.fixture
async def client(start: Start) -> Client:
    client = await start()
    await create_topic(client, "t")
    return client


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({**GOOD, "topic": "nope"}, 404, "UNKNOWN_TOPIC"),
        ({**GOOD, "dead_letter_topic": "nope"}, 404, "UNKNOWN_TOPIC"),
        ({**GOOD, "dead_letter_topic": "t"}, 400, "INVALID_SUBSCRIPTION"),
        ({**GOOD, "endpoint": "http://127.0.0.1:8080/v1/topics"}, 422, "ENDPOINT_NOT_ALLOWED"),
        ({**GOOD, "endpoint": "http://[fe80::1]/x"}, 422, "ENDPOINT_NOT_ALLOWED"),
        ({**GOOD, "endpoint": "not a url"}, 400, "INVALID_SUBSCRIPTION"),
        ({**GOOD, "endpoint": "https://x.example/" + "a" * 5000}, 400, "INVALID_SUBSCRIPTION"),
        ({**GOOD, "name": "n" * 100_000}, 400, "INVALID_SUBSCRIPTION"),
        ({**GOOD, "topic": "a/b"}, 400, "INVALID_TOPIC_NAME"),
        ({**GOOD, "filter": {"headers": dict.fromkeys(map(str, range(99)), "v")}}, 400,
         "INVALID_SUBSCRIPTION"),
        ({**GOOD, "retry": {"max_attempts": 2**70}}, 400, "INVALID_SUBSCRIPTION"),
        ([GOOD], 400, "INVALID_JSON"),
    ],
)  # fmt: skip
async def test_bad_subscriptions_are_refused(
    client: Client, body: Any, status: int, code: str
) -> None:
    doc = await problem(await client.post("/v1/subscriptions", json=body), status, code)
    assert "pointer" in doc or code in ("UNKNOWN_TOPIC", "INVALID_JSON")


async def test_malformed_json_duplicates_and_unknown_names(client: Client) -> None:
    resp = await client.post(
        "/v1/subscriptions", data=b'{"name": ', headers={"Content-Type": "application/json"}
    )
    assert resp.status == 400 and (await resp.json(content_type=None))["code"] == "INVALID_JSON"
    assert (await client.post("/v1/subscriptions", json=GOOD)).status == 201
    await problem(await client.post("/v1/subscriptions", json=GOOD), 409, "SUBSCRIPTION_EXISTS")
    for method, path in [("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/pause")]:
        resp = await client.request(method, f"/v1/subscriptions/nope{path}", json={})
        await problem(resp, 404, "UNKNOWN_SUBSCRIPTION")
    await problem(await client.get("/v1/subscriptions/%00"), 404, "UNKNOWN_SUBSCRIPTION")
    resp = await client.patch("/v1/subscriptions/s", json={"topic": "other"})
    await problem(resp, 400, "INVALID_SUBSCRIPTION")
    resp = await client.patch("/v1/subscriptions/s", json={"endpoint": "http://127.0.0.1/"})
    await problem(resp, 422, "ENDPOINT_NOT_ALLOWED")
    changed = await client.patch("/v1/subscriptions/s", json={"retry": {"max_attempts": 3}})
    assert changed.status == 200 and (await changed.json())["retry"]["max_attempts"] == 3
    reset = await client.patch("/v1/subscriptions/s", json={"retry": {"max_attempts": None}})
    assert reset.status == 200 and (await reset.json())["retry"]["max_attempts"] == 10


async def test_bisect_on_error_is_refused_by_pointer_and_patched(client: Client) -> None:
    bad = {**GOOD, "retry": {"bisect_on_error": "yes"}}
    doc = await problem(
        await client.post("/v1/subscriptions", json=bad), 400, "INVALID_SUBSCRIPTION"
    )
    assert doc["pointer"] == "/retry/bisect_on_error"
    created = await client.post("/v1/subscriptions", json=GOOD)
    assert (await created.json())["retry"]["bisect_on_error"] is False
    changed = await client.patch("/v1/subscriptions/s", json={"retry": {"bisect_on_error": True}})
    assert changed.status == 200 and (await changed.json())["retry"]["bisect_on_error"] is True
    resp = await client.patch("/v1/subscriptions/s", json={"retry": {"bisect_on_error": 0}})
    await problem(resp, 400, "INVALID_SUBSCRIPTION")
