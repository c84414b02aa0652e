"""The start-up report of a real server: its log lines and metrics on a new data directory,
after a crash that tore a partition's tail, and after a clean shutdown."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import start_server


def start(data_dir: Path, log: Path) -> tuple[subprocess.Popen[str], str]:
    """`python -m gateway` on a free port logging to `log`; returns once it listens (its
    start-up lines are written by then)."""
    server = start_server(data_dir, log=log)
    return server.process, server.url


def startup_samples(url: str) -> dict[tuple[str, str, str], float]:
    """The per-partition start-up metrics: (name, topic, partition) -> value."""
    text = httpx.get(f"{url}/metrics").text
    return {
        (s.name, s.labels["topic"], s.labels["partition"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("sluice_startup_partition_")
        for s in family.samples
    }


def test_the_startup_report_in_the_log_and_the_metrics(tmp_path: Path) -> None:
    data = tmp_path / "data"
    process, url = start(data, tmp_path / "new.log")
    try:
        lines = (tmp_path / "new.log").read_text().splitlines()
        assert any("a new data directory, nothing to recover" in line for line in lines)
        roles = [line for line in lines if "replication.replica_manager" in line]
        assert len(roles) == 2 and roles[0].endswith(
            "took up 50 partitions: leader of __consumer_offsets[0-49]"
        )
        assert roles[1].endswith("took up 1 partitions: leader of _schemas[0]")
        assert startup_samples(url) == {}
        created = httpx.post(f"{url}/v1/topics", json={"name": "t", "partitions": 2})
        assert created.status_code == 201
        assert "took up 2 partitions: leader of t[0-1]" in (tmp_path / "new.log").read_text()
        produced = httpx.post(
            f"{url}/v1/topics/t/partitions/0/records?acks=1", json={"records": [{"value": 1}]}
        )
        assert produced.status_code == 200
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    segment = max((data / "t-0").glob("*.log"))
    with segment.open("ab") as f:
        f.write(b"\x00" * 7)  # a torn batch header

    process, url = start(data, tmp_path / "crash.log")
    try:
        text = (tmp_path / "crash.log").read_text()
        assert "53 partitions opened after an unclean shutdown in" in text
        assert "53 partitions checked, 1 partition cut back by 7 bytes; slowest " in text
        cut = [line for line in text.splitlines() if "recovery cut" in line]
        assert len(cut) == 1 and "WARNING" in cut[0]
        assert "t-0: recovery cut 7 bytes of a torn or corrupt tail (0 segments dropped)" in cut[0]
        samples = startup_samples(url)
        assert samples[("sluice_startup_partition_truncated_bytes", "t", "0")] == 7
        assert samples[("sluice_startup_partition_truncated_bytes", "t", "1")] == 0
        assert samples[("sluice_startup_partition_recovery_seconds", "t", "1")] >= 0
        assert len(samples) == 2 * 53  # every partition checked, none else
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0

    process, url = start(data, tmp_path / "clean.log")
    try:
        text = (tmp_path / "clean.log").read_text()
        assert "3 topics, 53 partitions opened after a clean shutdown in" in text
        assert "checked" not in text and startup_samples(url) == {}
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
