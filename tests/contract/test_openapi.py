"""The HTTP contract: openapi/openapi.yaml against a real gateway process.

Schemathesis generates requests for every operation (valid and invalid, deterministic seed,
bounded examples) and checks that no answer is a 5xx and that every status code, content type,
header and body conforms to the spec. A few explicit tests cover what generation cannot reach.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import resource
import selectors
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
import requests
import schemathesis
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from engine import batch as fmt
from openapi import SPEC

ONE = "contract-one"  # 1 partition
THREE = "contract-three"  # 3 partitions
SAMPLES = "contract-samples"  # 1 partition, for the explicit tests only
FIXTURE_TOPICS = (ONE, THREE)
# PATCH and DELETE get their own topics, so the fixtures keep their configs and their data.
SCRATCH_TOPICS = tuple(f"contract-scratch-{i}" for i in range(4))
NDJSON = "application/x-ndjson"
RECORD_BATCH = "application/vnd.sluice.record-batch"
# Accept does not belong in the spec's parameters (OpenAPI ignores it there), so fetches rotate
# through these: the three formats, the default and one the gateway must refuse with 406.
FETCH_ACCEPTS = ("application/json", NDJSON, RECORD_BATCH, "*/*", "text/csv")
MAX_CREATED_PARTITIONS = 8  # generated partition counts are folded into 1..8 (see _adapt)
MAX_FETCH_WAIT_MS = 50  # generated long-poll waits are folded into 0..49 (see _adapt)
VALID_IDEMPOTENCY_KEY = re.compile(r"[!-~]([ -~]*[!-~])?")
GROUP = "contract-group"  # joined by MEMBERS at the start; generated group ids mostly become it
MEMBERS: list[str] = []  # its members' ids (long sessions), filled by _seed_group
CLUSTER_IDS: list[str] = []  # the gateway's cluster id (REST Proxy v3 paths), filled by live

# -- schemathesis: the spec, the two non-JSON media types and the checks ---------------------

CONFIG = schemathesis.Config.from_dict(
    {
        "seed": 20260101,
        "suppress-health-check": ["all"],
        "generation": {
            "mode": "all",
            "max-examples": 50,
            "deterministic": True,
            "database": "none",
        },
        # The registry's routes share a few handlers and bodies: fewer examples each keep
        # the file's time in bounds.
        "operations": [{"include-tag": "schema-registry", "generation": {"max-examples": 12}}],
    }
)
# The internal routes are between nodes: tests/api/test_internal.py and the cluster tests
# drive them with real followers; generated calls would only claim to be replicas.
# The event stream lasts until its client goes: tests/api/test_events.py drives it, and
# test_event_stream_answers_conform below holds its answers to the contract.
schema = (
    schemathesis.openapi.from_path(SPEC, config=CONFIG)
    .exclude(tag="internal")
    .exclude(operation_id="streamEvents")
)
FULL_SCHEMA = schemathesis.openapi.from_path(SPEC, config=CONFIG)
Case = schemathesis.Case[Any]  # the generic parameter is the operation type
_unique = itertools.count()


def _component_validator(name: str) -> jsonschema_rs.Draft202012Validator:
    """A validator for components/schemas/<name>, resolving refs inside the spec."""
    components = schema.raw_schema["components"]
    return jsonschema_rs.Draft202012Validator(
        {"$ref": f"#/components/schemas/{name}", "components": components}
    )


RECORD_VALIDATOR = _component_validator("Record")
SHARE_RECORD_VALIDATOR = _component_validator("ShareRecord")


@schemathesis.serializer(NDJSON)
def _ndjson_body(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    """NDJSON request bodies are strings in the spec: send their UTF-8 bytes."""
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


schemathesis.serializer.alias(RECORD_BATCH, "application/octet-stream")
# The REST Proxy v2 bodies are JSON documents under v2's media types.
schemathesis.serializer.alias(
    ["application/vnd.kafka.json.v2+json", "application/vnd.kafka.binary.v2+json"],
    "application/json",
)


@schemathesis.deserializer(NDJSON)
def _ndjson_response(ctx: schemathesis.DeserializationContext, response: Any) -> str:
    """Check every line against the Record schema (ShareRecord for a share group's acquire);
    the body itself is a string in the spec."""
    text: str = response.content.decode()
    shared = "/share-groups/" in str(response.request.url)
    validator, name = (
        (SHARE_RECORD_VALIDATOR, "ShareRecord") if shared else (RECORD_VALIDATOR, "Record")
    )
    if text and not text.endswith("\n"):
        raise ValueError("an NDJSON body must end with a newline")
    # split on "\n" only: JSON strings may hold U+2028 and other line breaks unescaped
    for number, line in enumerate(text.split("\n")[:-1], 1):
        error = next(validator.iter_errors(json.loads(line)), None)
        if error is not None:
            raise ValueError(f"NDJSON line {number} is not a {name}: {error.message}")
    return text


@schemathesis.deserializer(RECORD_BATCH)
def _record_batch_response(ctx: schemathesis.DeserializationContext, response: Any) -> str:
    """Check that the body is whole RecordBatch v2 with valid CRCs."""
    content: bytes = response.content
    scanned = fmt.scan(content, check_crc=True)
    if scanned.error is not None:
        raise ValueError(f"bad record batch at byte {scanned.valid_bytes}: {scanned.error}")
    return content.decode("latin-1")


@schemathesis.check
def fetch_position_headers(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: Case
) -> bool | None:
    """NDJSON and binary fetches must carry Sluice-Next-Offset and Sluice-High-Watermark."""
    media = response.headers.get("content-type", [""])[0].split(";")[0].strip()
    if response.status_code != 200 or media not in (NDJSON, RECORD_BATCH):
        return None
    for name in ("sluice-next-offset", "sluice-high-watermark"):
        values = response.headers.get(name)
        if not values or not values[0].isdigit():
            raise AssertionError(f"a {media} fetch must carry {name}, got {values!r}")
    return True


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    fetch_position_headers,
]


# -- steering generated requests -----------------------------------------------------------


def _as_int(value: object) -> int | None:
    """A generated integer, or the decimal string of one; None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,40}", value):
        return int(value)
    return None


