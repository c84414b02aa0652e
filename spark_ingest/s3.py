"""boto3 clients for the S3 endpoint, and S3 failures turned into one-line IngestErrors."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from spark_ingest.errors import IngestError

# Few retries and short connect timeouts: an unreachable endpoint is reported in seconds.
_CONFIG = Config(
    retries={"max_attempts": 3, "mode": "standard"},
    connect_timeout=5,
    read_timeout=120,
)


@functools.cache
def client(endpoint: str | None) -> Any:
    """One S3 client per endpoint and process (clients are thread-safe); None is AWS itself."""
    try:
        return boto3.session.Session().client("s3", endpoint_url=endpoint, config=_CONFIG)
    except ValueError as exc:  # botocore's message for a malformed endpoint URL
        raise IngestError(f"bad S3 endpoint {endpoint!r}: {exc}") from exc


@contextlib.contextmanager
def translated(what: str, bucket: str) -> Iterator[None]:
    """Re-raise boto3's errors from the block as IngestError naming `what` failed."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = error.get("Code", "")
        if code == "NoSuchBucket":
            raise IngestError(f"bucket {bucket!r} does not exist") from exc
        raise IngestError(f"{what}: {code or 'error'}: {error.get('Message', exc)}") from exc
    except BotoCoreError as exc:  # unreachable endpoint, missing credentials, timeouts
        raise IngestError(f"{what}: {exc}") from exc


def is_missing(exc: ClientError) -> bool:
    """Whether a GET failed because the object does not exist."""
    return exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404")


def get(endpoint: str | None, bucket: str, key: str) -> bytes | None:
    """The object's bytes, or None when it does not exist."""
    with translated(f"reading s3://{bucket}/{key}", bucket):
        try:
            response = client(endpoint).get_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if is_missing(exc):
                return None
            raise
        data: bytes = response["Body"].read()
        return data


def put(endpoint: str | None, bucket: str, key: str, data: bytes) -> None:
    """Write an object with one PUT, which S3 makes visible all at once or not at all."""
    with translated(f"writing s3://{bucket}/{key}", bucket):
        client(endpoint).put_object(Bucket=bucket, Key=key, Body=data)


def delete(endpoint: str | None, bucket: str, key: str) -> None:
    """Remove an object (S3 answers a missing one with success too)."""
    with translated(f"deleting s3://{bucket}/{key}", bucket):
        client(endpoint).delete_object(Bucket=bucket, Key=key)


def list_prefixes(endpoint: str | None, bucket: str, prefix: str) -> list[str]:
    """The 'directories' directly under `prefix` (which ends with '/'), in key order."""
    found: list[str] = []
    with translated(f"listing s3://{bucket}/{prefix}", bucket):
        pages = client(endpoint).get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
            found.extend(entry["Prefix"] for entry in page.get("CommonPrefixes", []))
    return found


def split_url(url: str) -> tuple[str, str]:
    """Bucket and key of an `s3://bucket/key` URL (the key without leading or trailing '/')."""
    rest = url.removeprefix("s3://")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise IngestError(f"bad S3 URL {url!r}: expected s3://bucket/key")
    return bucket, key.strip("/")
