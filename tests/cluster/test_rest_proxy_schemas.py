"""The REST Proxy's schema formats on the shared three-node cluster (real etcd): a v2 avro
produce through a node that is not the registry's writer registers its schema there (the
register forwarded), and an avro instance on the third node reads the values decoded."""

from __future__ import annotations

import base64
import uuid

import httpx
import orjson

from tests.cluster.harness import Cluster
from tests.cluster.test_schema_registry import schemas_partition, user_schema

AVRO = "application/vnd.kafka.avro.v2+json"
HEADERS = {"Content-Type": AVRO}


def test_a_schema_text_registers_through_the_writer_and_reads_elsewhere(healthy: Cluster) -> None:
    leader = schemas_partition(healthy).leader
    producer, reader = (healthy.url(i) for i in range(healthy.size) if i != leader)
    topic = f"rest-avro-{uuid.uuid4().hex[:8]}"
    created = httpx.post(f"{producer}/v1/topics", json={"name": topic, "partitions": 1})
    assert created.status_code == 201, created.text
    users = [{"f0": 1}, {"f0": 2}]
    body = {"value_schema": user_schema(0), "records": [{"value": u} for u in users]}
    ids = set()
    for _ in range(2):
        answer = httpx.post(f"{producer}/topics/{topic}", json=body, headers=HEADERS, timeout=30)
        assert answer.status_code == 200, answer.text
        ids.add(answer.json()["value_schema_id"])
    [schema_id] = ids
    versions = httpx.get(f"{reader}/schema-registry/subjects/{topic}-value/versions")
    assert versions.json() == [1]
    group, instance = f"g-{topic}", "reader"
    created = httpx.post(
        f"{reader}/consumers/{group}",
        json={"name": instance, "format": "avro", "auto.offset.reset": "earliest"},
        headers={"Content-Type": "application/vnd.kafka.v2+json"},
    )
    assert created.status_code == 200, created.text
    base = f"{reader}/consumers/{group}/instances/{instance}"
    assigned = httpx.post(
        f"{base}/assignments",
        content=orjson.dumps({"partitions": [{"topic": topic, "partition": 0}]}),
        headers={"Content-Type": "application/vnd.kafka.v2+json"},
    )
    assert assigned.status_code == 204, assigned.text
    read = httpx.get(f"{base}/records?timeout=5000", headers={"Accept": AVRO}, timeout=30)
    assert read.status_code == 200, read.text
    assert [r["value"] for r in read.json()] == users + users
    raw = httpx.get(f"{reader}/v1/topics/{topic}/partitions/0/records?offset=0").json()
    header = b"\x00" + schema_id.to_bytes(4, "big")
    assert [base64.b64decode(r["value"])[:5] for r in raw["records"]] == 4 * [header]
