"""The console tools against a real server: topics, produce from stdin, consume, groups."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import re
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.cli import main as cli
from gateway.cli.main import main
from tests.e2e.conftest import REPO, Server, start_server


def sluice(
    server: Server, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from gateway.cli.main import main; main()",
            *args,
            "--url",
            server.url,
        ],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_topics_lifecycle(server: Server) -> None:
    created = sluice(
        server,
        "topics",
        "create",
        "events",
        "--partitions",
        "3",
        "--config",
        "retention.ms=86400000",
    )
    assert created.returncode == 0, created.stderr
    assert orjson.loads(created.stdout)["configs"]["retention.ms"] == 86400000
    assert sluice(server, "topics", "list").stdout == "events\t3\n"
    altered = sluice(
        server,
        "topics",
        "alter",
        "events",
        "--partitions",
        "4",
        "--config",
        "segment.ms=3600000",
        "--delete-config",
        "retention.ms",
    )
    doc = orjson.loads(altered.stdout)
    assert len(doc["partitions"]) == 4
    assert doc["overrides"] == {"segment.ms": 3600000}
    duplicate = sluice(server, "topics", "create", "events")
    assert duplicate.returncode != 0 and "TOPIC_ALREADY_EXISTS" in duplicate.stderr
    assert sluice(server, "topics", "delete", "events").returncode == 0
    assert sluice(server, "topics", "list").stdout == ""


def test_produce_then_consume_from_the_beginning(server: Server) -> None:
    assert sluice(server, "topics", "create", "t", "--partitions", "2").returncode == 0
    lines = "".join(f'k{i}:{{"n": {i}}}\n' for i in range(50)) + "k50:plain text\n"
    produced = sluice(
        server, "produce", "t", "--key-separator", ":", "--batch-size", "7", stdin=lines
    )
    assert produced.returncode == 0, produced.stderr
    assert "produced 51 records" in produced.stderr
    consumed = sluice(
        server,
        "consume",
        "t",
        "--from-beginning",
        "--max-records",
        "51",
        "--print-key",
        "--key-separator",
        "=",
    )
    assert consumed.returncode == 0, consumed.stderr
    got = sorted(consumed.stdout.splitlines())
    want = sorted([f'k{i}={{"n":{i}}}' for i in range(50)] + ["k50=plain text"])
    assert got == want


def test_consume_one_partition_from_an_offset(server: Server) -> None:
    sluice(server, "topics", "create", "one")
    sluice(server, "produce", "one", "--partition", "0", stdin="a\nb\nc\n")
    consumed = sluice(
        server, "consume", "one", "--partition", "0", "--offset", "1", "--max-records", "2"
    )
    assert consumed.stdout.splitlines() == ["b", "c"]


def test_errors_are_reported(server: Server) -> None:
    missing = sluice(server, "topics", "describe", "ghost")
    assert missing.returncode != 0 and "UNKNOWN_TOPIC" in missing.stderr
    bad = sluice(server, "produce", "ghost", stdin="x\n")
    assert bad.returncode != 0 and "404" in bad.stderr


def _describe(server: Server, group: str) -> dict[str, Any]:
    done = sluice(server, "groups", "describe", group, "--json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = orjson.loads(done.stdout)
    return doc


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 15
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _group_consumer(server: Server, *extra: str) -> subprocess.Popen[str]:
    """`sluice consume t --group g --from-beginning` as a process of its own."""
    return subprocess.Popen(
        [
            *(sys.executable, "-c", "from gateway.cli.main import main; main()", "consume", "t"),
            *("--group", "g", "--from-beginning", *extra, "--url", server.url),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_group_consumers_take_turns(server: Server) -> None:
    """Each run prints what the last one left, commits exactly what it printed, and leaves."""
    sluice(server, "topics", "create", "t", "--partitions", "2")
    sluice(server, "produce", "t", "--partition", "0", stdin="a\nb\nc\nd\n")
    sluice(server, "produce", "t", "--partition", "1", stdin="e\nf\n")
    once = ("consume", "t", "--group", "g", "--from-beginning", "--max-messages", "3")
    first = sluice(server, *once)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["a", "b", "c"]
    doc = _describe(server, "g")
    assert doc["state"] == "Empty" and doc["members"] == []
    assert [(r["partition"], r["committed_offset"]) for r in doc["partitions"]] == [(0, 3)]
    table = sluice(server, "groups", "describe", "g", "--output", "table").stdout.splitlines()
    assert table[0] == "group g (Empty, generation 2, range assignor): 0 members, total lag 1"
    assert [line.split() for line in table[2:]] == [
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER"],
        ["t", "0", "3", "4", "1", "-"],
    ]
    # --from-beginning only applies where the group has no committed offset (partition 1).
    second = sluice(server, *once)
    assert sorted(second.stdout.splitlines()) == ["d", "e", "f"]
    assert sluice(server, "groups", "list", "--output", "table").stdout == "g\tEmpty\t0\n"
    listed = orjson.loads(sluice(server, "groups", "list").stdout)  # piped: JSON
    assert listed == [{"group": "g", "state": "Empty", "members": 0}]
    doc = _describe(server, "g")
    assert doc["lag"] == 0
    assert {r["partition"]: r["committed_offset"] for r in doc["partitions"]} == {0: 4, 1: 2}


def test_static_group_consumer_keeps_its_place(server: Server) -> None:
    """With --instance-id the consumer stays a member when it exits; run again, it carries on
    with the same partitions, without a rebalance."""
    sluice(server, "topics", "create", "t", "--partitions", "2")
    sluice(server, "produce", "t", "--partition", "0", stdin="a\nb\nc\nd\n")
    run = ("consume", "t", "--group", "g", "--instance-id", "w1", "--from-beginning")
    first = sluice(server, *run, "--max-messages", "2")
    assert first.returncode == 0, first.stderr
    before = _describe(server, "g")
    assert [m["member_id"] for m in before["members"]] == ["w1"]
    second = sluice(server, *run, "--max-messages", "2")
    assert (first.stdout + second.stdout).splitlines() == ["a", "b", "c", "d"]
    after = _describe(server, "g")
    assert after["generation"] == before["generation"] and after["lag"] == 0


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_group_consumer_leaves_when_stopped(server: Server, stop: signal.Signals) -> None:
    """A running group consumer follows new records; Ctrl-C or SIGTERM makes it leave."""
    with httpx.Client(base_url=server.url) as http:
        http.post("/v1/topics", json={"name": "t", "partitions": 3})

        def produce(values: range) -> None:
            records = [{"value": v, "partition": v % 3} for v in values]
            assert http.post("/v1/topics/t/records", json={"records": records}).status_code == 200

        def committed(total: int) -> bool:
            answer = http.get("/v1/groups/g")
            rows = answer.json()["partitions"] if answer.status_code == 200 else []
            return sum(r["committed_offset"] or 0 for r in rows) == total

        produce(range(30))
        consumer = _group_consumer(server, "--session-timeout-ms", "60000")
        try:
            _until(lambda: committed(30), "the first 30 to be printed and committed")
            produce(range(30, 40))
            _until(lambda: committed(40), "the next 10 to be printed and committed")
            assert len(http.get("/v1/groups/g").json()["members"]) == 1
            consumer.send_signal(stop)
            out, err = consumer.communicate(timeout=30)
        finally:
            if consumer.poll() is None:
                consumer.kill()
                consumer.wait()
        assert consumer.returncode == 0, err
        assert sorted(int(line) for line in out.splitlines()) == list(range(40))
        doc = http.get("/v1/groups/g").json()
        assert doc["state"] == "Empty" and doc["members"] == [] and doc["lag"] == 0
        assert [r["committed_offset"] for r in doc["partitions"]] == [14, 13, 13]


def test_group_consumer_rejoins_after_its_session_ran_out(server: Server) -> None:
    """A consumer paused past its session (SIGSTOP) finds itself forgotten when it resumes:
    it joins again, and what it printed but could not commit comes again (at least once)."""
    with httpx.Client(base_url=server.url) as http:
        http.post("/v1/topics", json={"name": "t", "partitions": 2})

        def produce(values: range) -> None:
            records = [{"value": v, "partition": v % 2} for v in values]
            assert http.post("/v1/topics/t/records", json={"records": records}).status_code == 200

        def group() -> dict[str, Any]:
            answer = http.get("/v1/groups/g")
            return answer.json() if answer.status_code == 200 else {"members": [], "lag": -1}

        def caught_up(total: int) -> bool:
            doc = group()
            done = sum(r["committed_offset"] or 0 for r in doc.get("partitions", []))
            return bool(doc["members"]) and done == total

        def parked() -> bool:
            metrics = http.get("/metrics").text.splitlines()
            return "sluice_parked_fetches 1.0" in metrics

        produce(range(10))
        consumer = _group_consumer(server, "--session-timeout-ms", "1000")
        try:
            _until(lambda: caught_up(10), "the first 10 to be printed and committed")
            _until(parked, "the consumer's next fetch to be waiting")
            consumer.send_signal(signal.SIGSTOP)
            produce(range(10, 20))  # answers the parked fetch; nobody prints or commits them
            _until(lambda: not group()["members"], "the paused member to expire")
            consumer.send_signal(signal.SIGCONT)
            _until(lambda: caught_up(20), "the rejoined member to catch up")
            consumer.send_signal(signal.SIGTERM)
            out, err = consumer.communicate(timeout=30)
        finally:
            if consumer.poll() is None:
                consumer.send_signal(signal.SIGCONT)
                consumer.kill()
                consumer.wait()
    assert consumer.returncode == 0, err
    assert "UNKNOWN_MEMBER" in err and "joining again" in err
    assert sorted(int(line) for line in out.splitlines()) == sorted([*range(20), *range(10, 20)])


def test_reset_offsets(
    server: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every --to-* form; the CLI runs in this process, as there are many calls."""

    def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        code = 0
        try:
            main([*args, "--url", server.url])
        except SystemExit as exc:
            code = 1 if exc.code else 0
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        out, err = capsys.readouterr()
        return code, out, err

    def offsets() -> dict[int, int]:
        return {r["partition"]: r["committed_offset"] for r in _describe(server, "g")["partitions"]}

    run("topics", "create", "t", "--partitions", "2")
    for p in ("0", "1"):
        run("produce", "t", "--partition", p, stdin="a\nb\nc\n")
    run("consume", "t", "--group", "g", "--from-beginning", "--max-messages", "6")
    reset = ("groups", "reset-offsets", "g", "--topic", "t")
    code, out, err = run(*reset, "--to-earliest", "--output", "table")
    assert code == 0, err
    assert [line.split() for line in out.splitlines()] == [
        ["TOPIC", "PARTITION", "NEW-OFFSET"],
        ["t", "0", "0"],
        ["t", "1", "0"],
    ]
    run(*reset, "--partitions", "1", "--to-offset", "2")
    assert offsets() == {0: 0, 1: 2}
    run(*reset, "--to-latest")
    assert offsets() == {0: 3, 1: 3}
    run(*reset, "--partitions", "0,1", "--to-timestamp", "0")
    assert offsets() == {0: 0, 1: 0}
    run(*reset, "--partitions", "0", "--to-datetime", "2100-01-01T00:00:00")
    assert offsets() == {0: 3, 1: 0}
    run(*reset, "--to-datetime", "1970-01-01T01:00:00+01:00")
    assert offsets() == {0: 0, 1: 0}

    code, _, err = run(*reset, "--to-offset", "9")
    assert code != 0 and "OFFSET_OUT_OF_RANGE" in err
    joined = httpx.post(f"{server.url}/v1/groups/g/members", json={"topics": ["t"]})
    assert joined.status_code == 201
    code, _, err = run(*reset, "--to-earliest")
    assert code != 0 and "GROUP_NOT_EMPTY" in err
    code, _, err = run(*reset, "--to-datetime", "yesterday")
    assert code != 0 and "ISO 8601" in err


