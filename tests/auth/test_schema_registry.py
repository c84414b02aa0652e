"""The schema registry with --auth, against a real gateway process: credentials on every
registry route (under the prefix and on its own port), reads of a subject need read on it,
register needs write, and the global settings need alter on the cluster. Validation at
produce checks records for a producer that may write the topic, without rights on the
subject (the node validates, as Confluent Server's broker does)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.auth.support import bearer, binding, make_key
from tests.e2e.conftest import Server, start_server

V1 = "application/vnd.schemaregistry.v1+json"
SUBJECT = "orders-value"
SCHEMA = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}]})


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Server, int, dict[str, str]]]:
    data = Path(tmp_path_factory.mktemp("registry-auth")) / "data"
    keys = {who: make_key(data, who) for who in ("admin", "reader", "writer", "producer")}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    running = start_server(
        data, "--auth", "--super-user", "admin", "--schema-registry-port", str(port)
    )
    with httpx.Client(base_url=running.url, headers=bearer(keys["admin"])) as admin:
        for doc in (
            binding("reader", "subject", SUBJECT, "read"),
            binding("writer", "subject", "orders", "write", pattern="prefixed"),
            binding("producer", "topic", "payments", "write"),
        ):
            assert admin.post("/v1/acls", json=doc).status_code in (200, 201)
    yield running, port, keys
    assert running.stop() == 0


def registry(server: Server, key: str | None) -> httpx.Client:
    headers = {"Content-Type": V1, **({} if key is None else bearer(key))}
    return httpx.Client(base_url=f"{server.url}/schema-registry", headers=headers)


def code(answer: httpx.Response) -> tuple[int, int]:
    return answer.status_code, answer.json()["error_code"]


def test_every_route_needs_credentials(secured: tuple[Server, int, dict[str, str]]) -> None:
    server, port, keys = secured
    with registry(server, None) as anonymous:
        assert code(anonymous.get("/subjects")) == (401, 40101)
        assert code(anonymous.get("/schemas/types")) == (401, 40101)
        assert anonymous.get("/subjects").headers["WWW-Authenticate"].startswith("Bearer")
    own = f"http://127.0.0.1:{port}"
    assert code(httpx.get(f"{own}/subjects")) == (401, 40101)
    assert httpx.get(f"{own}/subjects", headers=bearer(keys["admin"])).status_code == 200


def test_register_needs_write_and_reads_need_read(
    secured: tuple[Server, int, dict[str, str]],
) -> None:
    server, _, keys = secured
    body = json.dumps({"schema": SCHEMA})
    with registry(server, keys["reader"]) as reader, registry(server, keys["writer"]) as writer:
        assert code(reader.post(f"/subjects/{SUBJECT}/versions", content=body)) == (403, 40301)
        registered = writer.post(f"/subjects/{SUBJECT}/versions", content=body)
        assert registered.status_code == 200, registered.text
        schema_id = registered.json()["id"]
        assert reader.get(f"/subjects/{SUBJECT}/versions").json() == [1]
        assert code(writer.get(f"/subjects/{SUBJECT}/versions")) == (403, 40301)
        assert reader.get("/subjects").json() == [SUBJECT]
        assert writer.get("/subjects").json() == []  # listed only where it may read
        assert reader.get(f"/schemas/ids/{schema_id}").json() == {"schema": SCHEMA}
        assert code(reader.delete(f"/subjects/{SUBJECT}")) == (403, 40301)
        level = json.dumps({"compatibility": "NONE"})
        assert code(writer.put("/config", content=level)) == (403, 40301)
        assert code(reader.put(f"/config/{SUBJECT}", content=level)) == (403, 40301)
        assert code(writer.post("/subjects/other-value/versions", content=body)) == (403, 40301)
    with registry(server, keys["admin"]) as admin:
        assert admin.put("/config", content=json.dumps({"compatibility": "FULL"})).json() == {
            "compatibility": "FULL"
        }


def test_validation_at_produce_needs_only_write_on_the_topic(
    secured: tuple[Server, int, dict[str, str]],
) -> None:
    server, _, keys = secured
    payment = {"type": "record", "name": "Payment", "fields": [{"name": "cents", "type": "int"}]}
    with httpx.Client(base_url=server.url, headers=bearer(keys["admin"])) as admin:
        configs = {"value.schema.validation": "true"}
        made = admin.post("/v1/topics", json={"name": "payments", "configs": configs})
        assert made.status_code == 201, made.text
        with registry(server, keys["admin"]) as admin_registry:
            body = json.dumps({"schema": json.dumps(payment)})
            assert admin_registry.post("/subjects/payments-value/versions", content=body).json()
        path = "/v1/topics/payments/partitions/0/records"
        good = {"records": [{"value": {"cents": 250}}]}
        bad = {"records": [{"value": {"cents": 1}}, {"value": {"cents": "many"}}]}
        with httpx.Client(base_url=server.url, headers=bearer(keys["producer"])) as producer:
            assert producer.post(path, json=good).status_code == 200
            refused = producer.post(path, json=bad)
            assert refused.status_code == 422, refused.text
            assert refused.json()["code"] == "SCHEMA_VALIDATION_FAILED"
            assert refused.json()["index"] == 1
            with registry(server, keys["producer"]) as its_registry:
                assert code(its_registry.get("/subjects/payments-value/versions")) == (403, 40301)
        with httpx.Client(base_url=server.url, headers=bearer(keys["reader"])) as reader:
            denied = reader.post(path, json=bad)  # refused for its rights before any schema
            assert denied.status_code == 403 and denied.json()["code"] != "SCHEMA_VALIDATION_FAILED"
        assert httpx.post(f"{server.url}{path}", json=good).status_code == 401
        end = admin.get("/v1/topics/payments/partitions/0/offsets").json()["offset"]
        assert end == 1, "only the producer's valid record was appended"
