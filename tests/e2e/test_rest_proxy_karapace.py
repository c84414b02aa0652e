"""REST Proxy v2 produce and metadata on a real `sluice serve`: the cases from Karapace's
tests/integration/kafka_rest_apis/test_rest.py (Apache-2.0) that need no schema registry, with
their requests, statuses, error codes and bodies. Where Sluice answers otherwise, the test
says why (Confluent's proxy answers so, or a documented difference its clients do not see);
the cases with avro, jsonschema or protobuf schemas are in test_rest_proxy_karapace_schemas."""

from __future__ import annotations

import base64

import httpx

from tests.e2e.karapace_rest import (
    REST_HEADERS,
    SCHEMA_AVRO_JSON,
    TEST_OBJECTS_AVRO,
    new_random_name,
    new_topic,
    rest_client,  # noqa: F401 (the rest fixture)
)

# Karapace's suite runs its proxy with a Kafka producer's max.request.size of 10240; the
# bound of one record in Sluice is its topic's max.message.bytes.
REST_PRODUCER_MAX_REQUEST_BYTES = 10240


def test_health_endpoint(rest: httpx.Client) -> None:
    """Karapace's `/_health` is its own; Sluice's health check is `/healthz`."""
    answer = rest.get("/healthz")
    assert answer.status_code == 200


def test_request_body_too_large(rest: httpx.Client) -> None:
    tn = new_topic(rest)
    pl = {"records": [{"value": 1_048_576 * "a"}]}
    res = rest.post(f"/topics/{tn}", json=pl, headers={"Content-Type": "application/json"})
    assert res.status_code == 413


def test_content_types(rest: httpx.Client) -> None:
    """The avro media type's case (it registers a schema) is in the schemas module."""
    tn = new_topic(rest)
    valid_headers = [
        "application/vnd.kafka.v1+json",
        "application/vnd.kafka.binary.v1+json",
        "application/vnd.kafka.json+json",
        "application/vnd.kafka.v1+json",
        "application/vnd.kafka+json",
        "application/json",
        "application/octet-stream",
    ]
    invalid_headers = [
        "application/vnd.kafka.v3+json",
        "application/vnd.kafka.binary.v1+foo",
        "application/vnd.kafka.avro.v0+json",
        "application/vnd.kafka.json+avro",
        "application/vnd.kafka",
        "application/vnd.kafka+binary",
        "application/text",
        "bar/baz",
    ]
    invalid_accept_headers = [
        "application/octet-stream",
        "application/vnd.kafka+foo",
        "application/text",
        "foo/*",
        "bar/json",
        "*/baz",
    ]
    valid_accept_headers = [
        "application/vnd.kafka.v1+json",
        "application/vnd.kafka+json",
        "application/json",
        "application/*",
        "*/json",
        "*/*",
    ]
    json_payload = {"records": [{"value": {"foo": "bar"}}]}
    binary_payload = {"records": [{"value": "Zm9v"}]}
    avro_payload = {
        "value_schema": SCHEMA_AVRO_JSON,
        "records": [{"value": o} for o in TEST_OBJECTS_AVRO],
    }
    valid_payloads = [binary_payload, binary_payload, json_payload] + 4 * [binary_payload]
    for hv, pl in zip(valid_headers, valid_payloads, strict=True):
        res = rest.post(f"topics/{tn}", json=pl, headers={"Content-Type": hv})
        assert res.is_success, (hv, res.text)
    payloads = [binary_payload, binary_payload, avro_payload, json_payload] + 4 * [binary_payload]
    for hv, pl in zip(invalid_headers, payloads, strict=True):
        res = rest.post(f"topics/{tn}", json=pl, headers={"Content-Type": hv})
        assert not res.is_success, hv
    for ah in valid_accept_headers:
        res = rest.get("/brokers", headers={"Accept": ah})
        assert res.is_success, ah
    for ah in invalid_accept_headers:
        res = rest.get("/brokers", headers={"Accept": ah})
        assert not res.is_success, ah