def test_group_errors_are_reported(server: Server) -> None:
    missing = sluice(server, "groups", "describe", "ghost")
    assert missing.returncode != 0 and "UNKNOWN_GROUP" in missing.stderr
    no_topic = sluice(server, "consume", "ghost", "--group", "g")
    assert no_topic.returncode != 0 and "UNKNOWN_TOPIC" in no_topic.stderr
    sluice(server, "topics", "create", "t")
    pinned = sluice(server, "consume", "t", "--group", "g", "--partition", "0")
    assert pinned.returncode != 0 and "--group" in pinned.stderr
    assert sluice(server, "groups", "list", "--output", "table").stdout == ""


def test_serve_group_options(tmp_path: Path) -> None:
    """The offsets topic's size and the group limits come from `sluice serve`'s options."""
    running = start_server(
        tmp_path / "data",
        "--offsets-topic-partitions",
        "3",
        "--group-min-session-timeout-ms",
        "100",
        "--group-max-members",
        "1",
    )
    try:
        with httpx.Client(base_url=running.url) as http:
            topics = http.get("/v1/topics", params={"internal": "true"}).json()["topics"]
            assert {"name": "__consumer_offsets", "partitions": 3} in topics
            http.post("/v1/topics", json={"name": "t"}).raise_for_status()
            body = {"topics": ["t"], "session_timeout_ms": 100}
            assert http.post("/v1/groups/g/members", json=body).status_code == 201
            refused = http.post("/v1/groups/g/members", json=body)
            assert refused.json()["code"] == "GROUP_MAX_SIZE_REACHED"
    finally:
        assert running.stop() == 0
    for bad in (["--offsets-topic-partitions", "0"], ["--group-max-members", "x"]):
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "--data-dir", str(tmp_path / "d2"), *bad],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and bad[0] in done.stderr