def _fold(value: object, modulo: int, offset: int = 0) -> object:
    """A generated non-negative integer (or its string form) folded into a small range."""
    number = _as_int(value)
    if number is None or number < 0:
        return value
    folded = offset + number % modulo
    return str(folded) if isinstance(value, str) else folded


def _pick_topic(generated: object, pool: tuple[str, ...]) -> object:
    """Three generated topic names in four become a pool topic (deterministically)."""
    if not isinstance(generated, str):
        return generated
    digest = zlib.crc32(generated.encode("utf-8", "surrogatepass"))
    return generated if digest % 4 == 0 else pool[digest % len(pool)]


def _adapt(case: Case) -> None:
    """Point generated requests at existing topics and keep them cheap and independent.

    - topics: mostly the fixture topics (PATCH/DELETE: scratch topics), else 404 paths;
    - partitions and fetch offsets: folded into small ranges, so both hits and misses occur;
    - fetch Accept: rotated through FETCH_ACCEPTS;
    - long-poll waits: at most MAX_FETCH_WAIT_MS (absent means the 500 ms default: made 0);
    - created or grown partition counts: at most MAX_CREATED_PARTITIONS (file descriptors);
    - a valid Idempotency-Key: made unique, so no run depends on an earlier example's key.
    """
    method = case.operation.method.upper()
    path = case.operation.path
    _adapt_path(case.path_parameters, topic_admin=path == "/v1/topics/{topic}" and method != "GET")
    if method == "GET" and path.endswith("/records"):
        _adapt_fetch(case)
    if isinstance(case.body, dict) and path in ("/v1/topics", "/v1/topics/{topic}"):
        _adapt_topic_body(case.body)
    if isinstance(case.body, dict) and path.startswith("/v1/groups/"):
        _adapt_group_body(case.body)
    key = case.headers.get("Idempotency-Key") if case.headers else None
    if isinstance(key, str) and VALID_IDEMPOTENCY_KEY.fullmatch(key):
        case.headers["Idempotency-Key"] = f"{key[:200]}-{next(_unique)}"


