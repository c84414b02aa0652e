"""The REST Proxy's schema formats with --auth, against a real gateway process: a produce that
registers its schema text needs `write` on the subject as well as on the topic (as the
registry's own register does); one naming a schema id needs only the topic's."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from tests.auth.support import bearer, binding, make_key
from tests.e2e.conftest import Server, start_server

TOPIC = "orders"
SCHEMA = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}]})
AVRO = {"Content-Type": "application/vnd.kafka.avro.v2+json"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    data = Path(tmp_path_factory.mktemp("rest-schemas-auth")) / "data"
    keys = {who: make_key(data, who) for who in ("admin", "producer", "registrar")}
    running = start_server(data, "--auth", "--super-user", "admin")
    with httpx.Client(base_url=running.url, headers=bearer(keys["admin"])) as admin:
        assert admin.post("/v1/topics", json={"name": TOPIC, "partitions": 1}).status_code == 201
        for doc in (
            binding("producer", "topic", TOPIC, "write"),
            binding("registrar", "topic", TOPIC, "write"),
            binding("registrar", "subject", f"{TOPIC}-value", "write"),
        ):
            assert admin.post("/v1/acls", json=doc).status_code in (200, 201)
    yield running, keys
    assert running.stop() == 0


def produce(server: Server, key: str, body: Mapping[str, object]) -> httpx.Response:
    return httpx.post(f"{server.url}/topics/{TOPIC}", json=body, headers={**AVRO, **bearer(key)})


def test_registering_a_schema_text_needs_write_on_the_subject(
    secured: tuple[Server, dict[str, str]],
) -> None:
    server, keys = secured
    body = {"value_schema": SCHEMA, "records": [{"value": {"id": 1}}]}
    refused = produce(server, keys["producer"], body)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error_code"] == 40301
    registered = produce(server, keys["registrar"], body)
    assert registered.status_code == 200, registered.text
    schema_id = registered.json()["value_schema_id"]
    by_id = produce(
        server, keys["producer"], {"value_schema_id": schema_id, "records": [{"value": {"id": 2}}]}
    )
    assert by_id.status_code == 200, by_id.text
    offsets = httpx.get(
        f"{server.url}/topics/{TOPIC}/partitions/0/offsets", headers=bearer(keys["admin"])
    )
    assert offsets.json()["end_offset"] == 2
