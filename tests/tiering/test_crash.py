"""A real node killed (SIGKILL) while it uploads a segment: the manifest never names a missing
or partial object, and after a restart the upload completes and every record is readable
from offset 0, once."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from engine.tiered.manifest import Manifest
from tests.e2e.conftest import Server, read_values, start_server, until
from tests.s3 import MotoServer, S3Proxy, manifest_of

PREFIX = "crash"
CONFIGS = {"remote.storage.enable": True, "segment.bytes": 2048, "local.retention.bytes": 0}


def node(data_dir: Path, proxy: S3Proxy, bucket: str) -> Server:
    return start_server(
        data_dir,
        "--s3-endpoint",
        proxy.url,
        "--s3-bucket",
        bucket,
        "--s3-prefix",
        PREFIX,
        "--tiering-interval",
        "0.05",
    )


def manifest(moto: MotoServer, bucket: str) -> Manifest | None:
    found: Manifest | None = manifest_of(moto, bucket, PREFIX, "t", 0)
    return found


def produce(http: httpx.Client, url: str, first: int, count: int) -> None:
    for start in range(first, first + count, 10):
        records = [{"value": {"n": n}} for n in range(start, start + 10)]
        response = http.post(f"{url}/v1/topics/t/records", json={"records": records})
        assert response.status_code == 200, response.text


def check_manifest(moto: MotoServer, bucket: str, manifest: Manifest) -> None:
    """Every object the manifest names is there, whole."""
    client = moto.client()
    for segment in manifest.segments:
        key = f"{PREFIX}/t/0/{segment.name}"
        data = client.get_object(Bucket=bucket, Key=key + ".log")["Body"].read()
        assert len(data) == segment.size
        assert hashlib.sha256(data).hexdigest() == segment.sha256
        for suffix in (".index", ".timeindex", ".epochs"):
            client.head_object(Bucket=bucket, Key=key + suffix)


def test_a_node_killed_mid_upload_leaves_a_consistent_manifest(
    tmp_path: Path, s3_proxy: S3Proxy, moto: MotoServer, bucket: str
) -> None:
    data_dir = tmp_path / "data"
    server = node(data_dir, s3_proxy, bucket)
    http = httpx.Client(timeout=30)
    try:
        response = http.post(
            f"{server.url}/v1/topics", json={"name": "t", "partitions": 1, "configs": CONFIGS}
        )
        assert response.status_code == 201, response.text
        produce(http, server.url, 0, 100)
        until(lambda: manifest(moto, bucket) is not None, "the first upload")
        committed = manifest(moto, bucket)
        assert committed is not None

        s3_proxy.hold(b".log HTTP/1.1")  # the next segment's data never arrives
        produce(http, server.url, 100, 100)
        assert s3_proxy.held.wait(30)
        server.kill()
        s3_proxy.hold(None)

        after_kill = manifest(moto, bucket)
        assert after_kill is not None
        check_manifest(moto, bucket, after_kill)

        server = node(data_dir, s3_proxy, bucket)
        until(
            lambda: (
                (m := manifest(moto, bucket)) is not None
                and m.end_offset is not None
                and m.end_offset >= 150
            ),
            "the uploads after the restart",
        )
        final = manifest(moto, bucket)
        assert final is not None
        check_manifest(moto, bucket, final)
        assert final.segments[: len(committed.segments)] == committed.segments
        values = read_values(http, server.url, "t", 200)
        assert values == [{"n": n} for n in range(200)]
    finally:
        http.close()
        if server.process.poll() is None:
            assert server.stop() == 0
