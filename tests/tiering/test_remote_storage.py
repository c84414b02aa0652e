"""Segment files go up to S3 as one PUT up to the multipart size (no transfer manager and its
threads: their CPU is CPU the event loop waits for) and in parts past it; either way the
object is the file, byte for byte. boto3 is imported only once S3 is used."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.tiered.remote import MULTIPART_BYTES, RemoteStorage, S3Location
from tests.s3 import MotoServer


@pytest.fixture
def storage(moto: MotoServer, bucket: str) -> RemoteStorage:
    return RemoteStorage(S3Location(moto.url, bucket, "p/"))


def _object(moto: MotoServer, bucket: str, key: str) -> tuple[bytes, str]:
    answer = moto.client().get_object(Bucket=bucket, Key=key)
    return answer["Body"].read(), answer["ETag"]


def test_a_file_up_to_the_multipart_size_goes_up_in_one_put_without_threads(
    storage: RemoteStorage, moto: MotoServer, bucket: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    for size in (0, 65_536, MULTIPART_BYTES):
        path = tmp_path / f"{size}.log"
        path.write_bytes(os.urandom(size))
        with monkeypatch.context() as patch:
            patch.setattr(threading.Thread, "start", counted)
            storage.upload_file(f"p/{size}.log", str(path))
        data, etag = _object(moto, bucket, f"p/{size}.log")
        assert data == path.read_bytes()
        assert "-" not in etag, "one PUT, not a multipart upload"
    assert started == []


def test_a_file_past_the_multipart_size_goes_up_in_parts(
    storage: RemoteStorage, moto: MotoServer, bucket: str, tmp_path: Path
) -> None:
    path = tmp_path / "big.log"
    path.write_bytes(os.urandom(MULTIPART_BYTES + 1))
    storage.upload_file("p/big.log", str(path))
    data, etag = _object(moto, bucket, "p/big.log")
    assert data == path.read_bytes()
    assert etag.strip('"').endswith("-2")


def test_a_node_and_the_cli_start_without_importing_boto3() -> None:
    """boto3's imports took an eighth of a second of every start; a node without tiering and
    every CLI call need none of it."""
    code = (
        "import sys, gateway.app, gateway.cli.main, gateway.server, engine.tiered.remote; "
        "print('boto3' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