def _adapt_path(params: dict[str, Any] | None, *, topic_admin: bool) -> None:
    """Mostly existing topics and partitions 0..3 (so 3 misses on both fixture topics)."""
    if not params:
        return
    if "topic" in params:
        pool = SCRATCH_TOPICS if topic_admin else FIXTURE_TOPICS
        params["topic"] = _pick_topic(params["topic"], pool)
    if "partition" in params:
        params["partition"] = _fold(params["partition"], 4)
    if "group" in params:
        params["group"] = _pick_topic(params["group"], (GROUP,))
    if "member" in params and MEMBERS:
        params["member"] = _pick_topic(params["member"], tuple(MEMBERS))
    if "cluster_id" in params and CLUSTER_IDS:
        params["cluster_id"] = _pick_topic(params["cluster_id"], tuple(CLUSTER_IDS))


def _adapt_group_body(body: dict[str, Any]) -> None:
    """Joins and commits name the fixture topics (mostly); members join with long sessions."""
    if isinstance(body.get("topics"), list):
        body["topics"] = [_pick_topic(t, FIXTURE_TOPICS) for t in body["topics"]]
    if "topic" in body:
        body["topic"] = _pick_topic(body["topic"], FIXTURE_TOPICS)
    offsets = body.get("offsets")
    for item in offsets if isinstance(offsets, list) else []:
        if isinstance(item, dict) and "topic" in item:
            item["topic"] = _pick_topic(item["topic"], FIXTURE_TOPICS)
            item["partition"] = _fold(item.get("partition"), 4)
            item["offset"] = _fold(item.get("offset"), 16)


def _adapt_fetch(case: Case) -> None:
    """Offsets around the seeded data, short long-polls and a rotating Accept."""
    query = case.query if case.query is not None else {}
    if "offset" in query:
        query["offset"] = _fold(query["offset"], 16)
    query["timeout_ms"] = _fold(query.get("timeout_ms", 0), MAX_FETCH_WAIT_MS)
    case.query = query
    case.headers["Accept"] = FETCH_ACCEPTS[next(_unique) % len(FETCH_ACCEPTS)]


def _adapt_topic_body(body: dict[str, Any]) -> None:
    """Few partitions per created or grown topic (each partition holds file descriptors)."""
    if "partitions" in body:
        body["partitions"] = _fold(body["partitions"], MAX_CREATED_PARTITIONS, 1)


# -- the gateway process ------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"^sluice listening on (http://\S+:(\d+))$")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
READY_ATTEMPTS = 100
READY_BACKOFF_S = 0.05


@dataclass
class Server:
    """A running gateway process and where it listens."""

    process: subprocess.Popen[bytes]
    url: str
    data_dir: Path
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server's stderr, for failure messages."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> int:
        """SIGTERM, then wait for the exit code (killing it only if it hangs)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the gateway ignored SIGTERM\n{self.log_tail()}") from None
        finally:
            if self.process.stdout is not None:
                self.process.stdout.close()


def _read_listening_line(process: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The URL from the server's `sluice listening on ...` stdout line, within `timeout_s`."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    pending = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the gateway did not print its listening line in time")
            if not selector.select(remaining):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the gateway exited early with {process.wait()}")
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                match = LISTENING.match(line.decode(errors="replace").strip())
                if match:
                    return match.group(1)


def _wait_ready(url: str) -> None:
    """Readiness probe: GET /readyz until 200, a bounded number of times."""
    with httpx.Client(base_url=url, timeout=5.0) as client:
        for _ in range(READY_ATTEMPTS):
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(READY_BACKOFF_S)
    raise TimeoutError(f"{url}/readyz never answered 200")


def start_server(data_dir: Path, preexec: Callable[[], None] | None = None) -> Server:
    """Start `python -m gateway --data-dir D --port 0` and wait until it is ready."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"{data_dir.name}.stderr.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--data-dir", str(data_dir), "--port", "0"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=preexec,
        )
    server = Server(process, "", data_dir, log_path)
    try:
        server.url = _read_listening_line(process, START_TIMEOUT_S)
        _wait_ready(server.url)
    except BaseException:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
        raise
    return server


