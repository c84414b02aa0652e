"""A failing disk under a real server: an ext4 filesystem on a loop device as the data
directory, which then fails the two ways disks do.

- Read-only: ext4's own error handling (`errors=remount-ro`, triggered through its sysfs
  `trigger_fs_error`) remounts it read-only under the running server, as after a metadata I/O
  error. (`mount -o remount,ro` cannot: the kernel refuses, EBUSY, while the server holds files
  open for writing, which it always does.)
- EIO: the filesystem is shut down (FS_IOC_SHUTDOWN without flushing its journal), as when
  the device under it dies: every later call answers EIO and what was not synced is gone.

(This kernel has no device-mapper, so no dm-flakey / dm-error device: the failures come from
the filesystem. tests/engine/test_storage_failure.py injects each failing call on its own.)

Either way the partitions that meet the failure go offline: produce and fetch answer 503
KAFKA_STORAGE_ERROR problem+json naming the partition and the OS error, never a 500 and never
wrong data; /readyz answers 503 and lists them; after the disk is repaired (fsck) a restart
brings back everything acknowledged. The topics use flush.messages=1, so an acknowledgement
means the records were fsynced: on one node, what a dying disk had not synced is lost (durability
beyond that comes from replicas).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import schemathesis

from openapi import SPEC
from tests.e2e.conftest import Ext4, Server, start_server

DURABLE = {"flush.messages": 1}  # every acknowledgement waits for an fsync
PROBLEM_JSON = "application/problem+json"
CONTRACT = schemathesis.openapi.from_path(SPEC)
PRODUCE = CONTRACT["/v1/topics/{topic}/records"]["POST"]
FETCH = CONTRACT["/v1/topics/{topic}/partitions/{partition}/records"]["GET"]
READYZ = CONTRACT["/readyz"]["GET"]


def produce(http: httpx.Client, topic: str, values: list[str]) -> httpx.Response:
    records = [{"value": v} for v in values]
    return http.post(f"/v1/topics/{topic}/records", json={"records": records})


def fetch(http: httpx.Client, topic: str) -> httpx.Response:
    return http.get(
        f"/v1/topics/{topic}/partitions/0/records",
        params={"offset": 0, "max_records": 1000, "timeout_ms": 0},
    )


def values(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [r["value"] for r in answer.json()["records"]]


def assert_storage_error(answer: httpx.Response, partition: str, os_error: str) -> None:
    """503 KAFKA_STORAGE_ERROR problem+json naming the partition and the OS error, as the
    contract says; no Retry-After (waiting does not cure it: a restart does)."""
    assert answer.status_code == 503, answer.text
    (PRODUCE if answer.request.method == "POST" else FETCH).validate_response(answer)
    assert answer.headers["Content-Type"].startswith(PROBLEM_JSON)
    assert "Retry-After" not in answer.headers
    problem = answer.json()
    assert problem["code"] == "KAFKA_STORAGE_ERROR"
    assert problem["type"] == "https://sluice.dev/problems/kafka-storage-error"
    assert f"{partition} is offline" in problem["detail"] and os_error in problem["detail"]
    topic, number = partition.rsplit("-", 1)
    assert (problem["topic"], problem["partition"]) == (topic, int(number))


def offline_gauge(http: httpx.Client) -> float:
    found = re.search(r"^sluice_storage_offline_partitions (\S+)$", http.get("/metrics").text, re.M)
    assert found is not None
    return float(found[1])


def assert_not_ready(http: httpx.Client, offline: dict[str, str]) -> None:
    """/readyz: 503 KAFKA_STORAGE_ERROR, the offline partitions and their errors listed."""
    answer = http.get("/readyz")
    assert answer.status_code == 503, answer.text
    READYZ.validate_response(answer)
    problem = answer.json()
    assert problem["code"] == "KAFKA_STORAGE_ERROR"
    listed = {
        f"{p['topic']}-{p['partition']}": p["error"]
        for p in problem["storage"]["offline_partitions"]
    }
    assert listed.keys() == offline.keys()
    for name, os_error in offline.items():
        assert os_error in listed[name] and name in problem["detail"]
    assert offline_gauge(http) == len(offline)


def restart_after_repair(ext4: Ext4, server: Server, expected: dict[str, list[str]]) -> None:
    """Stopped on the failed disk (no hang, no clean-shutdown marker), repaired, restarted:
    every acknowledged record is there, the partitions are online and take records again."""
    assert server.stop() == 0
    ext4.repair()
    assert not (ext4.mount / "data" / ".clean-shutdown").exists()
    again = start_server(ext4.mount / "data", log=ext4.image.parent / "restart.log")
    try:
        with httpx.Client(base_url=again.url, timeout=30) as http:
            ready = http.get("/readyz")
            assert ready.status_code == 200, ready.text
            READYZ.validate_response(ready)
            assert ready.json()["storage"]["offline_partitions"] == []
            assert offline_gauge(http) == 0
            for topic, acknowledged in expected.items():
                assert values(fetch(http, topic)) == acknowledged
                answer = produce(http, topic, ["after"])
                assert answer.status_code == 200, answer.text
                assert answer.json()["results"][0]["base_offset"] == len(acknowledged)
        assert again.stop() == 0
    finally:
        if again.process.poll() is None:
            again.kill()


def test_a_disk_gone_read_only_takes_its_partitions_offline(ext4: Ext4, tmp_path: Path) -> None:
    server = start_server(ext4.mount / "data", log=tmp_path / "server.log")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for topic in ("t", "u"):
                created = http.post("/v1/topics", json={"name": topic, "configs": DURABLE})
                assert created.status_code == 201, created.text
            acknowledged = {"t": [f"t{i}" for i in range(30)], "u": ["u0", "u1"]}
            for topic, records in acknowledged.items():
                for i in range(0, len(records), 10):
                    assert produce(http, topic, records[i : i + 10]).status_code == 200
            assert http.get("/readyz").status_code == 200

            ext4.remount_read_only_by_error()
            # Nothing has met the failure yet: reads of the open files still answer, rightly.
            assert values(fetch(http, "t")) == acknowledged["t"]

            refused = produce(http, "t", ["never"])
            assert_storage_error(refused, "t-0", "Read-only file system")
            assert "nothing was appended" in refused.json()["detail"]
            # Offline for good in this run: produce and fetch alike, though reads would work.
            assert_storage_error(produce(http, "t", ["never"]), "t-0", "Read-only file system")
            assert_storage_error(fetch(http, "t"), "t-0", "Read-only file system")
            # The other partition has not met the failure: it still serves what it has.
            assert values(fetch(http, "u")) == acknowledged["u"]
            assert_not_ready(http, {"t-0": "Read-only file system"})
        restart_after_repair(ext4, server, acknowledged)
    finally:
        if server.process.poll() is None:
            server.kill()
    log = (tmp_path / "server.log").read_text()
    assert "t-0 is offline: writing the log failed" in log
    assert "Traceback" not in log


def test_a_dead_device_answering_eio_takes_its_partitions_offline(
    ext4: Ext4, tmp_path: Path
) -> None:
    server = start_server(ext4.mount / "data", log=tmp_path / "server.log")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for topic in ("t", "u"):
                created = http.post("/v1/topics", json={"name": topic, "configs": DURABLE})
                assert created.status_code == 201, created.text
            acknowledged = {"t": [f"t{i}" for i in range(25)], "u": [f"u{i}" for i in range(5)]}
            for topic, records in acknowledged.items():
                for i in range(0, len(records), 5):
                    assert produce(http, topic, records[i : i + 5]).status_code == 200

            ext4.die()
            # A produce meets it writing, a fetch reading: neither serves anything after it.
            refused = produce(http, "t", ["never"])
            assert_storage_error(refused, "t-0", "Input/output error")
            assert "nothing was appended" in refused.json()["detail"]
            assert_storage_error(fetch(http, "t"), "t-0", "Input/output error")
            assert_storage_error(fetch(http, "u"), "u-0", "Input/output error")
            assert_storage_error(produce(http, "u", ["never"]), "u-0", "Input/output error")
            assert_not_ready(http, {"t-0": "Input/output error", "u-0": "Input/output error"})
        restart_after_repair(ext4, server, acknowledged)
    finally:
        if server.process.poll() is None:
            server.kill()
    log = (tmp_path / "server.log").read_text()
    assert "u-0 is offline: reading the log failed" in log
    assert "Traceback" not in log