def _consumer(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "from gateway.cli.main import main; main()", "consume", *args,
         "--url", url],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def test_an_offset_past_the_end_waits_for_the_log_to_reach_it(server: Server) -> None:
    sluice(server, "topics", "create", "w")
    sluice(server, "produce", "w", "--partition", "0", stdin="a\nb\n")
    consumer = _consumer(server.url, "w", "--partition", "0", "--offset", "4", "--max-records", "2")
    try:
        _until(lambda: server_parked(server) >= 1, "the consumer to park at the log end")
        sluice(server, "produce", "w", "--partition", "0", stdin="c\nd\ne\nf\ng\n")
        out, err = consumer.communicate(timeout=30)
    finally:
        consumer.kill()
    assert consumer.returncode == 0, err
    assert out.splitlines() == ["e", "f"]  # offsets 4 and 5


def server_parked(server: Server) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("sluice_parked_fetches "))
    return float(line.split()[1])


def test_an_offset_below_the_start_follows_reset(server: Server) -> None:
    sluice(server, "topics", "create", "r")
    sluice(server, "produce", "r", "--partition", "0", stdin="a\nb\nc\nd\ne\n")
    deleted = httpx.post(
        f"{server.url}/v1/topics/r/partitions/0/delete-records", json={"before_offset": 3}
    )
    assert deleted.status_code == 200, deleted.text
    early = sluice(
        server, "consume", "r", "--partition", "0", "--offset", "1", "--max-records", "2"
    )
    assert early.returncode == 0, early.stderr
    assert early.stdout.splitlines() == ["d", "e"]
    assert "below the log start 3; reading from earliest" in early.stderr
    refused = sluice(server, "consume", "r", "--partition", "0", "--offset", "1", "--reset", "none")
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [refused.stderr.strip()]  # one line
    assert "below the log start 3" in refused.stderr and "Traceback" not in refused.stderr


