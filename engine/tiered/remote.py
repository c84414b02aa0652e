"""S3 through boto3, synchronous (callers run it in threads): segment objects, the manifest
with conditional writes, ranged reads and deletions. Credentials come from boto3's chain.
boto3 itself is imported by the first RemoteStorage: a node without tiering (and every CLI
call) starts without its eighth of a second of imports."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import botocore.exceptions

from engine.errors import EngineError, RemoteStorageError
from engine.tiered.manifest import Manifest, decode_manifest

MULTIPART_BYTES = 8 * 1024 * 1024  # segments above this go up in parts of this size
UPLOAD_THREADS = 4  # parts in flight per upload: bounds memory to about 4 x 8 MiB
DELETE_BATCH = 1000  # S3's DeleteObjects limit


class ManifestConflict(EngineError):
    """The manifest changed since it was read (another leader wrote it): re-read it."""

    code = "MANIFEST_CONFLICT"


@dataclass(frozen=True)
class S3Location:
    endpoint: str | None  # None: AWS's own endpoints
    bucket: str
    prefix: str = ""
    region: str | None = None


class RemoteStorage:
    """One bucket and prefix; thread-safe (boto3 clients are)."""

    def __init__(self, location: S3Location, *, timeout_s: float = 10.0) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.location = location
        config = Config(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={"max_attempts": 2, "mode": "standard"},
            max_pool_connections=2 * UPLOAD_THREADS + 4,
        )
        self._s3: Any = boto3.client(
            "s3",
            endpoint_url=location.endpoint,
            region_name=location.region or "us-east-1",
            config=config,
        )
        self._transfer = TransferConfig(
            multipart_threshold=MULTIPART_BYTES,
            multipart_chunksize=MULTIPART_BYTES,
            max_concurrency=UPLOAD_THREADS,
            use_threads=True,
        )

    @property
    def bucket(self) -> str:
        return self.location.bucket

    def check(self) -> None:
        """Fail with RemoteStorageError unless the bucket answers."""
        self._call(self._s3.head_bucket, Bucket=self.bucket)

    def upload_file(self, key: str, path: str) -> None:
        """Upload a whole file: one PUT up to MULTIPART_BYTES (boto3's transfer manager, which
        starts its threads for every call, would cost 5.3 ms of CPU a 64 KiB file against 3.0
        ms: CPU the event loop waits for, for the GIL), parallel parts past it."""
        with open(path, "rb") as body:
            if os.fstat(body.fileno()).st_size <= self._transfer.multipart_threshold:
                self._call(self._s3.put_object, Bucket=self.bucket, Key=key, Body=body)
                return
        self._transfer_call(key, self._s3.upload_file, path)

    def upload_stream(self, key: str, stream: Any) -> None:
        """Upload a readable stream, in parts past MULTIPART_BYTES (a few parts buffered)."""
        self._transfer_call(key, self._s3.upload_fileobj, stream)

    def _transfer_call(self, key: str, method: Any, source: Any) -> None:
        import boto3.exceptions

        try:
            method(source, self.bucket, key, Config=self._transfer)
        except (
            botocore.exceptions.BotoCoreError,
            botocore.exceptions.ClientError,
            boto3.exceptions.S3UploadFailedError,
        ) as exc:
            raise RemoteStorageError(f"upload of s3://{self.bucket}/{key} failed: {exc}") from exc

    def put(self, key: str, data: bytes) -> None:
        self._call(self._s3.put_object, Bucket=self.bucket, Key=key, Body=data)

    def get(self, key: str) -> bytes:
        answer = self._call(self._s3.get_object, Bucket=self.bucket, Key=key)
        return self._body(answer, key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Bytes [start, start + length) of an object (fewer at its end)."""
        answer = self._call(
            self._s3.get_object,
            Bucket=self.bucket,
            Key=key,
            Range=f"bytes={start}-{start + length - 1}",
        )
        return self._body(answer, key)

    def read_manifest(self, key: str) -> tuple[Manifest, str] | None:
        """The manifest and its ETag (for the next conditional write); None if there is none."""
        try:
            answer = self._s3.get_object(Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise RemoteStorageError(f"s3://{self.bucket}/{key}: {exc}") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise RemoteStorageError(f"s3://{self.bucket}/{key}: {exc}") from exc
        return decode_manifest(self._body(answer, key)), str(answer["ETag"])

    def write_manifest(self, key: str, manifest: Manifest, etag: str | None) -> str:
        """Replace the manifest only if it is still the one read (`etag`; None: if absent).
        Raises ManifestConflict when another writer got there first; returns the new ETag."""
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        try:
            answer = self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=manifest.encode(),
                ContentType="application/json",
                **condition,
            )
        except botocore.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                raise ManifestConflict(f"s3://{self.bucket}/{key} changed meanwhile") from None
            raise RemoteStorageError(f"s3://{self.bucket}/{key}: {exc}") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise RemoteStorageError(f"s3://{self.bucket}/{key}: {exc}") from exc
        return str(answer["ETag"])

    def delete(self, keys: Iterable[str]) -> None:
        batch = [{"Key": key} for key in keys]
        for i in range(0, len(batch), DELETE_BATCH):
            answer = self._call(
                self._s3.delete_objects,
                Bucket=self.bucket,
                Delete={"Objects": batch[i : i + DELETE_BATCH], "Quiet": True},
            )
            if answer.get("Errors"):
                first = answer["Errors"][0]
                raise RemoteStorageError(
                    f"deleting {first.get('Key')} failed: {first.get('Message')}"
                )

    def list_keys(self, prefix: str) -> list[str]:
        pages = self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        try:
            return [item["Key"] for page in pages for item in page.get("Contents", ())]
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise RemoteStorageError(f"listing s3://{self.bucket}/{prefix}: {exc}") from exc

    def _call(self, method: Any, **kwargs: Any) -> Any:
        try:
            return method(**kwargs)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            key = kwargs.get("Key", "")
            raise RemoteStorageError(f"s3://{self.bucket}/{key}: {exc}") from exc

    def _body(self, answer: Any, key: str) -> bytes:
        try:
            return bytes(answer["Body"].read())
        except (botocore.exceptions.BotoCoreError, OSError) as exc:
            raise RemoteStorageError(f"reading s3://{self.bucket}/{key}: {exc}") from exc
