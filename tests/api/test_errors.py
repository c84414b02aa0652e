"""Bad input: every failure is a problem+json with a stable code, and appends nothing."""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from engine import batch as fmt
from engine.batch import RecordInput
from gateway.api.backpressure import INFLIGHT
from tests.api.support import (
    JSON,
    NDJSON,
    PROBLEM,
    RECORD_BATCH,
    Client,
    Start,
    batch_bytes,
    create_topic,
    end_offsets,
    fetch_all,
    problem,
    produce,
    raw_request,
    records_path,
    wait_until,
)

# -- JSON produce bodies ------------------------------------------------------------------------

MALFORMED_BODIES: list[tuple[bytes, str]] = [
    (b"", "INVALID_JSON"),
    (b"{", "INVALID_JSON"),
    (b'{"records": [}', "INVALID_JSON"),
    (b"\xff\xfe\x00", "INVALID_JSON"),
    (b'{"records": [{"value": 1}]} trailing', "INVALID_JSON"),
    (b"null", "INVALID_JSON"),
    (b"[]", "INVALID_JSON"),
    (b'[{"value": 1}]', "INVALID_JSON"),
    (b"{}", "INVALID_JSON"),
    (b'{"records": {}}', "INVALID_JSON"),
    (b'{"records": null}', "INVALID_JSON"),
    (b'{"records": "x"}', "INVALID_JSON"),
    (b'{"records": [{"value": 1}], "acks": 0}', "INVALID_JSON"),
    (b'{"records": []}', "INVALID_RECORD"),
]


