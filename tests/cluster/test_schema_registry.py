"""The schema registry on the shared three-node cluster (real etcd): confluent-kafka's client
and Avro serializers register through one node and read through another; the writer (the
leader of `_schemas-0`) is killed while registers go on, and no id is given twice or lost."""

from __future__ import annotations

import base64
import json
import threading
import time

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.cluster.harness import NO_LEADER, SETTLE_S, Cluster, PartitionState, wait_for

TOPIC = "_schemas"


def schemas_partition(cluster: Cluster) -> PartitionState:
    """_schemas-0 once it has a leader and all three replicas in sync."""

    def settled() -> PartitionState | None:
        state = cluster.etcd.partition(TOPIC, 0)
        return state if state is not None and len(state.isr) == 3 else None

    return wait_for(settled, SETTLE_S, "_schemas-0 replicated on every node")


def client(*urls: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": ",".join(f"{u}/schema-registry" for u in urls)})


def user_schema(n: int) -> str:
    fields = [{"name": f"f{i}", "type": "int", "default": 0} for i in range(n + 1)]
    return json.dumps({"type": "record", "name": "User", "fields": fields})


def test_register_through_one_node_and_read_through_another(healthy: Cluster) -> None:
    leader = schemas_partition(healthy).leader
    others = [healthy.url(i) for i in range(healthy.size) if i != leader]
    writer_side, reader_side = client(others[0]), client(others[1])
    schema_id = writer_side.register_schema("cross-value", Schema(user_schema(0), "AVRO"))
    # Read-your-writes across nodes: the other node's view holds it at once.
    assert reader_side.get_latest_version("cross-value").schema_id == schema_id
    context = SerializationContext("cross", MessageField.VALUE)
    payload = AvroSerializer(writer_side, user_schema(1))({"f0": 1, "f1": 2}, context)
    assert payload is not None
    assert AvroDeserializer(reader_side)(payload, context) == {"f0": 1, "f1": 2}
    assert int.from_bytes(payload[1:5], "big") > schema_id


def test_writer_killed_mid_registers(healthy: Cluster) -> None:
    """Registers go on through a node that stays up while the writer is SIGKILLed: every
    answered id is new, ids rise in the order answered, and after the failover every answered
    schema is still registered under its id (registering it again answers the same id)."""
    leader = schemas_partition(healthy).leader
    live = [healthy.url(i) for i in range(healthy.size) if i != leader]
    http = httpx.Client(timeout=30.0)
    base = f"{live[0]}/schema-registry"
    http.put(f"{base}/config/failover-value", json={"compatibility": "NONE"})
    answered: list[tuple[int, int]] = []  # (n, id) in the order answered
    stop = threading.Event()

    def register_all() -> None:
        n = 0
        deadline = time.monotonic() + 4 * SETTLE_S
        while not stop.is_set() and time.monotonic() < deadline:
            answer = http.post(
                f"{base}/subjects/failover-value/versions", json={"schema": user_schema(n)}
            )
            if answer.status_code == 200:
                answered.append((n, answer.json()["id"]))
                n += 1
            else:  # the writer is moving: a client retries, as confluent-kafka's does
                assert answer.status_code in (500, 502, 503, 504), answer.text
                assert answer.json()["error_code"] in (50001, 50002, 50003), answer.text

    worker = threading.Thread(target=register_all)
    worker.start()
    try:
        wait_for(lambda: len(answered) >= 5 or None, SETTLE_S, "registers before the kill")
        healthy.kill(leader)
        killed_at = len(answered)
        wait_for(lambda: len(answered) >= killed_at + 5 or None, 3 * SETTLE_S, "registers after it")
    finally:
        stop.set()
        worker.join()
    ids = [schema_id for _, schema_id in answered]
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
    for url in live:
        reader = client(url)
        for n, schema_id in answered:
            assert json.loads(reader.get_schema(schema_id).schema_str or "") == json.loads(
                user_schema(n)
            )
    again = client(*live)
    for n, schema_id in answered[-3:]:
        assert again.register_schema("failover-value", Schema(user_schema(n), "AVRO")) == schema_id
    with pytest.raises(SchemaRegistryError):
        again.get_schema(max(ids) + 1000)


def test_a_paused_writer_is_fenced(healthy: Cluster) -> None:
    """The writer is paused (SIGSTOP) with a register forwarded to it; another node takes
    over and registers; when the old writer resumes, the register it held is refused
    (retriable 503) or answered with the id the new writer's log has for that schema: never
    an id given to another schema."""
    leader = schemas_partition(healthy).leader
    live = [healthy.url(i) for i in range(healthy.size) if i != leader]
    http = httpx.Client(timeout=60.0)
    held: list[httpx.Response] = []
    held_schema = json.dumps({"type": "enum", "name": "Held", "symbols": ["A"]})
    other_schema = json.dumps({"type": "enum", "name": "Other", "symbols": ["B"]})
    healthy.pause(leader)
    try:
        sender = threading.Thread(
            target=lambda: held.append(
                http.post(
                    f"{live[0]}/schema-registry/subjects/held-value/versions",
                    json={"schema": held_schema},
                )
            )
        )
        sender.start()
        writer = healthy.wait_state(
            TOPIC, 0, lambda s: s.leader not in (leader, NO_LEADER), "another writer"
        ).leader
        # Until a node's view names the new writer it forwards a register to the paused one,
        # where the request waits, unanswered, for the resume that comes after this wait.
        wait_for(
            lambda: all(
                healthy.describe(i, TOPIC)["partitions"][0]["leader"] == writer
                for i in range(healthy.size)
                if i != leader
            ),
            SETTLE_S,
            "the live nodes' views to name the new writer",
        )

        def registered() -> httpx.Response | None:
            answer = http.post(
                f"{live[1]}/schema-registry/subjects/other-value/versions",
                json={"schema": other_schema},
            )
            return answer if answer.status_code == 200 else None

        other = wait_for(registered, SETTLE_S, "a register at the new writer")
    finally:
        healthy.resume(leader)
    sender.join(timeout=SETTLE_S)
    assert held, "the held register was never answered"
    answer = held[0]
    other_id = other.json()["id"]
    if answer.status_code == 200:
        assert answer.json()["id"] != other_id
        found = client(live[1]).get_schema(answer.json()["id"]).schema_str
        assert json.loads(found or "") == json.loads(held_schema)
    else:
        assert answer.status_code == 503 and answer.json()["error_code"] == 50003, answer.text
    assert json.loads(client(live[0]).get_schema(other_id).schema_str or "") == json.loads(
        other_schema
    )


def test_a_forwarded_write_that_lands_off_the_writer_is_retried_by_clients(
    healthy: Cluster,
) -> None:
    """A register forwarded to the writer as the writer moved lands on a node that does not
    write the registry (the fault campaign: a link cut and leader flaps): it appended nothing,
    and it is answered with Confluent's forwarding error, a 5xx its clients retry, not with the
    v1 API's 421, on which confluent-kafka gives up."""
    leader = schemas_partition(healthy).leader
    other = next(i for i in range(healthy.size) if i != leader)
    answer = httpx.post(
        f"{healthy.url(other)}/schema-registry/subjects/misdirected-value/versions",
        json={"schema": user_schema(0)},
        headers={"Sluice-Forwarded-By": str(leader)},
        timeout=30.0,
    )
    assert answer.status_code == 503, answer.text
    assert answer.json()["error_code"] == 50003, answer.text
    assert answer.headers["Retry-After"] == "1"
    assert (
        httpx.get(f"{healthy.url(leader)}/schema-registry/subjects")
        .json()
        .count("misdirected-value")
        == 0
    )


def test_a_validated_produce_right_after_a_register_elsewhere_is_accepted(
    healthy: Cluster,
) -> None:
    """A schema registered through the writer, and at once a framed value produced through each
    other node into a validating topic: a node whose view has not read the new id yet catches
    up with the registry before judging the record, so none is refused."""
    leader = schemas_partition(healthy).leader
    others = [i for i in range(healthy.size) if i != leader]
    topic = "validated-at-once"
    created = healthy.post(
        others[0],
        "/v1/topics",
        json={"name": topic, "replication_factor": 3, "configs": {"value.schema.validation": True}},
    )
    assert created.status_code == 201, created.text
    writer = client(healthy.url(leader))
    context = SerializationContext(topic, MessageField.VALUE)
    for n in range(12):
        payload = AvroSerializer(writer, user_schema(n))({"f0": n}, context)
        assert payload is not None
        for node in others:
            produced = healthy.post(
                node,
                f"/v1/topics/{topic}/records",
                json={
                    "records": [
                        {"value": base64.b64encode(payload).decode(), "value_encoding": "base64"}
                    ]
                },
            )
            assert produced.status_code == 200, (n, node, produced.text)
