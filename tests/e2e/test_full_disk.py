"""A full disk (a real 8 MiB tmpfs as the data directory): produce answers 507
INSUFFICIENT_STORAGE with Retry-After, nothing acknowledged is lost or half-written,
/readyz says the disk is full, and produce works again by itself once there is space."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import start_server


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:  # as the cluster tests, this needs root
        pytest.fail(f"mounting a tmpfs needs root: {done.stderr.strip()}", pytrace=False)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_answers_507_and_recovers(small_disk: Path) -> None:
    filler = small_disk / "filler"
    server = start_server(small_disk / "data")
    http = httpx.Client(base_url=server.url, timeout=30)
    try:
        http.post("/v1/topics", json={"name": "t"}).raise_for_status()
        # Take most of the space, then produce until the disk refuses.
        with filler.open("wb") as f:
            f.write(b"\0" * (7 << 20))
        value = "x" * 2000
        acknowledged, refused = 0, None
        for _ in range(2000):
            answer = http.post("/v1/topics/t/records", json={"records": [{"value": value}] * 20})
            if answer.status_code != 200:
                refused = answer
                break
            acknowledged += 20
        assert refused is not None, "the disk never filled"
        assert refused.status_code == 507, refused.text
        problem = refused.json()
        assert problem["code"] == "INSUFFICIENT_STORAGE" and "disk is full" in problem["detail"]
        assert refused.headers["Retry-After"] == "1"
        assert acknowledged > 0
        ready = http.get("/readyz").json()
        assert ready["status"] == "ready" and ready["storage"]["full"] is True

        # Everything acknowledged is there, nothing of the refused request.
        fetched, offset = 0, 0
        while True:
            page = http.get(
                "/v1/topics/t/partitions/0/records",
                params={"offset": offset, "max_records": 500, "timeout_ms": 0},
            ).json()
            fetched += len(page["records"])
            offset = page["next_offset"]
            if offset >= page["high_watermark"]:
                break
        assert fetched == acknowledged == page["high_watermark"]

        os.unlink(filler)  # space comes back: no restart needed
        again = http.post("/v1/topics/t/records", json={"records": [{"value": "after"}]})
        assert again.status_code == 200, again.text
        assert again.json()["results"][0]["base_offset"] == acknowledged
        assert http.get("/readyz").json()["storage"]["full"] is False
    finally:
        http.close()
        server.stop()
