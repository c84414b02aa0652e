"""`sluice share-groups` against a real server: configs, consume (acknowledging each record as
--ack says, leaving when stopped, joining again after its session ran out), describe, list,
reset-offsets, delete, and what each says of bad input."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import REPO, Server, until
from tests.e2e.test_cli import sluice


def ok(server: Server, *args: str, stdin: str | None = None) -> str:
    """The command's stdout; it must succeed."""
    done = sluice(server, *args, stdin=stdin)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def refused(server: Server, *args: str) -> str:
    """The command's stderr; it must fail, without a traceback."""
    done = sluice(server, *args)
    assert done.returncode != 0, (args, done.stdout)
    assert "Traceback" not in done.stderr
    return done.stderr.strip()


def described(server: Server, group: str = "g") -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(ok(server, "share-groups", "describe", group, "--json"))
    return doc


def topic(server: Server, name: str, *lines: str, keyed: bool = False) -> None:
    """A topic of one partition holding a record a line (`keyed`: key:value lines)."""
    ok(server, "topics", "create", name)
    split = ("--key-separator", ":") if keyed else ()
    ok(server, "produce", name, *split, stdin="".join(f"{line}\n" for line in lines))


def consumer(server: Server, *args: str) -> subprocess.Popen[str]:
    """`sluice share-groups consume g --topic t ...` as a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-c", "from gateway.cli.main import main; main()", "share-groups",
         "consume", "g", "--topic", "t", *args, "--url", server.url],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_configs_consume_describe_list_delete(server: Server) -> None:
    topic(server, "t", "a", "b", "c", "d", "e")
    assert "404 UNKNOWN_GROUP: share group 'g' does not exist" in refused(
        server, "share-groups", "configs", "g"
    )
    table = ok(server, "share-groups", "configs", "g", "--output", "table",
               "--set", "share.auto.offset.reset=earliest",
               "--set", "share.record.lock.duration.ms=60000")  # fmt: skip
    assert [line.split() for line in table.splitlines()] == [
        ["CONFIG", "VALUE"],
        ["share.auto.offset.reset", "earliest"],
        ["share.record.lock.duration.ms", "60000"],
    ]
    unset = ok(server, "share-groups", "configs", "g", "--unset", "share.record.lock.duration.ms")
    assert orjson.loads(unset) == {"group": "g", "configs": {"share.auto.offset.reset": "earliest"}}
    assert orjson.loads(ok(server, "share-groups", "configs", "g")) == orjson.loads(unset)

    first = ok(server, "share-groups", "consume", "g", "--topic", "t", "--count", "3",
               "--max-records", "2")  # fmt: skip
    assert first.splitlines() == ["a", "b", "c"]
    doc = described(server)
    assert doc["state"] == "Empty" and doc["members"] == [] and doc["lag"] == 2
    lines = ok(server, "share-groups", "describe", "g", "--output", "table").splitlines()
    assert lines[0] == (
        "share group g (Empty): 0 members, total lag 2; configs: share.auto.offset.reset=earliest"
    )
    assert [line.split() for line in lines[2:]] == [
        ["TOPIC", "PARTITION", "START-OFFSET", "END-OFFSET", "HIGH-WATERMARK", "ACQUIRED",
         "AVAILABLE", "ACKNOWLEDGED", "ARCHIVED", "LAG"],
        ["t", "0", "3", "3", "5", "0", "0", "0", "0", "2"],
    ]  # fmt: skip
    rest = ok(server, "share-groups", "consume", "g", "--topic", "t", "--timeout-ms", "500")
    assert rest.splitlines() == ["d", "e"]
    assert described(server)["lag"] == 0

    assert ok(server, "share-groups", "list", "--output", "table") == "g\tEmpty\t0\n"
    assert orjson.loads(ok(server, "share-groups", "list")) == [
        {"group": "g", "state": "Empty", "members": 0}
    ]
    assert ok(server, "share-groups", "delete", "g", "--output", "table") == (
        "deleted share group g\n"
    )
    assert "404 UNKNOWN_GROUP" in refused(server, "share-groups", "delete", "g")
    assert "404 UNKNOWN_GROUP" in refused(server, "share-groups", "describe", "g")
    assert orjson.loads(ok(server, "share-groups", "list")) == []


def test_bad_input_is_one_clear_line(server: Server) -> None:
    ok(server, "topics", "create", "t")
    configs = ("share-groups", "configs", "g")
    assert refused(server, *configs, "--set", "share.delivery.count.limit") == (
        "sluice: --set takes name=value, got 'share.delivery.count.limit'"
    )
    for value in ("1", "many"):
        line = refused(server, *configs, "--set", f"share.delivery.count.limit={value}")
        assert line.endswith(
            "400 INVALID_CONFIG: share.delivery.count.limit must be an integer between 2 and 10"
        )
    assert "INVALID_CONFIG: unknown config 'no.such'" in refused(
        server, *configs, "--set", "no.such=1"
    )
    assert "404 UNKNOWN_TOPIC" in refused(server, "share-groups", "consume", "g", "--topic", "x")
    assert "the following arguments are required: --topic" in refused(
        server, "share-groups", "consume", "g"
    )
    assert "must be at least 1" in refused(
        server, "share-groups", "consume", "g", "--topic", "t", "--count", "0"
    )
    assert "invalid choice: 'renew'" in refused(
        server, "share-groups", "consume", "g", "--topic", "t", "--ack", "renew"
    )


def test_each_record_is_acknowledged_as_ack_says(server: Server) -> None:
    """--ack release gives a record back (here until its delivery limit archives it), --ack
    reject archives it; neither comes again. Another member holds offset 0 meanwhile, so the
    window keeps what was archived for the describe to count."""
    topic(server, "t", "k0:v0", "k1:v1", "k2:v2", keyed=True)
    ok(server, "share-groups", "configs", "g", "--set", "share.auto.offset.reset=earliest",
       "--set", "share.delivery.count.limit=2")  # fmt: skip
    members = f"{server.url}/v1/share-groups/g/members"
    with httpx.Client() as http:
        holder = http.post(members, json={"topics": ["t"]}).json()["member_id"]
        held = http.post(f"{members}/{holder}/acquire").json()["records"]
        assert [r["offset"] for r in held] == [0]
        released = ok(server, "share-groups", "consume", "g", "--topic", "t", "--count", "2",
                      "--max-records", "1", "--ack", "release", "--print-key",
                      "--key-separator", "=")  # fmt: skip
        assert released.splitlines() == ["k1=v1", "k1=v1"]  # its two deliveries
        rejected = ok(server, "share-groups", "consume", "g", "--topic", "t", "--count", "1",
                      "--ack", "reject")  # fmt: skip
        assert rejected == "v2\n"
        assert ok(server, "share-groups", "consume", "g", "--topic", "t", "--timeout-ms", "0") == ""
        [row] = described(server)["partitions"]
        assert {k: row[k] for k in ("start_offset", "acquired", "archived", "acknowledged")} == {
            "start_offset": 0, "acquired": 1, "archived": 2, "acknowledged": 0
        }  # fmt: skip
        lines = ok(server, "share-groups", "describe", "g", "--output", "table").splitlines()
        assert lines[0].startswith("share group g (Stable): 1 member, total lag 1; configs: ")
        assert [line.split() for line in lines[2:4]] == [
            ["MEMBER-ID", "TOPICS", "SESSION-TIMEOUT-MS", "ACQUIRED"],
            [holder, "t", "45000", "1"],
        ]
        http.delete(f"{members}/{holder}").raise_for_status()


def test_reset_offsets(server: Server) -> None:
    ok(server, "topics", "create", "t", "--partitions", "2")
    for p in ("0", "1"):
        ok(server, "produce", "t", "--partition", p, stdin="a\nb\nc\n")
    reset = ("share-groups", "reset-offsets", "g", "--topic", "t")

    def starts() -> dict[int, int]:
        return {r["partition"]: r["start_offset"] for r in described(server)["partitions"]}

    assert [line.split() for line in ok(server, *reset, "--to-latest", "--output", "table")
            .splitlines()] == [
        ["TOPIC", "PARTITION", "NEW-START-OFFSET"], ["t", "0", "3"], ["t", "1", "3"]
    ]  # fmt: skip
    answer = orjson.loads(ok(server, *reset, "--partitions", "1", "--to-offset", "1"))
    assert answer == {"group": "g", "offsets": [{"topic": "t", "partition": 1, "start_offset": 1}]}
    assert starts() == {0: 3, 1: 1}
    ok(server, *reset, "--to-earliest")
    assert starts() == {0: 0, 1: 0}
    ok(server, *reset, "--partitions", "0", "--to-datetime", "2100-01-01T00:00:00")
    assert starts() == {0: 3, 1: 0}
    ok(server, *reset, "--to-timestamp", "0")
    assert starts() == {0: 0, 1: 0}
    assert "416 OFFSET_OUT_OF_RANGE" in refused(server, *reset, "--to-offset", "9")
    assert "ISO 8601" in refused(server, *reset, "--to-datetime", "yesterday")

    joined = httpx.post(f"{server.url}/v1/share-groups/g/members", json={"topics": ["t"]})
    assert joined.status_code == 201
    assert refused(server, *reset, "--to-earliest").endswith(
        "409 GROUP_NOT_EMPTY: share group 'g' has 1 members; reset it when empty"
    )
    assert refused(server, "share-groups", "delete", "g").endswith(
        "409 GROUP_NOT_EMPTY: share group 'g' has 1 members; delete it when empty"
    )


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_running_consumer_leaves_when_stopped(server: Server, stop: signal.Signals) -> None:
    """It follows new records, accepting each; Ctrl-C or SIGTERM makes it leave at once."""
    topic(server, "t", *map(str, range(5)))
    ok(server, "share-groups", "configs", "g", "--set", "share.auto.offset.reset=earliest")
    with httpx.Client(base_url=server.url) as http:

        def accepted(total: int) -> bool:
            doc = http.get("/v1/share-groups/g").json()
            return bool(doc["members"]) and doc["partitions"][0]["start_offset"] == total

        running = consumer(server)
        try:
            until(lambda: accepted(5), "the first 5 to be printed and accepted")
            http.post("/v1/topics/t/records", json={"records": [{"value": 5}]}).raise_for_status()
            until(lambda: accepted(6), "the next one to be printed and accepted")
            running.send_signal(stop)
            out, err = running.communicate(timeout=30)
        finally:
            if running.poll() is None:
                running.kill()
                running.wait()
        assert running.returncode == 0, err
        assert out.splitlines() == [str(n) for n in range(6)]
        doc = http.get("/v1/share-groups/g").json()
        assert doc["state"] == "Empty" and doc["members"] == [] and doc["lag"] == 0


def test_a_consumer_joins_again_after_its_session_ran_out(server: Server) -> None:
    """Paused past its session (SIGSTOP), it finds itself forgotten when it resumes, joins
    again and carries on."""
    topic(server, "t", "a", "b")
    ok(server, "share-groups", "configs", "g", "--set", "share.auto.offset.reset=earliest")
    with httpx.Client(base_url=server.url) as http:

        def group() -> dict[str, Any]:
            doc: dict[str, Any] = http.get("/v1/share-groups/g").json()
            return doc

        def accepted(total: int) -> bool:
            doc = group()
            return bool(doc["members"]) and doc["partitions"][0]["start_offset"] == total

        running = consumer(server, "--session-timeout-ms", "1000")
        try:
            until(lambda: accepted(2), "the first two to be printed and accepted")
            running.send_signal(signal.SIGSTOP)
            until(lambda: not group()["members"], "the paused member to expire")
            http.post("/v1/topics/t/records", json={"records": [{"value": "c"}]})
            running.send_signal(signal.SIGCONT)
            until(lambda: accepted(3), "the member joined again to accept the third")
            running.send_signal(signal.SIGTERM)
            out, err = running.communicate(timeout=30)
        finally:
            if running.poll() is None:
                running.send_signal(signal.SIGCONT)
                running.kill()
                running.wait()
    assert running.returncode == 0, err
    assert "404 UNKNOWN_MEMBER" in err and "joining again" in err
    assert out.splitlines() == ["a", "b", "c"]


def test_an_acknowledgement_that_came_too_late_is_said(server: Server) -> None:
    """A reader that does not keep up (a full pipe) holds the printing past the record's
    lock: its accept is refused, said on stderr, and the record is available again."""
    ok(server, "topics", "create", "t")
    ok(server, "share-groups", "configs", "g", "--set", "share.auto.offset.reset=earliest",
       "--set", "share.record.lock.duration.ms=1000")  # fmt: skip
    big = "x" * 300_000  # past a pipe's buffer
    httpx.post(f"{server.url}/v1/topics/t/records", json={"records": [{"value": big}]})
    running = consumer(server, "--count", "1")
    try:

        def lapsed() -> bool:
            doc = described(server)
            return bool(doc["members"]) and doc["partitions"][0]["available"] == 1

        until(lapsed, "the lock to lapse while the record is printed")
        out, err = running.communicate(timeout=30)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert running.returncode == 0, err
    assert out == big + "\n"
    assert err.startswith("sluice: accept of t:0:0:1 refused: LOCK_EXPIRED")
    [row] = described(server)["partitions"]
    assert row["available"] == 1 and row["acknowledged"] == 0