def test_a_consumer_outlives_a_server_restart(tmp_path: Path) -> None:
    first = start_server(tmp_path / "data")
    consumer = _consumer(first.url, "t", "--partition", "0", "--offset", "0", "--max-records", "2")
    try:
        httpx.post(f"{first.url}/v1/topics", json={"name": "t"}).raise_for_status()
        httpx.post(
            f"{first.url}/v1/topics/t/records", json={"records": [{"value": "before"}]}
        ).raise_for_status()
        assert consumer.stdout is not None
        assert consumer.stdout.readline() == "before\n"
        assert first.stop() == 0
        second = start_server(tmp_path / "data", "--port", str(first.port))
        try:
            httpx.post(
                f"{second.url}/v1/topics/t/records", json={"records": [{"value": "after"}]}
            ).raise_for_status()
            out, err = consumer.communicate(timeout=60)
        finally:
            second.stop()
    finally:
        consumer.kill()
    assert consumer.returncode == 0, err
    assert out.splitlines() == ["after"]
    assert "retrying" in err and "Traceback" not in err


def test_a_connection_error_is_one_clear_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from gateway.cli.main import main; main()", "topics", "list",
         "--url", "http://127.0.0.1:9"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.strip() == "sluice: cannot connect to 127.0.0.1:9: Connection refused"


