"""`sluice serve --workers 2`: one port, two worker processes and their etcd, started for real.

The kernel spreads connections over the workers (SO_REUSEPORT), so each test opens
connections until it has one on each worker (`/readyz` names the worker that answered), then
checks that every feature behaves as on one process whichever worker a request lands on.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.batch import RecordInput, encode_batch
from tests.e2e.conftest import REPO, until
from tests.tls import write_self_signed

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("etcd", "curl")),
    reason="needs etcd (etcd-server) and curl",
)

RECORD_BATCH = "application/vnd.sluice.record-batch"
WORKER_OPTIONS = ("--workers", "2", "--offsets-topic-partitions", "4")


@dataclass
class Supervisor:
    """A running `sluice serve --workers 2` and the log its processes share."""

    process: subprocess.Popen[str]
    url: str
    data_dir: Path
    log: Path

    def descendants(self) -> dict[int, str]:
        """pid -> command line of every live process under the supervisor (workers, etcd)."""
        parents = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    parents[int(entry.name)] = int(stat[1])
                except OSError:
                    continue
        found, todo = {}, [self.process.pid]
        while todo:
            parent = todo.pop()
            for pid, ppid in parents.items():
                if ppid == parent:
                    try:
                        found[pid] = (Path(f"/proc/{pid}/cmdline").read_bytes()).decode()
                    except OSError:
                        continue
                    todo.append(pid)
        return found

    def worker_pid(self, node_id: int) -> int:
        for pid, command in self.descendants().items():
            args = command.split("\0")
            if "--supervised" in args and args[args.index("--node-id") + 1] == str(node_id):
                return pid
        raise AssertionError(f"no worker {node_id} under the supervisor")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


def start_supervisor(data_dir: Path, *extra: str) -> Supervisor:
    log = data_dir.parent / f"{data_dir.name}.log"
    with log.open("a") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--data-dir", str(data_dir), "--port", "0",
             *WORKER_OPTIONS, *extra],
            cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("sluice listening on "):
        process.kill()
        raise AssertionError(f"did not start: {line!r}\n{log.read_text()[-3000:]}")
    return Supervisor(process, line.split()[-1], data_dir, log)


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    supervisor = start_supervisor(tmp_path_factory.mktemp("workers") / "data")
    yield supervisor
    if supervisor.process.poll() is None:
        assert supervisor.stop() == 0


def on_worker(url: str, worker: int, **options: Any) -> httpx.Client:
    """A client whose (kept-alive) connection landed on `worker`."""
    for _ in range(200):
        client = httpx.Client(base_url=url, timeout=30, **options)
        if client.get("/readyz").json()["worker"] == worker:
            return client
        client.close()
    raise AssertionError(f"200 connections and none on worker {worker}")


@pytest.fixture
def pair(workers: Supervisor) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """A connection on worker 0 and one on worker 1."""
    first, second = on_worker(workers.url, 0), on_worker(workers.url, 1)
    yield first, second
    first.close()
    second.close()


def create_topic(http: httpx.Client, name: str, partitions: int = 2) -> dict[int, int]:
    """Create the topic; its partitions' leaders (both workers lead some)."""
    answer = http.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert answer.status_code == 201, answer.text
    leaders = {p["partition"]: p["leader"] for p in answer.json()["partitions"]}
    assert set(leaders.values()) == {0, 1}, leaders
    return leaders


def values(http: httpx.Client, topic: str, partition: int) -> list[Any]:
    answer = http.get(
        f"/v1/topics/{topic}/partitions/{partition}/records",
        params={"offset": 0, "max_records": 1000, "timeout_ms": 0},
    )
    assert answer.status_code == 200, answer.text
    return [r["value"] for r in answer.json()["records"]]


def metric(text: str, name: str, **labels: str) -> float:
    selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{re.escape(name)}{re.escape('{' + selector + '}') if labels else ''} (\S+)$"
    found = re.search(pattern, text, re.M)
    assert found is not None, f"{name} {labels} not in /metrics"
    return float(found.group(1))


