"""Where outputs go: a local path or an S3 object, read whole and replaced atomically.

Local writes go to a temporary name derived from the final one, are fsynced and renamed, so a
crash leaves either the old file or the new one (and a rerun overwrites the same temporary
name). An S3 PUT is atomic by itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from spark_ingest import s3


class Location(Protocol):
    """A file or object that can be read whole and replaced atomically."""

    def read(self) -> bytes | None:
        """The contents, or None when it does not exist."""
        ...

    def write(self, data: bytes, midway: Callable[[], None] | None = None) -> None:
        """Replace the contents atomically; `midway` (crash injection) is called with half of
        the data written where a crash would leave it."""
        ...

    def delete(self) -> None:
        """Remove it (nothing to do when it does not exist)."""
        ...

    def child(self, *parts: str) -> Location:
        """The location `parts` below this one (a directory or key prefix)."""
        ...

    def sibling(self, name: str) -> Location:
        """The location named `name` beside this one."""
        ...


@dataclass(frozen=True)
class LocalFile:
    path: Path

    def read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def write(self, data: bytes, midway: Callable[[], None] | None = None) -> None:
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True)
        temporary = directory / f".{self.path.name}.tmp"
        with open(temporary, "wb") as out:
            half = len(data) // 2
            out.write(data[:half])
            if midway is not None:
                out.flush()
                midway()
            out.write(data[half:])
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    def child(self, *parts: str) -> LocalFile:
        return LocalFile(self.path.joinpath(*parts))

    def sibling(self, name: str) -> LocalFile:
        return LocalFile(self.path.with_name(name))

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class S3Object:
    endpoint: str | None
    bucket: str
    key: str

    def read(self) -> bytes | None:
        return s3.get(self.endpoint, self.bucket, self.key)

    def write(self, data: bytes, midway: Callable[[], None] | None = None) -> None:
        if midway is not None:  # a PUT is all or nothing: a crash during it, before it
            midway()
        s3.put(self.endpoint, self.bucket, self.key, data)

    def delete(self) -> None:
        s3.delete(self.endpoint, self.bucket, self.key)

    def child(self, *parts: str) -> S3Object:
        return S3Object(self.endpoint, self.bucket, "/".join(p for p in (self.key, *parts) if p))

    def sibling(self, name: str) -> S3Object:
        parent = self.key.rpartition("/")[0]
        return S3Object(self.endpoint, self.bucket, f"{parent}/{name}" if parent else name)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def location(url: str, endpoint: str | None) -> LocalFile | S3Object:
    """`s3://bucket/key` (on `endpoint`) or a local path, made absolute."""
    if url.startswith("s3://"):
        bucket, key = s3.split_url(url)
        return S3Object(endpoint, bucket, key)
    return LocalFile(Path(url).absolute())