def limit_open_files(limit: int) -> Callable[[], None]:
    """A preexec_fn that lowers RLIMIT_NOFILE in the child."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return apply


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One gateway for the module; it must exit 0 on SIGTERM at the end."""
    running = start_server(tmp_path_factory.mktemp("contract") / "data")
    yield running
    code = running.stop()
    assert code == 0, f"the gateway exited {code} after SIGTERM\n{running.log_tail()}"


# -- seeding -------------------------------------------------------------------------------


def _seed_topics(server: Server) -> None:
    """Create the fixture and scratch topics and give the fixture partitions some records."""
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        topics = [(ONE, 1), (THREE, 3), (SAMPLES, 1)] + [(t, 1) for t in SCRATCH_TOPICS]
        for name, partitions in topics:
            answer = client.post("/v1/topics", json={"name": name, "partitions": partitions})
            assert answer.status_code == 201, answer.text
        for name, partitions in [(ONE, 1), (THREE, 3), (SAMPLES, 1)]:
            for partition in range(partitions):
                _produce_samples(client, name, partition)


def _seed_group(server: Server) -> None:
    """GROUP with two members on the fixture topics, for generated group requests to hit."""
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        for _ in range(2):
            answer = client.post(
                f"/v1/groups/{GROUP}/members",
                json={"topics": list(FIXTURE_TOPICS), "session_timeout_ms": 1_800_000},
            )
            assert answer.status_code == 201, answer.text
            MEMBERS.append(answer.json()["member_id"])


def _produce_samples(client: httpx.Client, topic: str, partition: int) -> None:
    """JSON values, a tombstone, raw bytes and non-UTF-8 keys and headers, in every format."""
    url = f"/v1/topics/{topic}/partitions/{partition}/records"
    records = [
        {"key": "k1", "value": {"n": 1, "tags": ["a", "b"]}, "headers": {"h": "v", "n": None}},
        {"key": "k1", "value": None},
        {"value": "plain text"},
        {"value": base64.b64encode(b"\xff\x00raw").decode(), "value_encoding": "base64"},
        {"key": base64.b64encode(b"\xfe\xff").decode(), "key_encoding": "base64", "value": 7},
    ]
    assert client.post(url, json={"records": records}).status_code == 200
    ndjson = b'{"line": 1}\n\n[1, 2]\n"three"\n'
    answer = client.post(
        url, content=ndjson, headers={"Content-Type": NDJSON}, params={"key": "nd"}
    )
    assert answer.status_code == 200, answer.text
    batch = fmt.encode_batch(
        [
            fmt.RecordInput(b"\xff\xfe", b"\x00\x01", [("bin", b"\xff"), ("txt", b"ok")], None),
            fmt.RecordInput(b"utf8", b'{"json": true}', [], 1_700_000_000_000),
            fmt.RecordInput(None, None, [], None),
        ]
    )
    answer = client.post(url, content=bytes(batch), headers={"Content-Type": RECORD_BATCH})
    assert answer.status_code == 200, answer.text


@pytest.fixture(scope="module")
def live(server: Server) -> Server:
    """The module's gateway, with its topics created and seeded."""
    _seed_topics(server)
    _seed_group(server)
    CLUSTER_IDS.append(httpx.get(f"{server.url}/v3/clusters").json()["data"][0]["cluster_id"])
    return server


@pytest.fixture(scope="module")
def session() -> requests.Session:
    """One keep-alive HTTP session for every generated request.

    Its default headers are cleared: schemathesis gives session headers priority over the
    case's, and requests' default `Accept: */*` would hide the Accept that _adapt chooses.
    """
    http = requests.Session()
    http.headers.clear()
    return http