def test_internal(rest: httpx.Client) -> None:
    """Karapace's produce internals over HTTP: a record naming partition 0 and one naming
    none both land on the one partition; one naming a partition the topic lacks is refused.
    Karapace answers that per record (422, Kafka's error code 2) and Confluent's proxy with a
    per-record 50002; Sluice refuses the request as a whole before appending anything (a
    documented difference), with v2's partition-not-found error."""
    topic_name = new_topic(rest)
    records = [
        {"key": base64.b64encode(b"key").decode(), "value": "dmFsdWU=", "partition": 0},
        {"key": base64.b64encode(b"key").decode(), "value": "dmFsdWU="},
    ]
    res = rest.post(
        f"/topics/{topic_name}", json={"records": records}, headers=REST_HEADERS["binary"]
    )
    assert res.status_code == 200, res.text
    results = res.json()["offsets"]
    assert len(results) == 2
    for result in results:
        assert result["error"] is None
        assert result["partition"] == 0
        assert isinstance(result["offset"], int)
    bad = {"records": [{"key": "a2V5", "value": "dmFsdWU=", "partition": 100}]}
    res = rest.post(f"/topics/{topic_name}", json=bad, headers=REST_HEADERS["binary"])
    assert res.status_code == 404
    assert res.json()["error_code"] == 40402
    offsets = rest.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    assert offsets == {"beginning_offset": 0, "end_offset": 2}


def test_topics(rest: httpx.Client) -> None:
    """An unknown topic: Karapace's test expects 40403 (its UNKNOWN_TOPIC_OR_PARTITION, the
    code Confluent gives a missing consumer instance); Confluent's proxy answers 40401
    (`Errors.topicNotFoundException`), as Sluice does."""
    topic_foo = "foo"
    tn = new_topic(rest)
    res = rest.get(f"/topics/{tn}")
    assert res.is_success, res.status_code
    data = res.json()
    assert data["name"] == tn
    assert "configs" in data
    assert data["configs"] != {}
    assert "partitions" in data
    assert len(data["partitions"]) == 1
    assert "replicas" in data["partitions"][0]
    assert len(data["partitions"][0]["replicas"]) == 1
    assert data["partitions"][0]["replicas"][0]["leader"]
    assert data["partitions"][0]["replicas"][0]["in_sync"]
    res = rest.get(f"/topics/{topic_foo}")
    assert res.status_code == 404
    assert res.json()["error_code"] == 40401


def test_list_topics(rest: httpx.Client) -> None:
    """Karapace waits for its metadata cache to expire; Sluice's view has no such delay."""
    tn1 = new_topic(rest)
    tn2 = new_topic(rest)
    res = rest.get(f"/topics/{tn1}")
    assert res.is_success
    assert res.json()["name"] == tn1
    topic_list_res = rest.get("/topics")
    assert topic_list_res.is_success
    topic_list = topic_list_res.json()
    assert tn1 in topic_list and tn2 in topic_list


def test_publish(rest: httpx.Client) -> None:
    topic = new_topic(rest)
    for url in [f"/topics/{topic}", f"/topics/{topic}/partitions/0"]:
        for payload, h in [({"value": {"foo": "bar"}}, "json"), ({"value": "Zm9vCg=="}, "binary")]:
            res = rest.post(url, json={"records": [payload]}, headers=REST_HEADERS[h])
            assert res.is_success, res.text
            res_json = res.json()
            assert "offsets" in res_json
            if "partition" in url:
                for o in res_json["offsets"]:
                    assert o["partition"] == 0


def test_publish_random_partitioning(rest: httpx.Client) -> None:
    """Key-less records of separate requests do not all land on one partition."""
    topic = new_topic(rest, num_partitions=100)
    partitions_seen: set[int] = set()
    for i in range(200):
        res = rest.post(
            f"/topics/{topic}",
            json={"records": [{"value": f"data{i}"}]},
            headers=REST_HEADERS["json"],
        )
        assert res.is_success
        partitions_seen.update(o["partition"] for o in res.json()["offsets"])
        if len(partitions_seen) >= 2:
            break
    assert len(partitions_seen) >= 2


