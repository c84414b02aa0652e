"""The console tools against a real server: topics, produce from stdin, consume."""

from __future__ import annotations

import subprocess
import sys

import orjson

from tests.e2e.conftest import REPO, Server


def sluice(
    server: Server, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from gateway.cli import main; main()", *args, "--url", server.url],
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