@schema.parametrize()
def test_contract(case: Case, live: Server, session: requests.Session) -> None:
    """Every operation: no 5xx, and status, content type, headers and body match the spec."""
    _adapt(case)
    case.call_and_validate(base_url=live.url, session=session, checks=CHECKS, timeout=30)


def test_openapi_yaml_is_served_verbatim(live: Server) -> None:
    """GET /openapi.yaml answers the file, byte for byte, as application/yaml."""
    answer = httpx.get(f"{live.url}/openapi.yaml", timeout=10.0)
    assert answer.status_code == 200
    assert answer.headers["content-type"].split(";")[0] == "application/yaml"
    assert answer.content == Path(SPEC).read_bytes()


@pytest.mark.parametrize(
    ("params", "headers", "status"),
    [
        ({"offset": "earliest", "max_events": "1"}, {"Accept": "text/event-stream"}, 200),
        ({"cursor": "0-x"}, {"Accept": "text/event-stream"}, 400),
        ({}, {"Accept": "text/event-stream", "Last-Event-ID": "99-0"}, 400),
        ({"partitions": "7"}, {"Accept": "text/event-stream"}, 404),
        ({}, {"Accept": "application/json"}, 406),
    ],
)
def test_event_stream_answers_conform(
    live: Server, params: dict[str, str], headers: dict[str, str], status: int
) -> None:
    """The event stream's answer (a stream ended by max_events) and its refusals."""
    operation = FULL_SCHEMA["/v1/topics/{topic}/events"]["GET"]
    url = f"{live.url}/v1/topics/{SAMPLES}/events"
    answer = requests.get(url, params=params, headers=headers, timeout=10)
    assert answer.status_code == status, answer.text
    operation.validate_response(answer)
    if status == 200:
        assert answer.headers["content-type"] == "text/event-stream"
        assert b"event: record\n" in answer.content


@pytest.mark.parametrize("accept", ["application/json", NDJSON, RECORD_BATCH])
def test_fetch_formats_conform(live: Server, accept: str) -> None:
    """Seeded records (JSON, tombstones, raw bytes) conform in each fetch format."""
    operation = schema["/v1/topics/{topic}/partitions/{partition}/records"]["GET"]
    url = f"{live.url}/v1/topics/{SAMPLES}/partitions/0/records"
    params = {"offset": "earliest", "timeout_ms": "0"}
    answer = requests.get(url, params=params, headers={"Accept": accept}, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].split(";")[0] == accept
    assert answer.content
    operation.validate_response(answer)
    if accept == "application/json":
        records = answer.json()["records"]
        assert records[0]["value"] == {"n": 1, "tags": ["a", "b"]}
        assert records[1]["value"] is None
        assert records[3]["value_encoding"] == "base64"
        assert base64.b64decode(records[3]["value"]) == b"\xff\x00raw"
        assert records[4]["key_encoding"] == "base64"


def test_decoded_fetch_conforms(live: Server) -> None:
    """`decode_values=schema`: JSON values as they are, raw bytes outside the wire format as
    stored with the reason."""
    operation = schema["/v1/topics/{topic}/partitions/{partition}/records"]["GET"]
    url = f"{live.url}/v1/topics/{SAMPLES}/partitions/0/records"
    params = {"offset": "earliest", "timeout_ms": "0", "decode_values": "schema"}
    answer = requests.get(url, params=params, timeout=10)
    assert answer.status_code == 200, answer.text
    operation.validate_response(answer)
    records = answer.json()["records"]
    assert records[0]["value"] == {"n": 1, "tags": ["a", "b"]}
    assert "value_schema_error" not in records[0]
    assert records[3]["value_schema_error"].startswith("not in the wire format")