def test_publish_malformed_requests(rest: httpx.Client) -> None:
    topic_name = new_topic(rest)
    for url in [f"/topics/{topic_name}", f"/topics/{topic_name}/partitions/0"]:
        for js in [{"records": []}, {"foo": "bar"}, {"records": [{"valur": {"foo": "bar"}}]}]:
            res = rest.post(url, json=js, headers=REST_HEADERS["json"])
            assert res.status_code == 422, (js, res.text)
        res = rest.post(
            url, json={"records": [{"value": {"foo": "bar"}}]}, headers=REST_HEADERS["avro"]
        )
        assert res.status_code == 422
        assert res.json()["error_code"] == 42202
        res = rest.post(
            url, json={"records": [{"key": {"foo": "bar"}}]}, headers=REST_HEADERS["avro"]
        )
        assert res.status_code == 422
        assert res.json()["error_code"] == 42201
        res = rest.post(
            url, json={"records": [{"value": "not base64"}]}, headers=REST_HEADERS["binary"]
        )
        assert res.status_code == 400
        assert res.json()["error_code"] == 400
        res = rest.post(url, json={"records": "should be an array"}, headers=REST_HEADERS["binary"])
        assert res.status_code == 400
        res = rest.post(
            url, json={"records": ["object with value"]}, headers=REST_HEADERS["binary"]
        )
        assert res.status_code == 400
        res = rest.post(
            url, json={"records": [{"value": {"a": 1}}]}, headers=REST_HEADERS["binary"]
        )
        assert res.status_code == 400
        res = rest.post(
            url, json={"records": [{"value": "YmFzZTY0"}]}, headers=REST_HEADERS["avro"]
        )
        assert res.status_code == 422
        res = rest.post(url, json={"records": [{"value": "not b64"}]}, headers=REST_HEADERS["avro"])
        assert res.status_code == 422
    offsets = rest.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    assert offsets["end_offset"] == 0


def test_too_large_record(rest: httpx.Client) -> None:
    tn = new_topic(rest, configs={"max.message.bytes": REST_PRODUCER_MAX_REQUEST_BYTES})
    record_value_str = (REST_PRODUCER_MAX_REQUEST_BYTES - 21) * "a"
    record_value = base64.b64encode(record_value_str.encode("utf8")).decode("utf8")
    pl = {"records": [{"value": record_value}]}
    res = rest.post(f"/topics/{tn}", json=pl, headers={"Content-Type": "application/json"})
    assert res.status_code == 422
    assert res.json().get("offsets")[0].get("error") == (
        "The server has a configurable maximum message size to avoid unbounded memory allocation. "
        "This error is thrown if the client attempt to produce a message larger than this maximum."
    )


def test_publish_to_nonexisting_topic(rest: httpx.Client) -> None:
    """The topic is looked up before the body's schemas, so no registry is involved."""
    tn = new_random_name("topic-that-should-not-exist")
    for url in [f"/topics/{tn}", f"/topics/{tn}/partitions/0"]:
        for pl_type in ["key", "value"]:
            payload = {
                f"{pl_type}_schema": SCHEMA_AVRO_JSON,
                "records": [{pl_type: o} for o in TEST_OBJECTS_AVRO],
            }
            res = rest.post(url, json=payload, headers=REST_HEADERS["avro"])
            assert res.status_code == 404
            assert res.json()["error_code"] == 40401


def test_brokers(rest: httpx.Client) -> None:
    res = rest.get("/brokers")
    assert res.is_success
    assert len(res.json()) == 1


def test_partitions(rest: httpx.Client) -> None:
    topic_name = new_topic(rest)
    header = {"Accept": "*/*", "Content-Type": "application/vnd.kafka.v2+json"}
    all_partitions_res = rest.get(f"/topics/{topic_name}/partitions")
    assert all_partitions_res.is_success
    partitions = all_partitions_res.json()
    assert len(partitions) == 1
    assert len(partitions[0]["replicas"]) == 1
    partition = partitions[0]
    assert partition["replicas"][0]["leader"]
    assert partition["replicas"][0]["in_sync"]
    first_partition_res = rest.get(f"/topics/{topic_name}/partitions/0")
    assert first_partition_res.is_success
    assert first_partition_res.json() == partition
    res = rest.get("/topics/fooo/partitions")
    assert res.status_code == 404
    assert res.json()["error_code"] == 40401
    assert rest.get("/brokers").is_success
    res = rest.get("/topics/fooo/partitions/0")
    assert res.status_code == 404
    assert res.json()["error_code"] == 40401
    res = rest.get(f"/topics/{topic_name}/partitions/10")
    assert res.status_code == 404
    assert res.json()["error_code"] == 40402
    res = rest.post(
        f"/v1/topics/{topic_name}/records", json={"records": 5 * [{"value": "foo_val"}]}
    )
    assert res.status_code == 200
    offset_res = rest.get(f"/topics/{topic_name}/partitions/0/offsets", headers=header)
    assert offset_res.is_success, offset_res.text
    assert offset_res.json() == {"beginning_offset": 0, "end_offset": 5}
    res = rest.get("/topics/fooo/partitions/0/offsets", headers=header)
    assert res.status_code == 404
    assert res.json()["error_code"] == 40401
    assert "Topic fooo not found" in res.json()["message"]
    res = rest.get(f"/topics/{topic_name}/partitions/foo/offsets", headers=header)
    assert res.status_code == 404
    assert res.json()["error_code"] == 404