def test_groups_delete(server: Server) -> None:
    sluice(server, "topics", "create", "t")
    sluice(server, "produce", "t", stdin="a\n")
    consumed = sluice(server, "consume", "t", "--group", "gone", "--from-beginning",
                      "--max-records", "1")  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    deleted = sluice(server, "groups", "delete", "gone", "--output", "table")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == "deleted group gone\n"
    again = sluice(server, "groups", "delete", "gone")
    assert again.returncode != 0 and "UNKNOWN_GROUP" in again.stderr


def test_topics_print_a_table_or_json(server: Server) -> None:
    created = sluice(server, "topics", "create", "tab", "--partitions", "2", "--config",
                     "retention.ms=1000", "--output", "table")  # fmt: skip
    assert created.returncode == 0, created.stderr
    lines = created.stdout.splitlines()
    assert lines[0].split()[:2] == ["topic", "tab"] and "retention.ms=1000" in lines[0]
    assert lines[2].split() == ["PARTITION", "LEADER", "REPLICAS", "ISR", "ELR", "OFFLINE",
                                "LOG-START", "HIGH-WATERMARK", "LOG-END", "SIZE"]  # fmt: skip
    assert [line.split() for line in lines[3:]] == [
        ["0", "0", "0", "0", "-", "-", "0", "0", "0", "0"],
        ["1", "0", "0", "0", "-", "-", "0", "0", "0", "0"],
    ]
    piped = sluice(server, "topics", "describe", "tab")  # not a terminal: JSON
    assert orjson.loads(piped.stdout)["name"] == "tab"
    listed = sluice(server, "topics", "list", "--output", "json")
    assert orjson.loads(listed.stdout) == [{"name": "tab", "partitions": 2}]