def test_topic_admin_produce_and_fetch_through_either_worker(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    zero, one = pair
    leaders = create_topic(zero, "admin")
    assert one.get("/v1/topics/admin").json()["name"] == "admin"
    assert {t["name"] for t in one.get("/v1/topics").json()["topics"]} >= {"admin"}
    patched = one.patch("/v1/topics/admin", json={"configs": {"retention.ms": 60000}})
    assert patched.status_code == 200 and patched.json()["overrides"] == {"retention.ms": 60000}
    sent: dict[int, list[Any]] = {0: [], 1: []}
    for n, (client, acks) in enumerate([(zero, "1"), (one, "all"), (zero, "all"), (one, "1")]):
        for partition in leaders:  # each partition through its leader and through the other
            answer = client.post(
                f"/v1/topics/admin/partitions/{partition}/records",
                params={"acks": acks},
                json={"records": [{"value": {"n": n, "p": partition}}]},
            )
            assert answer.status_code == 200, answer.text
            sent[partition].append({"n": n, "p": partition})
        batch = encode_batch([RecordInput(None, b'"bin-%d"' % n)])
        answer = client.post(
            "/v1/topics/admin/partitions/1/records",
            params={"acks": acks},
            content=bytes(batch),
            headers={"Content-Type": RECORD_BATCH},
        )
        assert answer.status_code == 200, answer.text
        sent[1].append(f"bin-{n}")
    for client in pair:
        for partition in leaders:
            assert values(client, "admin", partition) == sent[partition]
        described = client.get("/v1/topics/admin").json()["partitions"]
        assert [p["high_watermark"] for p in described] == [len(sent[0]), len(sent[1])]
    binary = one.get(
        "/v1/topics/admin/partitions/0/records",
        params={"offset": 0, "timeout_ms": 0},
        headers={"Accept": RECORD_BATCH},
    )
    assert binary.status_code == 200 and binary.headers["Sluice-Next-Offset"] == "4"
    assert zero.delete("/v1/topics/admin").status_code == 204
    assert one.get("/v1/topics/admin").status_code == 404


def test_an_idempotent_retry_on_the_other_worker_appends_nothing(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    zero, one = pair
    create_topic(zero, "retries", partitions=4)
    keyed = {"records": [{"key": f"k{i}", "value": i} for i in range(20)]}  # every partition
    keyless = {"records": [{"value": "once"}]}
    for body in (keyed, keyless):
        for first, retry in ((zero, one), (one, zero)):
            key = f"{len(body['records'])}-{id(first)}"
            headers = {"Idempotency-Key": key}
            answer = first.post("/v1/topics/retries/records", json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            again = retry.post("/v1/topics/retries/records", json=body, headers=headers)
            assert again.status_code == 200, again.text
            assert again.json() == answer.json()
    stored = [v for p in range(4) for v in values(zero, "retries", p)]
    assert sorted(v for v in stored if v != "once") == sorted(list(range(20)) * 2)
    assert stored.count("once") == 2  # one per key: each retry appended nothing


# -- a JSON or NDJSON fetch of a partition the other worker leads ---------------------------------

JSON, NDJSON = "application/json", "application/x-ndjson"
MIXED_END = 13  # the records fill_mixed writes
# (query, Accept) of fetches answered through the leader and through the other worker alike.
FETCHES: list[tuple[dict[str, Any], str | None]] = [
    ({}, None),  # the defaults: earliest, JSON
    ({"offset": "earliest", "timeout_ms": 0}, JSON),
    ({"offset": "latest", "timeout_ms": 0}, JSON),
    ({"offset": "latest", "timeout_ms": 100}, JSON),  # a long-poll that times out empty
    ({"offset": 3, "timeout_ms": 0}, JSON),  # inside a batch: the records before it skipped
    ({"offset": 6, "max_records": 2, "timeout_ms": 0}, JSON),
    ({"offset": 2, "max_records": 1, "timeout_ms": 0}, JSON),
    ({"offset": 4, "max_records": 7, "timeout_ms": 0}, JSON),  # across batches
    ({"offset": 2, "max_bytes": 1, "timeout_ms": 0}, JSON),
    ({"offset": 2, "min_bytes": 10**6, "timeout_ms": 100}, JSON),  # waits, then what is there
    ({"offset": MIXED_END, "timeout_ms": 0}, JSON),
    ({"offset": 0}, JSON),  # below the log start: 416
    ({"offset": MIXED_END + 1}, JSON),  # past the end: 416
    ({"offset": "next"}, JSON),
    ({"max_records": 0}, JSON),
    ({"timeout_ms": -1}, JSON),
    ({"offset": "earliest", "timeout_ms": 0}, NDJSON),
    ({"offset": 5, "max_records": 2, "timeout_ms": 0}, NDJSON),
    ({"offset": "latest", "timeout_ms": 100}, NDJSON),
    ({"offset": 9, "timeout_ms": 0}, f"{NDJSON};q=0.9, {JSON};q=0.5"),
    ({"offset": 9, "timeout_ms": 0}, "*/*"),
    ({"offset": 2, "timeout_ms": 0}, RECORD_BATCH),  # forwarded as it is
    ({"offset": 2, "max_records": 1, "timeout_ms": 0}, RECORD_BATCH),
    ({"offset": 2}, "text/csv"),  # 406
]


def fill_mixed(http: httpx.Client, topic: str, partition: int) -> None:
    """Records of every kind an encoder meets: JSON values with and without keys and headers,
    NDJSON, a binary batch (a key and a header that are not UTF-8, a value that is not JSON, a
    null one), base64 from JSON; then the first two deleted. MIXED_END records in all."""
    path = f"/v1/topics/{topic}/partitions/{partition}/records"
    first = [
        {"key": "k0", "value": {"n": 0}},
        {"value": [1, 2]},
        {"key": "k2", "value": "two", "headers": {"h": "v", "none": None}},
        {"value": None},
        {"key": "é", "value": 4.5},
    ]
    base64 = [
        {"value": "AAE=", "value_encoding": "base64"},
        {"key": "/w==", "key_encoding": "base64", "value": 7},
    ]
    binary = encode_batch(
        [
            RecordInput(b"\xff\xfe", b"\x00not json", [("h", b"\xff")]),
            RecordInput(None, None),
            RecordInput(b"k", b'"ok"'),
        ]
    )
    answers = [
        http.post(path, json={"records": first}),
        http.post(
            path,
            params={"key": "nd"},
            content=b'{"line": 1}\n"two"\n3\n',
            headers={"Content-Type": NDJSON},
        ),
        http.post(path, content=bytes(binary), headers={"Content-Type": RECORD_BATCH}),
        http.post(path, json={"records": base64}),
        http.post(
            f"/v1/topics/{topic}/partitions/{partition}/delete-records", json={"before_offset": 2}
        ),
    ]
    for answer in answers:
        assert answer.status_code == 200, answer.text
    assert answers[3].json()["results"][0]["base_offset"] + len(base64) == MIXED_END


def mixed_partition_of_worker_zero(http: httpx.Client, topic: str) -> str:
    """Create the topic and fill_mixed a partition worker 0 leads; that partition's records
    path."""
    leaders = create_topic(http, topic)
    partition = next(p for p, leader in leaders.items() if leader == 0)
    fill_mixed(http, topic, partition)
    return f"/v1/topics/{topic}/partitions/{partition}/records"


def as_sent(answer: httpx.Response) -> tuple[int, dict[str, str], bytes]:
    """What a fetch answered, byte for byte: status, Content-Type and Sluice-* headers, body."""
    kept = {
        name: value
        for name, value in answer.headers.items()
        if name.lower() == "content-type" or name.lower().startswith("sluice-")
    }
    return answer.status_code, kept, answer.content


def same_through_both(
    leader: httpx.Client,
    other: httpx.Client,
    path: str,
    fetches: list[tuple[dict[str, Any], str | None]],
) -> list[httpx.Response]:
    """Each fetch through the partition's leader, then through the other worker (which forwards
    it): both answers must be the same bytes. The leader's answers."""
    direct_answers = []
    for params, accept in fetches:
        headers = {} if accept is None else {"Accept": accept}
        direct = leader.get(path, params=params, headers=headers)
        forwarded = other.get(path, params=params, headers=headers)
        assert as_sent(forwarded) == as_sent(direct), (params, accept)
        direct_answers.append(direct)
    return direct_answers


def test_a_json_fetch_through_the_other_worker_answers_as_its_leader_does(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    zero, one = pair
    path = mixed_partition_of_worker_zero(zero, "encoded")
    answers = same_through_both(zero, one, path, FETCHES)
    skipped = answers[FETCHES.index(({"offset": 3, "timeout_ms": 0}, JSON))].json()
    assert [r["offset"] for r in skipped["records"]][:3] == [3, 4, 5]
    timed_out = answers[FETCHES.index(({"offset": "latest", "timeout_ms": 100}, JSON))]
    assert timed_out.json() == {
        "records": [],
        "next_offset": MIXED_END,
        "high_watermark": MIXED_END,
    }
    below = answers[FETCHES.index(({"offset": 0}, JSON))]
    assert below.status_code == 416 and below.json()["log_start_offset"] == 2
    assert {a.status_code for a in answers} == {200, 400, 406, 416}
    for elsewhere in ("encoded/partitions/7", "none/partitions/0"):  # unknown: 404
        (missing,) = same_through_both(zero, one, f"/v1/topics/{elsewhere}/records", FETCHES[:1])
        assert missing.status_code == 404


# (query, Accept, read from the leader's files by the other worker): what they hold at once is
# read there; what the leader would wait for or refuse is forwarded to it.
COLOCATED: list[tuple[dict[str, Any], str | None, bool]] = [
    ({"offset": 3, "timeout_ms": 0}, JSON, True),
    ({"offset": 4, "max_records": 7}, NDJSON, True),
    ({"offset": 2, "timeout_ms": 0}, RECORD_BATCH, True),
    ({"offset": "earliest", "max_bytes": 1}, JSON, True),
    ({"offset": MIXED_END, "timeout_ms": 0}, JSON, True),  # at the high watermark: nothing
    ({"offset": "latest", "timeout_ms": 0}, NDJSON, True),
    ({"offset": MIXED_END, "timeout_ms": 50}, JSON, False),  # a long-poll: the leader parks it
    ({"offset": "latest", "timeout_ms": 100}, JSON, False),  # a long-poll
    ({"offset": 2, "min_bytes": 10**6, "timeout_ms": 100}, JSON, False),  # would wait for more
    ({"offset": 0}, JSON, False),  # below the log start: the leader's 416
    ({"offset": MIXED_END + 1}, JSON, False),  # past the end: the leader's 416
]


def sibling_reads(http: httpx.Client) -> tuple[float, float]:
    text = http.get("/metrics").text
    name = "sluice_colocated_reads_total"
    return metric(text, name, outcome="served"), metric(text, name, outcome="forwarded")


@pytest.mark.parametrize("path_taken", ["fast routes", "application"])
def test_the_other_worker_reads_what_the_leaders_files_hold_and_forwards_the_rest(
    pair: tuple[httpx.Client, httpx.Client], path_taken: str
) -> None:
    zero, one = pair
    path = mixed_partition_of_worker_zero(zero, f"beside-{path_taken.replace(' ', '-')}")
    # A Content-Encoding (of no body) is a header the fast routes leave to the Application.
    extra = {"Content-Encoding": "identity"} if path_taken == "application" else {}
    for params, accept, read_beside in COLOCATED:
        headers = {**extra, **({} if accept is None else {"Accept": accept})}
        direct = zero.get(path, params=params, headers=headers)
        served, forwarded = sibling_reads(one)
        beside = one.get(path, params=params, headers=headers)
        assert as_sent(beside) == as_sent(direct), (params, accept)
        after = sibling_reads(one)
        assert after == ((served + 1, forwarded) if read_beside else (served, forwarded + 1)), (
            params,
            accept,
        )


def test_a_topic_deleted_and_created_again_is_read_anew_beside_its_leader(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    zero, one = pair
    leaders = create_topic(zero, "reborn")
    partition = next(p for p, leader in leaders.items() if leader == 0)
    path = f"/v1/topics/reborn/partitions/{partition}/records"
    assert zero.post(path, json={"records": [{"value": "old"}]}).status_code == 200
    assert values(one, "reborn", partition) == ["old"]
    assert zero.delete("/v1/topics/reborn").status_code == 204
    again = create_topic(zero, "reborn")
    partition = next(p for p, leader in again.items() if leader == 0)
    path = f"/v1/topics/reborn/partitions/{partition}/records"
    assert zero.post(path, json={"records": [{"value": "new"}]}).status_code == 200
    served, _ = sibling_reads(one)
    assert values(one, "reborn", partition) == ["new"]
    assert sibling_reads(one)[0] == served + 1


@pytest.mark.parametrize("poll_on_leader", [True, False])
def test_a_long_poll_on_one_worker_wakes_for_a_produce_on_the_other(
    workers: Supervisor, pair: tuple[httpx.Client, httpx.Client], poll_on_leader: bool
) -> None:
    zero, one = pair
    topic = f"poll-{poll_on_leader}"
    leaders = create_topic(zero, topic)
    partition = next(p for p, leader in leaders.items() if leader == 0)
    poller, producer = (zero, one) if poll_on_leader else (one, zero)
    result: dict[str, Any] = {}

    def poll() -> None:
        started = time.monotonic()
        answer = poller.get(
            f"/v1/topics/{topic}/partitions/{partition}/records",
            params={"offset": 0, "timeout_ms": 30000},
        )
        result["answer"], result["seconds"] = answer, time.monotonic() - started

    with httpx.Client(base_url=workers.url) as probe:

        def parked() -> bool:
            return metric(probe.get("/metrics").text, "sluice_parked_fetches") >= 1

        thread = threading.Thread(target=poll)
        thread.start()
        until(parked, "the long-poll to park")
    answer = producer.post(
        f"/v1/topics/{topic}/partitions/{partition}/records",
        json={"records": [{"value": "wake"}]},
    )
    assert answer.status_code == 200, answer.text
    thread.join(30)
    assert result["answer"].status_code == 200
    assert [r["value"] for r in result["answer"].json()["records"]] == ["wake"]
    assert result["seconds"] < 20


def test_a_group_through_connections_on_both_workers(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    zero, one = pair
    create_topic(zero, "grouped")
    records = {"records": [{"key": f"k{i}", "value": i} for i in range(30)]}
    assert one.post("/v1/topics/grouped/records", json=records).status_code == 200
    join = {"topics": ["grouped"], "instance_id": "m", "auto_offset_reset": "earliest"}
    joined = zero.post("/v1/groups/g/members", json=join)
    assert joined.status_code == 201, joined.text
    assert joined.json()["assignment"] == [{"topic": "grouped", "partitions": [0, 1]}]
    served = sibling_reads(zero)[0]
    seen: list[int] = []
    cursor = joined.json()["cursor"]
    deadline = time.monotonic() + 60
    turn = 0
    while len(seen) < 30:
        assert time.monotonic() < deadline, f"only {sorted(seen)} arrived"
        client = pair[turn % 2]
        turn += 1
        answer = client.get(
            "/v1/groups/g/members/m/records",
            params={"max_records": 7, "timeout_ms": 200, "cursor": cursor},
        )
        assert answer.status_code == 200, answer.text
        cursor = answer.json()["cursor"]
        seen.extend(r["value"] for r in answer.json()["records"])
    assert sorted(seen) == list(range(30))
    # The coordinator read the partition the other worker leads from that worker's files.
    assert sibling_reads(zero)[0] > served
    committed = one.post("/v1/groups/g/members/m/commit")
    assert committed.status_code == 200, committed.text
    for client in pair:
        described = client.get("/v1/groups/g").json()
        assert described["lag"] == 0 and described["members"][0]["member_id"] == "m"
        assert sum(p["log_end_offset"] for p in described["partitions"]) == 30
        assert "g" in {g["group"] for g in client.get("/v1/groups").json()["groups"]}
    assert one.delete("/v1/groups/g/members/m").status_code == 204
    assert zero.get("/v1/groups/g").json()["state"] == "Empty"


def test_a_share_group_through_connections_on_both_workers(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    """The first share-group request, through the worker that is not the controller, is
    served (the controller makes `__share_group_state`, and either worker may be the group's
    coordinator: never a 421; a 503 with Retry-After while the workers take up the new
    partitions). Members acquire through one worker and acknowledge through the other: a
    record given back comes to the other member with its second delivery, and none accepted
    comes again."""
    zero, one = pair
    create_topic(zero, "queued")
    records = {"records": [{"value": i} for i in range(40)]}
    assert one.post("/v1/topics/queued/records", json=records).status_code == 200
    configs = {"configs": {"share.auto.offset.reset": "earliest"}}
    assert "__share_group_state" not in {
        t["name"] for t in zero.get("/v1/topics", params={"internal": "true"}).json()["topics"]
    }
    via = pair[1 - zero.get("/v1/cluster").json()["controller"]]
    answers: list[httpx.Response] = []

    def served() -> bool:
        answers.append(via.put("/v1/share-groups/q/configs", json=configs))
        return answers[-1].status_code != 503 or "Retry-After" not in answers[-1].headers

    until(served, "the first share-group request")
    assert answers[-1].status_code == 200, answers[-1].text
    members = ("a", "b")
    for client, member in zip(pair, members, strict=True):
        body = {"topics": ["queued"], "member_id": member}
        joined = client.post("/v1/share-groups/q/members", json=body)
        assert joined.status_code == 201, joined.text
    # the state topic's min.insync.replicas is no more than its one replica
    state = one.get("/v1/topics/__share_group_state").json()
    assert state["overrides"]["min.insync.replicas"] == 1
    deliveries: dict[int, list[tuple[str, int]]] = {}  # value -> (member, delivery count)
    accepted: set[int] = set()
    released = False
    deadline = time.monotonic() + 60
    turn = 0
    while len(accepted) < 40:
        assert time.monotonic() < deadline, f"only {sorted(accepted)} accepted"
        member = members[turn % 2]
        taking, acknowledging = pair[turn % 2], pair[(turn + 1) % 2]
        turn += 1
        path = f"/v1/share-groups/q/members/{member}"
        answer = taking.post(f"{path}/acquire", params={"max_records": 6, "timeout_ms": 200})
        assert answer.status_code == 200, answer.text
        got = answer.json()["records"]
        for r in got:
            deliveries.setdefault(r["value"], []).append((member, r["delivery_count"]))
        assert not {r["value"] for r in got} & accepted, "an accepted record came again"
        acks = [{"token": r["token"], "type": "accept"} for r in got]
        if got and not released:
            acks[0]["type"], released = "release", True
        if not acks:
            continue
        done = acknowledging.post(f"{path}/acknowledge", json={"acknowledgements": acks})
        assert done.status_code == 200, done.text
        assert [r["status"] for r in done.json()["results"]] == ["ok"] * len(acks)
        accepted |= {r["value"] for r, a in zip(got, acks, strict=True) if a["type"] == "accept"}
    assert accepted == set(range(40))
    again = {value: seen for value, seen in deliveries.items() if len(seen) > 1}
    assert len(again) == 1, again
    ((first, second),) = again.values()
    assert (first[1], second[1]) == (1, 2) and first[0] != second[0]
    for client in pair:
        described = client.get("/v1/share-groups/q").json()
        assert described["lag"] == 0
        ends = [(p["start_offset"], p["high_watermark"]) for p in described["partitions"]]
        assert len(ends) == 2 and all(start == end for start, end in ends), ends
        assert sum(end for _, end in ends) == 40
        assert sorted(m["member_id"] for m in described["members"]) == list(members)
    for client, member in zip(pair, members, strict=True):
        assert client.delete(f"/v1/share-groups/q/members/{member}").status_code == 200


def curl(*args: str) -> str:
    done = subprocess.run(["curl", "-s", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_one_http2_connection_serves_partitions_of_both_workers(workers: Supervisor) -> None:
    with httpx.Client(base_url=workers.url) as http:
        create_topic(http, "h2")
    for n in range(20):
        produced = curl(
            "--http2-prior-knowledge", "-X", "POST", f"{workers.url}/v1/topics/h2/records",
            "-H", "Content-Type: application/json",
            "-d", f'{{"records": [{{"key": "k{n}", "value": {n}}}]}}',
        )  # fmt: skip
        assert '"count":1' in produced
    landed = set()
    for _ in range(100):
        # One HTTP/2 connection (prior knowledge): the worker it reached, then both
        # partitions through it, whichever worker leads each.
        with httpx.Client(base_url=workers.url, http1=False, http2=True) as h2:
            ready = h2.get("/readyz")
            assert ready.http_version == "HTTP/2"
            landed.add(ready.json()["worker"])
            fetched: list[int] = []
            for partition in (0, 1):
                answer = h2.get(
                    f"/v1/topics/h2/partitions/{partition}/records",
                    params={"offset": 0, "max_records": 100, "timeout_ms": 0},
                )
                assert answer.http_version == "HTTP/2" and answer.status_code == 200
                fetched.extend(r["value"] for r in answer.json()["records"])
            assert sorted(fetched) == list(range(20))
        if landed == {0, 1}:
            break
    assert landed == {0, 1}


def test_metrics_and_readiness_are_one_view_over_the_workers(
    workers: Supervisor, pair: tuple[httpx.Client, httpx.Client]
) -> None:
    create_topic(pair[0], "counted")
    for client in pair:
        for _ in range(5):
            body = {"records": [{"value": 1}, {"value": 2}, {"value": 3}]}
            assert client.post("/v1/topics/counted/records", json=body).status_code == 200
    for client in pair:
        text = client.get("/metrics").text
        assert metric(text, "sluice_records_in_total", topic="counted") == 30
        assert metric(text, "sluice_metrics_missing_workers") == 0
        assert metric(text, "sluice_is_controller") == 1
        ends = sum(
            metric(text, "sluice_partition_log_end_offset", topic="counted", partition=str(p))
            for p in (0, 1)
        )
        assert ends == 30
        ready = client.get("/readyz").json()
        assert ready["status"] == "ready" and ready["workers"] == 2


def test_a_killed_worker_is_restarted_and_keeps_every_acknowledged_record(
    workers: Supervisor, pair: tuple[httpx.Client, httpx.Client]
) -> None:
    zero, one = pair
    leaders = create_topic(zero, "survivor")
    acknowledged: dict[int, list[Any]] = {0: [], 1: []}
    for n in range(20):
        partition = n % 2
        client = pair[n % 2]
        acks = "1" if n % 4 < 2 else "all"
        answer = client.post(
            f"/v1/topics/survivor/partitions/{partition}/records",
            params={"acks": acks},
            json={"records": [{"value": n}]},
        )
        assert answer.status_code == 200, answer.text
        acknowledged[partition].append(n)
    one.close()
    victim = workers.worker_pid(1)
    os.kill(victim, signal.SIGKILL)
    survivor = next(p for p, leader in leaders.items() if leader == 0)
    # The other worker keeps serving what it leads while worker 1 is down or restarting.
    answer = zero.post(
        f"/v1/topics/survivor/partitions/{survivor}/records",
        json={"records": [{"value": "meanwhile"}]},
    )
    assert answer.status_code == 200, answer.text
    acknowledged[survivor].append("meanwhile")
    ready = zero.get("/readyz")
    assert ready.status_code == 503 and 1 in ready.json()["not_ready"], ready.text

    def back() -> bool:
        return zero.get("/readyz").status_code == 200

    until(back, "worker 1 to be restarted")
    assert workers.worker_pid(1) != victim
    assert f"worker 1 (pid {victim}) exited on signal 9" in workers.log.read_text()
    fresh = on_worker(workers.url, 1)
    for client in (zero, fresh):
        for partition, expected in acknowledged.items():
            assert values(client, "survivor", partition) == expected
    fresh.close()


def test_sigterm_stops_every_process_and_the_worker_count_is_kept(tmp_path: Path) -> None:
    cert, key = write_self_signed(tmp_path)
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    trust = ssl.create_default_context(cafile=str(cert))
    supervisor = start_supervisor(tmp_path / "data", *tls)
    assert supervisor.url.startswith("https://")
    with httpx.Client(base_url=supervisor.url, verify=trust, http2=True) as http:
        leaders = create_topic(http, "kept")
        answer = http.post("/v1/topics/kept/records", json={"records": [{"key": "a", "value": 1}]})
        assert answer.status_code == 200 and answer.http_version == "HTTP/2"  # h2 by ALPN
    pids = supervisor.descendants()
    programs = sorted(Path(c.split("\0")[0]).name for c in pids.values())
    assert len(pids) == 3 and programs.count("etcd") == 1, pids
    # A long-poll that worker 0 forwarded to worker 1 is answered, not cut, by the shutdown.
    elsewhere = next(p for p, leader in leaders.items() if leader == 1)
    poller = on_worker(supervisor.url, 0, verify=trust)
    result: dict[str, httpx.Response] = {}

    def poll() -> None:
        result["answer"] = poller.get(
            f"/v1/topics/kept/partitions/{elsewhere}/records",
            params={"offset": "latest", "timeout_ms": 60000},
        )

    thread = threading.Thread(target=poll)
    thread.start()
    with httpx.Client(base_url=supervisor.url, verify=trust) as probe:
        until(
            lambda: metric(probe.get("/metrics").text, "sluice_parked_fetches") >= 1,
            "the long-poll to park",
        )
    assert supervisor.stop() == 0
    thread.join(30)
    poller.close()
    assert result["answer"].status_code == 200 and result["answer"].json()["records"] == []
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"{pids[pid]} outlived it"
    for count in ("1", "3"):
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "--data-dir", str(tmp_path / "data"),
             "--port", "0", "--workers", count],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 1
        assert f"holds the topics of --workers 2, not --workers {count}" in done.stderr
    again = start_supervisor(tmp_path / "data", *tls)
    with httpx.Client(base_url=again.url, verify=trust) as http:
        partitions = http.get("/v1/topics/kept").json()["partitions"]
        assert sum(p["high_watermark"] for p in partitions) == 1
    assert again.stop() == 0


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_schema_registry_across_workers(pair: tuple[httpx.Client, httpx.Client]) -> None:
    """The registry's topic is created with the workers' replication factor (one replica per
    worker group would never have three), a register through one worker is read through the
    other, and the same schema again answers the same id."""
    first, second = pair
    body = {"schema": '{"type": "enum", "name": "Colour", "symbols": ["RED"]}'}
    path = "/schema-registry/subjects/colours-value/versions"
    registered = first.post(path, json=body)
    assert registered.status_code == 200, registered.text
    assert second.get(f"{path}/latest").json()["id"] == registered.json()["id"]
    assert second.post(path, json=body).json() == registered.json()
