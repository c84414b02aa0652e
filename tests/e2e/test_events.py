"""Server-Sent Events against real `sluice serve` processes: curl over HTTP/1.1 and h2c with a
browser's Origin, one HTTP/2 connection carrying a stream and the produces it shows, a topic
whose partitions two workers lead, a group's stream relayed from the worker that does not
coordinate the group, and a shutdown with streams open."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from engine.offsets_topic import OFFSETS_TOPIC, partition_for
from tests.e2e.conftest import Server, start_server
from tests.e2e.test_workers import Supervisor, create_topic, on_worker, start_supervisor

APP = "https://app.example.com"
SSE = {"Accept": "text/event-stream"}


@pytest.fixture(scope="module")
def cors_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("events") / "data", "--cors-origins", APP)
    yield running
    if running.process.poll() is None:
        assert running.stop() == 0


def events_of(text: str) -> list[dict[str, str]]:
    """The events of a stream's text, as EventSource parses them (comments left out)."""
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":") or not line:
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            fields[name] = f"{fields[name]}\n{value}" if name in fields else value
        if "data" in fields:
            out.append(fields)
    return out


@pytest.mark.parametrize("flag", ["--http1.1", "--http2-prior-knowledge"])
def test_curl_follows_a_topic_with_a_browsers_origin(cors_server: Server, flag: str) -> None:
    url = cors_server.url
    topic = f"curl{flag.count('2')}"
    assert httpx.post(f"{url}/v1/topics", json={"name": topic}).status_code == 201
    records = {"records": [{"key": f"k{n}", "value": {"n": n}} for n in range(3)]}
    assert httpx.post(f"{url}/v1/topics/{topic}/records", json=records).status_code == 200
    done = subprocess.run(
        ["curl", "-sN", "-D", "-", flag, "-H", "Accept: text/event-stream", "-H",
         f"Origin: {APP}", f"{url}/v1/topics/{topic}/events?offset=earliest&max_events=3"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    head, _, body = done.stdout.partition("\n\n")  # text mode: CRLF read as LF
    headers = {k.lower(): v for k, v in (ln.split(": ", 1) for ln in head.splitlines()[1:])}
    assert headers["content-type"] == "text/event-stream"
    assert headers["access-control-allow-origin"] == APP
    got = events_of(body)
    assert [orjson.loads(e["data"])["value"] for e in got] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert [e["id"] for e in got] == ["0-1", "0-2", "0-3"]


def test_one_http2_connection_carries_a_stream_and_the_produces_it_shows(
    cors_server: Server,
) -> None:
    url = cors_server.url
    with httpx.Client(base_url=url, http1=False, http2=True, timeout=30) as http:
        assert http.post("/v1/topics", json={"name": "h2", "partitions": 2}).status_code == 201
        with http.stream("GET", "/v1/topics/h2/events", headers=SSE) as stream:
            assert stream.http_version == "HTTP/2"
            lines = stream.iter_lines()
            assert next(lines) == "retry: 1000"
            for n in range(4):  # on the same connection, while the stream is open
                answer = http.post(
                    "/v1/topics/h2/records", json={"records": [{"key": f"k{n}", "value": n}]}
                )
                assert answer.status_code == 200, answer.text
            seen = []
            for line in lines:
                if line.startswith("data: "):
                    seen.append(orjson.loads(line[6:])["value"])
                    if len(seen) == 4:
                        break
    assert sorted(seen) == [0, 1, 2, 3]


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    supervisor = start_supervisor(tmp_path_factory.mktemp("event-workers") / "data")
    yield supervisor
    if supervisor.process.poll() is None:
        assert supervisor.stop() == 0


def test_a_stream_on_one_worker_reads_the_partitions_the_other_leads(
    workers: Supervisor,
) -> None:
    first = on_worker(workers.url, 0)
    leaders = create_topic(first, "split")
    for partition in leaders:
        body = {"records": [{"value": f"p{partition}-{n}"} for n in range(3)]}
        answer = first.post(f"/v1/topics/split/partitions/{partition}/records", json=body)
        assert answer.status_code == 200, answer.text
    with first.stream(
        "GET", "/v1/topics/split/events", params={"offset": "earliest"}, headers=SSE
    ) as stream:
        seen: dict[int, list[str]] = {0: [], 1: []}
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                record = orjson.loads(line[6:])
                seen[record["partition"]].append(record["value"])
                if sum(map(len, seen.values())) == 6:
                    break
        other = next(p for p, leader in leaders.items() if leader == 1)
        live = {"records": [{"value": "live"}]}  # then live, on the other worker's partition
        answer = first.post(f"/v1/topics/split/partitions/{other}/records", json=live)
        assert answer.status_code == 200, answer.text
        for line in lines:
            if line.startswith("data: "):
                assert orjson.loads(line[6:])["value"] == "live"
                break
    first.close()
    assert seen == {p: [f"p{p}-{n}" for n in range(3)] for p in (0, 1)}


def coordinated_by(http: httpx.Client, worker: int) -> str:
    """A group name whose offsets partition `worker` leads (the group's coordinator)."""
    answer = http.get(f"/v1/topics/{OFFSETS_TOPIC}")
    assert answer.status_code == 200, answer.text
    partitions = answer.json()["partitions"]
    leaders = {p["partition"]: p["leader"] for p in partitions}
    return next(
        name
        for name in (f"g{n}" for n in range(1000))
        if leaders[partition_for(name, len(partitions))] == worker
    )


def test_a_group_stream_is_relayed_to_the_worker_that_coordinates_the_group(
    workers: Supervisor,
) -> None:
    """Asked of worker 0, a group worker 1 coordinates: the stream runs at worker 1 and is
    passed on; its member leaves when the client goes, having committed what it sent."""
    first, second = on_worker(workers.url, 0), on_worker(workers.url, 1)
    create_topic(first, "grouped")
    group = coordinated_by(first, 1)
    for partition in (0, 1):
        body = {"records": [{"value": f"p{partition}-{n}"} for n in range(3)]}
        answer = first.post(f"/v1/topics/grouped/partitions/{partition}/records", json=body)
        assert answer.status_code == 200, answer.text
    query = {"group": group, "offset": "earliest", "max_events": "6"}
    with first.stream("GET", "/v1/topics/grouped/events", params=query, headers=SSE) as stream:
        assert stream.status_code == 200
        got = events_of(stream.read().decode())
    assert got[0]["event"] == "assignment"
    assert orjson.loads(got[0]["data"])["partitions"] == [0, 1]
    values = sorted(orjson.loads(e["data"])["value"] for e in got[1:])
    assert values == sorted(f"p{p}-{n}" for p in (0, 1) for n in range(3))
    deadline = time.monotonic() + 30
    while True:  # the member leaves as its stream ends (a condition, polled with a deadline)
        described = second.get(f"/v1/groups/{group}").json()
        if not described["members"]:
            break
        assert time.monotonic() < deadline, described
    committed = {r["partition"]: r["committed_offset"] for r in described["partitions"]}
    assert committed == {0: 3, 1: 3}
    bad = first.get("/v1/topics/grouped/events", params={"group": group, "cursor": "0-1"},
                    headers=SSE)  # fmt: skip
    assert bad.status_code == 400
    assert bad.headers["content-type"] == "application/problem+json"
    first.close()
    second.close()


def test_a_shutdown_ends_open_streams_with_a_problem_event(tmp_path: Path) -> None:
    running = start_server(tmp_path / "data")
    assert httpx.post(f"{running.url}/v1/topics", json={"name": "t"}).status_code == 201
    with (
        httpx.Client(timeout=30) as http,
        http.stream("GET", f"{running.url}/v1/topics/t/events", headers=SSE) as stream,
    ):
        lines = stream.iter_lines()
        assert next(lines) == "retry: 1000"
        started = time.monotonic()
        running.process.send_signal(signal.SIGTERM)
        text = "\n".join(lines)
    assert running.process.wait(timeout=30) == 0
    assert time.monotonic() - started < 10
    [event] = events_of(text)
    assert event["event"] == "problem"
    assert orjson.loads(event["data"])["code"] == "SHUTTING_DOWN"