def test_group_answers_conform(live: Server) -> None:
    """A member's join, fetch (JSON, tombstones, raw bytes), commit and the group views."""
    base = f"{live.url}/v1/groups/contract-samples-group"
    joined = requests.post(
        f"{base}/members",
        json={"topics": [SAMPLES], "auto_offset_reset": "earliest", "auto_commit": False},
        timeout=10,
    )
    schema["/v1/groups/{group}/members"]["POST"].validate_response(joined)
    member = joined.json()["member_id"]
    fetched = requests.get(f"{base}/members/{member}/records", params={"timeout_ms": 0}, timeout=10)
    schema["/v1/groups/{group}/members/{member}/records"]["GET"].validate_response(fetched)
    records = fetched.json()["records"]
    assert records[0]["topic"] == SAMPLES
    assert records[0]["value"] == {"n": 1, "tags": ["a", "b"]}
    assert records[3]["value_encoding"] == "base64"
    committed = requests.post(f"{base}/members/{member}/commit", timeout=10)
    schema["/v1/groups/{group}/members/{member}/commit"]["POST"].validate_response(committed)
    assert committed.json()["offsets"] == [
        {"topic": SAMPLES, "partition": 0, "offset": records[-1]["offset"] + 1}
    ]
    described = requests.get(base, timeout=10)
    schema["/v1/groups/{group}"]["GET"].validate_response(described)
    assert described.json()["state"] == "Stable"
    listed = requests.get(f"{live.url}/v1/groups", timeout=10)
    schema["/v1/groups"]["GET"].validate_response(listed)
    refused = requests.put(f"{base}/offsets", json={"topic": SAMPLES, "to": 0}, timeout=10)
    schema["/v1/groups/{group}/offsets"]["PUT"].validate_response(refused)
    assert refused.status_code == 409
    assert requests.delete(f"{base}/members/{member}", timeout=10).status_code == 204
    reset = requests.put(f"{base}/offsets", json={"topic": SAMPLES, "to": "earliest"}, timeout=10)
    schema["/v1/groups/{group}/offsets"]["PUT"].validate_response(reset)
    assert reset.json()["offsets"][0]["offset"] == 0