def test_the_table_shows_offline_replicas_and_a_missing_leader(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A cluster's partition whose only in-sync replica's disk failed: no leader, node 1
    offline, node 3 eligible (it left the ISR below min.insync.replicas), and node 2's row
    without a local replica (its offsets null)."""
    row = {"partition": 0, "leader": None, "replicas": [1, 2, 3], "isr": [1],
           "eligible_leader_replicas": [3], "offline_replicas": [1], "log_start_offset": None,
           "high_watermark": None, "log_end_offset": None, "size_bytes": None}  # fmt: skip
    doc = {"name": "t", "topic_id": "a" * 32, "overrides": {}, "partitions": [row]}
    cli._print_topic(doc, table=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].split() == ["0", "none", "1,2,3", "1", "3", "1", "-", "-", "-", "-"]


def _produce(server: Server, stdin: Any, stderr: Any, *args: str) -> subprocess.Popen[bytes]:
    """`sluice produce bulk` reading `stdin` (a file or a pipe) and writing stderr there."""
    return subprocess.Popen(
        [sys.executable, "-c", "from gateway.cli.main import main; main()", "produce", "bulk",
         *args, "--url", server.url],
        cwd=REPO, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr,
        env={**os.environ, "TERM": "xterm-256color"},
    )  # fmt: skip


PROGRESS = re.compile(r"produce bulk: [\d.]+ kB of [\d.]+ kB \((\d+)%\), ([\d,]+) records")


def test_produce_from_a_file_prints_progress_lines_when_piped(
    server: Server, tmp_path: Path
) -> None:
    """Piped stderr: a plain line at each tenth of the file; stdout stays empty."""
    assert sluice(server, "topics", "create", "bulk").returncode == 0
    data = tmp_path / "bulk.ndjson"
    data.write_text("".join(f'{{"n": {i}, "pad": "{"x" * 40}"}}\n' for i in range(1000)))
    with data.open("rb") as stdin:
        process = _produce(server, stdin, subprocess.PIPE, "--batch-size", "50")
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out == b""
    lines = err.decode().splitlines()
    assert lines[-1] == "produced 1000 records"
    found = [PROGRESS.fullmatch(line) for line in lines[:-1]]
    assert all(found), lines
    percents = [int(m.group(1)) for m in found if m]
    assert len(percents) == 10 and percents == sorted(percents) and percents[-1] == 100
    assert found[-1] is not None and found[-1].group(2) == "1,000"
    hw = httpx.get(f"{server.url}/v1/topics/bulk/partitions/0/offsets").json()["offset"]
    assert hw == 1000

    piped = sluice(server, "produce", "bulk", stdin="a\nb\n")  # a pipe: no size, one line
    assert piped.stderr.splitlines() == ["produce bulk: 4 bytes, 2 records", "produced 2 records"]


def test_produce_shows_a_bar_on_a_terminal(server: Server, tmp_path: Path) -> None:
    """stderr a terminal (a pty): a rich bar that ends at 100%."""
    assert sluice(server, "topics", "create", "bulk").returncode == 0
    data = tmp_path / "bulk.ndjson"
    data.write_text("".join(f'{{"n": {i}}}\n' for i in range(1000)))
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    with data.open("rb") as stdin:
        process = _produce(server, stdin, follower, "--batch-size", "100")
    os.close(follower)
    screen = b""
    with contextlib.suppress(OSError):  # EIO once the process closed the terminal
        while chunk := os.read(leader, 65536):
            screen += chunk
    os.close(leader)
    assert process.wait(60) == 0
    assert process.stdout is not None and process.stdout.read() == b""
    text = screen.decode()
    assert "\u2501" in text  # the bar's line drawing
    assert "100%" in text and "1,000 records" in text and "produced 1000 records" in text
    assert "produce bulk: " not in text  # no plain lines on a terminal


def test_produce_refuses_input_that_is_not_utf8(server: Server) -> None:
    assert sluice(server, "topics", "create", "bulk").returncode == 0
    done = subprocess.run(
        [sys.executable, "-c", "from gateway.cli.main import main; main()", "produce", "bulk",
         "--url", server.url],
        cwd=REPO, input=b"ok\n\xff\n", capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    last = done.stderr.decode().splitlines()[-1]
    assert last.startswith("sluice: line 2 of the input is not UTF-8: ")


def test_a_reader_that_stops_early_ends_the_command_quietly(server: Server) -> None:
    """`sluice consume ... | head -1`: no BrokenPipeError traceback, a non-zero exit."""
    assert sluice(server, "topics", "create", "bulk").returncode == 0
    lines = "".join(f"{i} {'x' * 200}\n" for i in range(2000))
    assert sluice(server, "produce", "bulk", stdin=lines).returncode == 0
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {shlex.quote(sys.executable)} -c 'from gateway.cli.main "
         f"import main; main()' consume bulk --from-beginning --max-records 2000 --url "
         f"{server.url} | head -1"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.stdout == f"0 {'x' * 200}\n"
    assert done.returncode == 1 and done.stderr == ""