async def test_malformed_json_bodies(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    for body, code in MALFORMED_BODIES:
        with subtests.test(body=body):
            resp = await client.post(records_path("t"), data=body, headers={"Content-Type": JSON})
            await problem(resp, 400, code)
    assert await end_offsets(client) == [0]


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# (bad record, field named in the pointer or None)
BAD_RECORDS: list[tuple[object, str | None]] = [
    (5, None),
    ("value", None),
    ([1], None),
    (None, None),
    ({"value": 1, "colour": "red"}, None),
    ({"value": 1, "offset": 3}, None),
    ({"key": 5}, "key"),
    ({"key": True}, "key"),
    ({"key": {"a": 1}}, "key"),
    ({"key": ["a"]}, "key"),
    ({"key": "a", "key_encoding": "hex"}, "key_encoding"),
    ({"key": "a", "key_encoding": 1}, "key_encoding"),
    ({"key": "not base64!", "key_encoding": "base64"}, "key"),
    ({"key": 5, "key_encoding": "base64"}, "key"),
    ({"value": "x", "value_encoding": "BASE64"}, "value_encoding"),
    ({"value": "x", "value_encoding": None, "key": 1}, "key"),
    ({"value": "@@@", "value_encoding": "base64"}, "value"),
    ({"value": "YQ", "value_encoding": "base64"}, "value"),
    ({"value": {"a": 1}, "value_encoding": "base64"}, "value"),
    ({"headers": []}, "headers"),
    ({"headers": "h=v"}, "headers"),
    ({"headers": {"h": 1}}, "headers"),
    ({"headers": {"h": ["v"]}}, "headers"),
    ({"headers": {"h": True}}, "headers"),
    ({"timestamp": "1"}, "timestamp"),
    ({"timestamp": -1}, "timestamp"),
    ({"timestamp": 1.5}, "timestamp"),
    ({"timestamp": 1.0}, "timestamp"),
    ({"timestamp": True}, "timestamp"),
    ({"timestamp": 2**63}, "timestamp"),
    ({"timestamp": {}}, "timestamp"),
    ({"partition": -1}, "partition"),
    ({"partition": "0"}, "partition"),
    ({"partition": 0.0}, "partition"),
    ({"partition": True}, "partition"),
    ({"partition": [0]}, "partition"),
]


async def test_a_bad_record_is_400_naming_its_index(
    client: Client, subtests: pytest.Subtests
) -> None:
    """The error names the record (index and JSON pointer); the valid record 0 is not kept."""
    await create_topic(client, partitions=2)
    for record, field in BAD_RECORDS:
        with subtests.test(record=record):
            resp = await client.post(
                records_path("t"), json={"records": [{"key": "ok", "value": 1}, record]}
            )
            body = await problem(resp, 400, "INVALID_RECORD")
            assert body["index"] == 1
            assert body["pointer"] == "/records/1" + (f"/{field}" if field else "")
            assert body["detail"].startswith("records[1]: ")
    assert await end_offsets(client) == [0, 0]


@pytest.mark.parametrize(
    "record",
    [{"value": None, "value_encoding": "hex"}, {"key": None, "key_encoding": 7}],
    ids=["value", "key"],
)
async def test_an_invalid_encoding_beside_a_null_is_refused(
    client: Client, record: dict[str, Any]
) -> None:
    await create_topic(client)
    resp = await client.post(records_path("t"), json={"records": [record]})
    await problem(resp, 400, "INVALID_RECORD")
    assert await end_offsets(client) == [0]


async def test_padded_base64_is_decoded_exactly(client: Client) -> None:
    """Valid base64 is decoded, so the producer's bytes are exact."""
    await create_topic(client)
    resp = await client.post(
        records_path("t"),
        json={"records": [{"value": _b64(b"\x00" * 5), "value_encoding": "base64"}]},
    )
    assert resp.status == 200
    assert (await fetch_all(client))[0]["value"] == _b64(b"\x00" * 5)


# -- NDJSON -------------------------------------------------------------------------------------


MALFORMED_NDJSON: list[tuple[bytes, int]] = [
    (b"{", 1),
    (b'1\n{"a":\n3\n', 2),
    (b"1\n\n\nnope\n", 4),
    (b"1\n2\n3\n\xff\n", 4),
    (b'1\n{"a": 1} {"b": 2}\n', 2),
]


async def test_malformed_ndjson_names_the_line(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    for body, line in MALFORMED_NDJSON:
        with subtests.test(body=body):
            resp = await client.post(records_path("t"), data=body, headers={"Content-Type": NDJSON})
            problem_body = await problem(resp, 400, "INVALID_JSON")
            assert problem_body["line"] == line
    for body in (b"", b"\n\n", b"  \r\n"):
        with subtests.test(body=body):
            resp = await client.post(records_path("t"), data=body, headers={"Content-Type": NDJSON})
            await problem(resp, 400, "INVALID_RECORD")
    assert await end_offsets(client) == [0]


# -- binary batches -----------------------------------------------------------------------------


def _bad_batches() -> list[tuple[str, bytes]]:
    good = batch_bytes([RecordInput(b"k", b"v"), RecordInput(b"j", b"w")])
    corrupt_crc = bytearray(good)
    corrupt_crc[-1] ^= 0xFF
    magic1 = bytearray(good)
    magic1[16] = 1
    transactional = bytearray(good)
    fmt.set_attributes(
        transactional,
        0,
        fmt.read_header(good),
        fmt.read_header(good).attributes | fmt.TRANSACTIONAL_MASK,
    )
    control = bytearray(good)
    fmt.set_attributes(
        control, 0, fmt.read_header(good), fmt.read_header(good).attributes | fmt.CONTROL_MASK
    )
    miscounted = bytearray(good)
    struct.pack_into(">i", miscounted, 57, 3)  # record count 3, two records
    fmt.set_attributes(
        miscounted, 0, fmt.read_header(miscounted), fmt.read_header(miscounted).attributes
    )
    return [
        ("empty", b""),
        ("garbage", b"hello, this is not a record batch at all, not even close......"),
        ("truncated header", good[:40]),
        ("truncated batch", good[:-3]),
        ("trailing bytes", good + b"\x00\x01"),
        ("bad crc", bytes(corrupt_crc)),
        ("magic 1", bytes(magic1)),
        ("transactional", bytes(transactional)),
        ("control", bytes(control)),
        ("record count mismatch", bytes(miscounted)),
    ]


BAD_BATCHES = _bad_batches()


async def test_invalid_record_batches(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    for name, body in BAD_BATCHES:
        with subtests.test(name):
            resp = await client.post(
                records_path("t"), data=body, headers={"Content-Type": RECORD_BATCH}
            )
            await problem(resp, 400, "INVALID_RECORD")
    assert await end_offsets(client) == [0]


async def test_a_bad_second_batch_rejects_the_whole_request(client: Client) -> None:
    await create_topic(client)
    good = batch_bytes([RecordInput(b"k", b"v")])
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    resp = await client.post(
        records_path("t"), data=good + bytes(bad), headers={"Content-Type": RECORD_BATCH}
    )
    body = await problem(resp, 400, "INVALID_RECORD")
    assert body["byte"] == len(good)
    assert await end_offsets(client) == [0]


# -- media types --------------------------------------------------------------------------------


async def test_unsupported_produce_content_type(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    for content_type in (
        "text/plain",
        "application/xml",
        "application/octet-stream",
        "multipart/form-data",
        "application/jsonx",
        None,
    ):
        with subtests.test(content_type=content_type):
            headers = {} if content_type is None else {"Content-Type": content_type}
            resp = await client.post(
                records_path("t"), data=b'{"records": [{"value": 1}]}', headers=headers
            )
            await problem(resp, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert await end_offsets(client) == [0]


async def test_content_type_parameters_are_allowed(client: Client) -> None:
    await create_topic(client)
    resp = await client.post(
        records_path("t"),
        data=b'{"records": [{"value": 1}]}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert resp.status == 200


async def test_not_acceptable(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    await produce(client, [{"value": 1}])
    for accept in (
        "text/html",
        "application/xml",
        "application/json;q=0",
        "*/*;q=0",
        "text/*",
        "application/problem+json",
        "application/json;q=0, application/x-ndjson;q=0",
    ):
        with subtests.test(accept=accept):
            resp = await client.get(records_path("t", 0), headers={"Accept": accept})
            await problem(resp, 406, "NOT_ACCEPTABLE")


# -- request size and slow clients --------------------------------------------------------------


async def test_a_body_over_the_limit_is_413(start: Start) -> None:
    client: Client = await start(max_request_bytes=1024)
    await create_topic(client)
    doc = {"records": [{"value": "x" * 2000}]}
    resp = await client.post(records_path("t"), json=doc)
    body = await problem(resp, 413, "REQUEST_TOO_LARGE")
    assert "1024" in body["detail"]
    assert await end_offsets(client) == [0]


async def test_a_body_at_the_limit_is_accepted(start: Start) -> None:
    client: Client = await start(max_request_bytes=1024)
    await create_topic(client)
    prefix, suffix = b'{"records": [{"value": "', b'"}]}'
    body = prefix + b"x" * (1024 - len(prefix) - len(suffix)) + suffix
    assert len(body) == 1024
    resp = await client.post(records_path("t"), data=body, headers={"Content-Type": JSON})
    assert resp.status == 200


async def test_413_arrives_before_the_body_is_sent(start: Start) -> None:
    """A Content-Length over the limit is refused at once; the body is never read."""
    client: Client = await start(max_request_bytes=1024)
    await create_topic(client)
    head = (
        b"POST /v1/topics/t/records HTTP/1.1\r\nHost: test\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n"
    )
    status, headers, payload = await raw_request(client, head)
    assert status == 413
    assert headers["content-type"] == PROBLEM
    assert headers["connection"] == "close"
    assert orjson.loads(payload)["code"] == "REQUEST_TOO_LARGE"
    assert await end_offsets(client) == [0]


async def test_a_chunked_body_over_the_limit_is_413(start: Start) -> None:
    client: Client = await start(max_request_bytes=1024)
    await create_topic(client)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"records": [{"value": "'
        for _ in range(4):
            yield b"x" * 512
        yield b'"}]}'

    resp = await client.post(records_path("t"), data=chunks(), headers={"Content-Type": JSON})
    await problem(resp, 413, "REQUEST_TOO_LARGE")
    assert await end_offsets(client) == [0]


async def test_a_slow_body_times_out_with_408(start: Start) -> None:
    client: Client = await start(body_read_timeout_s=0.2)
    await create_topic(client)
    head = (
        b"POST /v1/topics/t/records HTTP/1.1\r\nHost: test\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    status, headers, payload = await raw_request(client, head, b'{"records": [')
    assert status == 408
    assert headers["connection"] == "close"
    assert headers["content-type"] == PROBLEM
    assert orjson.loads(payload)["code"] == "REQUEST_TIMED_OUT"
    assert await end_offsets(client) == [0]


@pytest.mark.parametrize(
    ("content_length", "sent", "status"),
    [(b"1000000000", b"", 413), (b"100", b"{", 408)],
    ids=["too-large", "slow"],
)
async def test_refused_bodies_close_the_connection_at_once(
    start: Start, content_length: bytes, sent: bytes, status: int
) -> None:
    client: Client = await start(max_request_bytes=1024, body_read_timeout_s=0.1)
    await create_topic(client)
    head = (
        b"POST /v1/topics/t/records HTTP/1.1\r\nHost: test\r\n"
        b"Content-Type: application/json\r\nContent-Length: " + content_length + b"\r\n\r\n"
    )
    got, _, _ = await raw_request(client, head, sent, closed_within=1.0)
    assert got == status


ADMIN_BODY_ROUTES = [
    ("POST", "/v1/topics"),
    ("PATCH", "/v1/topics/t"),
    ("POST", "/v1/topics/t/partitions/0/delete-records"),
]


@pytest.mark.parametrize(("method", "path"), ADMIN_BODY_ROUTES)
async def test_admin_bodies_over_the_limit_are_refused_before_reading(
    start: Start, method: str, path: str
) -> None:
    client: Client = await start(max_request_bytes=1024, body_read_timeout_s=0.2)
    await create_topic(client)
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: test\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n"
    ).encode()
    status, _, payload = await raw_request(client, head, timeout=0.5)
    assert status == 413
    assert orjson.loads(payload)["code"] == "REQUEST_TOO_LARGE"


async def test_a_slow_admin_body_times_out_with_408(start: Start) -> None:
    client: Client = await start(body_read_timeout_s=0.1)
    head = (
        b"POST /v1/topics HTTP/1.1\r\nHost: test\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    status, _, payload = await raw_request(client, head, b"{", timeout=1.0)
    assert status == 408
    assert orjson.loads(payload)["code"] == "REQUEST_TIMED_OUT"


# -- unknown topics and partitions --------------------------------------------------------------

TOPIC_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/topics/{t}", None),
    ("PATCH", "/v1/topics/{t}", {"partitions": 2}),
    ("DELETE", "/v1/topics/{t}", None),
    ("POST", "/v1/topics/{t}/records", {"records": [{"value": 1}]}),
    ("POST", "/v1/topics/{t}/partitions/0/records", {"records": [{"value": 1}]}),
    ("GET", "/v1/topics/{t}/partitions/0/records", None),
    ("GET", "/v1/topics/{t}/partitions/0/offsets", None),
    ("POST", "/v1/topics/{t}/partitions/0/delete-records", {"before_offset": 0}),
]


async def test_unknown_topic_on_every_route(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client, "other")
    for method, path, doc in TOPIC_ROUTES:
        with subtests.test(f"{method} {path}"):
            resp = await client.request(method, path.format(t="nope"), json=doc)
            body = await problem(resp, 404, "UNKNOWN_TOPIC")
            assert "'nope'" in body["detail"]
    assert [t["name"] for t in (await (await client.get("/v1/topics")).json())["topics"]] == [
        "other"
    ]


PARTITION_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/topics/t/partitions/{p}/records", {"records": [{"value": 1}]}),
    ("GET", "/v1/topics/t/partitions/{p}/records", None),
    ("GET", "/v1/topics/t/partitions/{p}/offsets", None),
    ("POST", "/v1/topics/t/partitions/{p}/delete-records", {"before_offset": 0}),
]
BAD_PARTITIONS = ["2", "3", "abc", "-1", "1.0", "0x1", "+1", " 1", "99999999999", "9" * 40]


async def test_unknown_partition_on_every_route(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client, partitions=2)
    for method, path, doc in PARTITION_ROUTES:
        for partition in BAD_PARTITIONS:
            with subtests.test(f"{method} {path}", partition=partition):
                resp = await client.request(method, path.format(p=partition), json=doc)
                await problem(resp, 404, "UNKNOWN_PARTITION")
    assert await end_offsets(client) == [0, 0]


async def test_a_unicode_digit_partition_is_unknown(client: Client) -> None:
    await create_topic(client, partitions=2)
    for method, path, doc in PARTITION_ROUTES:
        for partition in ("%C2%B2", "%E2%91%A0"):
            resp = await client.request(method, path.format(p=partition), json=doc)
            await problem(resp, 404, "UNKNOWN_PARTITION")


# -- query parameters ---------------------------------------------------------------------------

BAD_PRODUCE_PARAMS: list[dict[str, str]] = [
    {"acks": "2"},
    {"acks": "ALL"},
    {"acks": ""},
    {"acks": "none"},
    {"timeout_ms": "-1"},
    {"timeout_ms": "abc"},
    {"timeout_ms": "1.5"},
    {"timeout_ms": "300001"},
    {"timeout_ms": "9" * 30},
]


async def test_bad_produce_parameters(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    for params in BAD_PRODUCE_PARAMS:
        with subtests.test(params=params):
            resp = await client.post(
                records_path("t"), params=params, json={"records": [{"value": 1}]}
            )
            body = await problem(resp, 400, "INVALID_PARAMETER")
            assert next(iter(params)) in body["detail"]
    assert await end_offsets(client) == [0]


BAD_FETCH_PARAMS: list[dict[str, str]] = [
    {"offset": "abc"},
    {"offset": "1.5"},
    {"offset": "first"},
    {"max_records": "0"},
    {"max_records": "-1"},
    {"max_records": "100001"},
    {"max_records": "x"},
    {"max_bytes": "0"},
    {"max_bytes": "-5"},
    {"max_bytes": str(64 * 1024 * 1024 + 1)},
    {"max_bytes": "9" * 40},
    {"min_bytes": "-1"},
    {"min_bytes": "lots"},
    {"timeout_ms": "-1"},
    {"timeout_ms": "300001"},
    {"timeout_ms": "soon"},
]


async def test_bad_fetch_parameters(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    await produce(client, [{"value": 1}])
    for params in BAD_FETCH_PARAMS:
        with subtests.test(params=params):
            resp = await client.get(records_path("t", 0), params=params)
            body = await problem(resp, 400, "INVALID_PARAMETER")
            assert next(iter(params)) in body["detail"]


@pytest.mark.parametrize("offset", ["-1", "1", str(2**63 - 1)])
async def test_fetch_offsets_outside_the_log(client: Client, offset: str) -> None:
    await create_topic(client)
    resp = await client.get(records_path("t", 0), params={"offset": offset, "timeout_ms": "0"})
    body = await problem(resp, 416, "OFFSET_OUT_OF_RANGE")
    assert (body["offset"], body["log_start_offset"], body["log_end_offset"]) == (int(offset), 0, 0)


@pytest.mark.parametrize("offset", ["9" * 30, "-" + "9" * 30])
async def test_fetch_offset_beyond_64_bits(client: Client, offset: str) -> None:
    await create_topic(client)
    resp = await client.get(records_path("t", 0), params={"offset": offset, "timeout_ms": "0"})
    assert resp.status in (400, 416)
    assert resp.content_type == PROBLEM


async def test_bad_offsets_timestamp(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    for timestamp in ("abc", "1.5", "", "now", "1e3"):
        with subtests.test(timestamp=timestamp):
            resp = await client.get(
                "/v1/topics/t/partitions/0/offsets", params={"timestamp": timestamp}
            )
            body = await problem(resp, 400, "INVALID_PARAMETER")
            assert "timestamp" in body["detail"]


@pytest.mark.parametrize("timestamp", ["-1", str(2**63)])
async def test_offsets_timestamp_outside_the_millisecond_range(
    client: Client, timestamp: str
) -> None:
    await create_topic(client)
    await produce(client, [{"value": 1, "timestamp": 10}])
    resp = await client.get("/v1/topics/t/partitions/0/offsets", params={"timestamp": timestamp})
    await problem(resp, 400, "INVALID_PARAMETER")


# -- idempotency keys ---------------------------------------------------------------------------


async def test_invalid_idempotency_keys(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    for key in ("", "x" * 256, "tab\there"):
        with subtests.test(key=key):
            resp = await client.post(
                records_path("t"),
                headers={"Idempotency-Key": key},
                json={"records": [{"value": 1}]},
            )
            await problem(resp, 400, "INVALID_IDEMPOTENCY_KEY")
    assert await end_offsets(client) == [0]


# -- routing ------------------------------------------------------------------------------------


async def test_unknown_route_is_a_problem(client: Client) -> None:
    await problem(await client.get("/v1/nothing/here"), 404, "NOT_FOUND")
    await problem(await client.get("/"), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/v1/topics", {"GET", "HEAD", "POST"}),
        ("DELETE", "/v1/topics/t/records", {"POST"}),
        ("PUT", "/v1/topics/t", {"GET", "HEAD", "PATCH", "DELETE"}),
        ("POST", "/healthz", {"GET", "HEAD"}),
    ],
)
async def test_method_not_allowed(
    client: Client, method: str, path: str, allowed: set[str]
) -> None:
    await create_topic(client)
    resp = await client.request(method, path)
    await problem(resp, 405, "METHOD_NOT_ALLOWED")
    assert {m.strip() for m in resp.headers["Allow"].split(",")} == allowed


async def test_acks_0_still_reports_bad_input(client: Client) -> None:
    """Validation happens before an acks=0 answer: a bad body is never a 202."""
    await create_topic(client)
    resp = await client.post(
        records_path("t"), params={"acks": "0"}, data=b"{", headers={"Content-Type": JSON}
    )
    await problem(resp, 400, "INVALID_JSON")
    assert await end_offsets(client) == [0]


async def test_requests_keep_working_after_errors(client: Client) -> None:
    """A burst of bad requests on one connection leaves the gateway serving."""
    await create_topic(client)
    bad = [
        client.post(records_path("t"), data=b"{", headers={"Content-Type": JSON}),
        client.get(records_path("t", 9)),
        client.get(records_path("t", 0), params={"offset": "5"}),
    ]
    for coro in bad:
        assert (await coro).status >= 400
    await asyncio.gather(
        *(client.post(records_path("t"), json={"records": [{"value": i}]}) for i in range(5))
    )
    assert sorted(r["value"] for r in await fetch_all(client)) == [0, 1, 2, 3, 4]


async def test_request_bodies_in_progress_are_bounded(start: Start) -> None:
    """A body that would take the bodies being served past max_inflight_request_bytes is
    refused before it is read (503 SERVER_BUSY, Retry-After); once the others finish, it
    goes through."""
    client = await start(max_request_bytes=4096, max_inflight_request_bytes=6000)
    await create_topic(client)
    release = asyncio.Event()

    async def slow_body() -> Any:
        yield b'{"records": [{"value": '
        await release.wait()
        yield b"1}]}"

    slow = asyncio.ensure_future(
        client.post(
            "/v1/topics/t/records", data=slow_body(), headers={"Content-Type": "application/json"}
        )
    )
    assert client.app is not None
    inflight = client.app[INFLIGHT]
    await wait_until(lambda: inflight.reserved >= 4096)
    body = {"records": [{"value": "x" * 2500}]}
    busy = await client.post("/v1/topics/t/records", json=body)
    problem_doc = await problem(busy, 503, "SERVER_BUSY")
    assert busy.headers["Retry-After"] == "1" and "4096 of 6000" in problem_doc["detail"]
    release.set()
    assert (await slow).status == 200
    assert (await client.post("/v1/topics/t/records", json=body)).status == 200