def test_share_group_answers_conform(live: Server) -> None:
    """A share group's configs, join, acquire (JSON and NDJSON), acknowledge (by tokens and by
    ranges), views, reset."""
    base = f"{live.url}/v1/share-groups/contract-share-group"
    configs: dict[str, Any] = {
        "configs": {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": 3}
    }
    configured = requests.put(f"{base}/configs", json=configs, timeout=10)
    schema["/v1/share-groups/{group}/configs"]["PUT"].validate_response(configured)
    joined = requests.post(f"{base}/members", json={"topics": [SAMPLES]}, timeout=10)
    schema["/v1/share-groups/{group}/members"]["POST"].validate_response(joined)
    member = joined.json()["member_id"]
    acquire = f"{base}/members/{member}/acquire"
    got = requests.post(acquire, params={"max_records": 4}, timeout=10)
    schema["/v1/share-groups/{group}/members/{member}/acquire"]["POST"].validate_response(got)
    records = got.json()["records"]
    assert records[0]["value"] == {"n": 1, "tags": ["a", "b"]}
    assert records[3]["value_encoding"] == "base64"
    lines = requests.post(
        acquire, params={"max_records": 2}, headers={"Accept": NDJSON}, timeout=10
    )
    schema["/v1/share-groups/{group}/members/{member}/acquire"]["POST"].validate_response(lines)
    tokens = [r["token"] for r in records] + ["nonsense"]
    kinds = ["accept", "release", "reject", "renew", "accept"]
    acks: list[dict[str, Any]] = [
        {"token": t, "type": k} for t, k in zip(tokens, kinds, strict=True)
    ]
    ranges = [json.loads(line) for line in lines.content.splitlines()]
    ranges.append({"topic": SAMPLES, "partition": 0, "offset": 10**9})  # never acquired
    acks += [
        {
            "topic": r["topic"],
            "partition": r["partition"],
            "first_offset": r["offset"],
            "last_offset": r["offset"],
            "type": "accept",
        }
        for r in ranges
    ]
    acked = requests.post(
        f"{base}/members/{member}/acknowledge", json={"acknowledgements": acks}, timeout=10
    )
    schema["/v1/share-groups/{group}/members/{member}/acknowledge"]["POST"].validate_response(acked)
    statuses = [r["status"] for r in acked.json()["results"]]
    assert statuses == ["ok"] * 4 + ["refused"] + ["ok"] * (len(ranges) - 1) + ["refused"]
    described = requests.get(base, timeout=10)
    schema["/v1/share-groups/{group}"]["GET"].validate_response(described)
    listed = requests.get(f"{live.url}/v1/share-groups", timeout=10)
    schema["/v1/share-groups"]["GET"].validate_response(listed)
    refused = requests.put(f"{base}/offsets", json={"topic": SAMPLES, "to": 0}, timeout=10)
    schema["/v1/share-groups/{group}/offsets"]["PUT"].validate_response(refused)
    assert refused.status_code == 409
    left = requests.delete(f"{base}/members/{member}", timeout=10)
    schema["/v1/share-groups/{group}/members/{member}"]["DELETE"].validate_response(left)
    reset = requests.put(f"{base}/offsets", json={"topic": SAMPLES, "to": "earliest"}, timeout=10)
    schema["/v1/share-groups/{group}/offsets"]["PUT"].validate_response(reset)
    assert requests.delete(base, timeout=10).status_code == 204


def test_problem_members_conform(live: Server) -> None:
    """Problems with extra members (index, pointer, line, byte, offsets) conform."""
    base = f"{live.url}/v1/topics/{SAMPLES}/partitions/0"
    produce = schema["/v1/topics/{topic}/partitions/{partition}/records"]["POST"]
    fetch = schema["/v1/topics/{topic}/partitions/{partition}/records"]["GET"]
    bad_json = {"records": [{"value": 1}, {"value": 2, "timestamp": -1}]}
    bad: list[tuple[bytes, str, str]] = [
        (json.dumps(bad_json).encode(), "application/json", "index"),
        (b'1\n{"broken"\n', NDJSON, "line"),
        (b"\x00" * 70, RECORD_BATCH, "byte"),
    ]
    for content, media, member in bad:
        answer = requests.post(
            f"{base}/records", data=content, headers={"Content-Type": media}, timeout=10
        )
        assert answer.status_code == 400, answer.text
        assert member in answer.json()
        produce.validate_response(answer)
    answer = requests.get(f"{base}/records", params={"offset": "999999"}, timeout=10)
    assert answer.status_code == 416
    assert {"offset", "log_start_offset", "log_end_offset"} <= answer.json().keys()
    fetch.validate_response(answer)


def test_idempotent_replay_and_reuse_conform(live: Server) -> None:
    """A replay answers the first result; reusing the key for another body answers 422."""
    operation = schema["/v1/topics/{topic}/records"]["POST"]
    url = f"{live.url}/v1/topics/{SAMPLES}/records"
    headers = {"Idempotency-Key": f"contract-replay-{next(_unique)}"}
    body: dict[str, Any] = {"records": [{"key": "a", "value": 1}, {"key": "b", "value": 2}]}
    first = requests.post(url, json=body, headers=headers, timeout=10)
    replay = requests.post(url, json=body, headers=headers, timeout=10)
    other: dict[str, Any] = {"records": [{"value": 3}]}
    reused = requests.post(url, json=other, headers=headers, timeout=10)
    assert first.status_code == replay.status_code == 200, first.text
    assert replay.json() == first.json()
    assert reused.status_code == 422, reused.text
    assert reused.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    for answer in (first, replay, reused):
        operation.validate_response(answer)


# -- regressions: inputs that once answered 500 or broke a response -------------------------


def test_non_ascii_digit_partition_is_unknown(live: Server) -> None:
    """A partition segment like '²' (str.isdigit() but not int()) answers 404."""
    answer = httpx.get(f"{live.url}/v1/topics/{ONE}/partitions/%C2%B2/records", timeout=10.0)
    assert answer.status_code == 404, answer.text
    assert answer.json()["code"] == "UNKNOWN_PARTITION"


def test_binary_batch_cannot_claim_json_values(live: Server) -> None:
    """A client batch flagged VALUES_JSON_MASK is refused, so JSON fetches stay JSON."""
    operation = schema["/v1/topics/{topic}/partitions/{partition}/records"]["POST"]
    with httpx.Client(base_url=live.url, timeout=10.0) as client:
        assert client.post("/v1/topics", json={"name": "contract-spoof"}).status_code == 201
        batch = fmt.encode_batch([fmt.RecordInput(b"k", b"not json {", [], None)])
        header = fmt.read_header(batch)
        fmt.set_attributes(batch, 0, header, header.attributes | fmt.VALUES_JSON_MASK)
        url = "/v1/topics/contract-spoof/partitions/0/records"
        answer = client.post(url, content=bytes(batch), headers={"Content-Type": RECORD_BATCH})
        assert answer.status_code == 400, answer.text
        assert answer.json()["code"] == "INVALID_RECORD"
    operation.validate_response(answer)


def test_longest_topic_names_can_be_created(live: Server) -> None:
    """Kafka's longest topic name (249 characters) can be created."""
    operation = schema["/v1/topics"]["POST"]
    answer = requests.post(f"{live.url}/v1/topics", json={"name": "n" * 249}, timeout=10)
    assert answer.status_code == 201, answer.text
    operation.validate_response(answer)


@pytest.mark.parametrize("offset", ["-9223372036854775809", "18446744073709551616"])
def test_offsets_beyond_64_bits_are_invalid(live: Server, offset: str) -> None:
    """An offset beyond 64 bits answers 400 problem+json, not a plain-text 500."""
    operation = schema["/v1/topics/{topic}/partitions/{partition}/records"]["GET"]
    url = f"{live.url}/v1/topics/{ONE}/partitions/0/records"
    answer = requests.get(url, params={"offset": offset, "timeout_ms": "0"}, timeout=10)
    assert answer.status_code == 400, answer.text
    operation.validate_response(answer)


# -- gateway bugs found while writing the contract (reported to the lead) ------------------


def test_cluster_reports_the_bound_port(live: Server) -> None:
    """The node's URL in /v1/cluster names the port the server listens on (started on port 0)."""
    port = int(live.url.rsplit(":", 1)[1])
    nodes = httpx.get(f"{live.url}/v1/cluster", timeout=10.0).json()["nodes"]
    assert nodes[0]["url"].endswith(f":{port}")


def test_out_of_file_descriptors_is_not_a_server_error(tmp_path: Path) -> None:
    """Creating more partitions than RLIMIT_NOFILE allows must answer a problem below 500."""
    server = start_server(tmp_path / "data", preexec=limit_open_files(256))
    try:
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            answer = client.post("/v1/topics", json={"name": "many", "partitions": 400})
        assert answer.status_code < 500, answer.text
    finally:
        assert server.stop() == 0, server.log_tail()


def test_a_log_that_outgrows_the_file_descriptors_is_not_a_server_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One partition rolling tiny segments until descriptors run out
    answered 500 from index.flush; the answer is 503 STORAGE_ERROR, and what was appended
    before stays readable. Closed segments now share a bounded file cache, so the descriptors
    run out only with a cache configured past the limit."""
    monkeypatch.setenv("SLUICE_FILE_CACHE_SIZE", "100000")
    server = start_server(tmp_path / "data", preexec=limit_open_files(256))
    try:
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            created = client.post(
                "/v1/topics", json={"name": "tiny", "configs": {"segment.bytes": 16384}}
            )
            assert created.status_code == 201, created.text
            value = "x" * 4000
            refused = None
            acknowledged = 0
            for _ in range(400):
                answer = client.post(
                    "/v1/topics/tiny/records", json={"records": [{"value": value}] * 4}
                )
                if answer.status_code != 200:
                    refused = answer
                    break
                acknowledged += 4
            assert refused is not None, "the descriptors never ran out"
            assert refused.status_code == 503, refused.text
            assert refused.json()["code"] == "STORAGE_ERROR"
            assert "nothing was appended" in refused.json()["detail"]
            last = client.get(
                "/v1/topics/tiny/partitions/0/offsets", params={"timestamp": "latest"}
            ).json()
            assert last["offset"] == acknowledged
    finally:
        server.process.kill()
        server.process.wait()
