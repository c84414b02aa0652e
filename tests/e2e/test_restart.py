"""Durability across process death, and TLS with HTTP/2 through the real application."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import httpx

from tests.e2e.conftest import Server, start_server
from tests.tls import write_self_signed


def test_everything_acknowledged_survives_sigkill(server: Server) -> None:
    url = server.url
    acked: dict[int, list[int]] = {0: [], 1: [], 2: []}
    with httpx.Client(base_url=url) as http:
        assert http.post("/v1/topics", json={"name": "t", "partitions": 3}).status_code == 201
        for request in range(60):
            records = [
                {"key": f"k{request}-{i}", "value": {"r": request, "i": i}} for i in range(25)
            ]
            answer = http.post("/v1/topics/t/records", json={"records": records})
            assert answer.status_code == 200
            for result in answer.json()["results"]:
                acked[result["partition"]].extend(
                    range(result["base_offset"], result["base_offset"] + result["count"])
                )
        replay = http.post(
            "/v1/topics/t/records",
            headers={"Idempotency-Key": "before-crash"},
            json={"records": [{"value": "once"}]},
        ).json()
    server.kill()

    again = start_server(server.data_dir)
    try:
        with httpx.Client(base_url=again.url) as http:
            for partition, offsets in acked.items():
                fetched: list[int] = []
                offset = 0
                while True:
                    page = http.get(
                        f"/v1/topics/t/partitions/{partition}/records",
                        params={"offset": offset, "max_records": 1000, "timeout_ms": 0},
                    ).json()
                    fetched.extend(r["offset"] for r in page["records"])
                    if not page["records"]:
                        break
                    offset = page["next_offset"]
                assert set(offsets) <= set(fetched)
                assert fetched == list(range(len(fetched)))
            retried = http.post(
                "/v1/topics/t/records",
                headers={"Idempotency-Key": "before-crash"},
                json={"records": [{"value": "once"}]},
            )
            assert retried.json() == replay
    finally:
        assert again.stop() == 0


def test_tls_negotiates_h2_and_http1(tmp_path: Path) -> None:
    cert, key = write_self_signed(tmp_path)
    tls = start_server(tmp_path / "data", "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        url = tls.url.replace("127.0.0.1", "localhost")
        assert url.startswith("https://")
        for flag, version in (("--http2", "HTTP/2"), ("--http1.1", "HTTP/1.1")):
            done = subprocess.run(
                ["curl", "-s", "-i", "--cacert", str(cert), flag, f"{url}/v1/topics"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            status_line = done.stdout.splitlines()[0]
            assert status_line.startswith(version) and " 200" in status_line
        with httpx.Client(http2=True, verify=ssl.create_default_context(cafile=cert)) as http:
            answer = http.post(f"{url}/v1/topics", json={"name": "secure"})
            assert answer.http_version == "HTTP/2" and answer.status_code == 201
    finally:
        assert tls.stop() == 0
