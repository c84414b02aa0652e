"""Tiered data for the ingest tests, made as the engine makes it, uploaded per docs/tiering.md.

A `Partition` is a real engine PartitionLog in a temporary directory. Records go in through
`append_as_leader` (encoded with engine.batch, any compression), or inside a Kafka transaction
through `append_transactional_as_leader` and its marker; `upload()` rolls the active
segment and uploads each closed segment's `.log` (and its indexes) to S3 before rewriting the
partition's manifest.json, as the tiering uploader does. Nothing here uses the uploader itself.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import batch as fmt
from engine.config import TopicConfig
from engine.log import AppendInfo, PartitionLog

EPOCH = 3
HOUR_MS = 3_600_000
T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS  # an hour boundary (2026-11-18T...Z)

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Produced:
    """A record as the ingested Parquet must show it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


def record_key(prefix: str, topic: str, partition: int) -> str:
    base = prefix.strip("/")
    return f"{base}/{topic}/{partition}" if base else f"{topic}/{partition}"


class Partition:
    """One partition's engine log and its uploaded segments."""

    def __init__(
        self,
        root: Path,
        s3: Any,
        bucket: str,
        prefix: str,
        topic: str,
        partition: int,
        configs: dict[str, object] | None = None,
    ):
        self.s3, self.bucket, self.prefix = s3, bucket, prefix
        self.topic, self.partition = topic, partition
        config = TopicConfig().with_overrides(configs or {})
        self.log = PartitionLog(root / f"{topic}-{partition}", topic, partition, config)
        self.produced: list[Produced] = []  # what ingest must write: no uncommitted record
        self.open: dict[int, list[Produced]] = {}  # of each producer's open transaction
        self.entries: list[dict[str, Any]] = []
        self.log_start_offset = 0

    def append(
        self,
        records: list[tuple[bytes | None, bytes | None, list[Header], int]],
        *,
        compression: str = "none",
        values_json: bool = False,
    ) -> None:
        """Append records (key, value, headers, timestamp ms) as one leader append."""
        data = fmt.encode_batches(
            records,
            max_batch_bytes=1 << 20,
            compression=fmt.COMPRESSION_CODECS[compression],
            values_json=values_json,
        )
        info = self.log.append_as_leader(data, EPOCH)
        self.log.advance_high_watermark(info.last_offset + 1)
        self.produced.extend(self._produced(info, records))

    def append_transactional(
        self,
        records: list[tuple[bytes | None, bytes | None, list[Header], int]],
        producer_id: int,
        epoch: int = 0,
    ) -> int:
        """Append records inside the transaction of `producer_id` at `epoch`, flagged as JSON
        values; they count as produced once `end_transaction` commits it. The first offset."""
        data = fmt.encode_batches(records, max_batch_bytes=1 << 20, values_json=True)
        info = self.log.append_transactional_as_leader(data, EPOCH, producer_id, epoch)
        self.log.advance_high_watermark(info.last_offset + 1)
        self.open.setdefault(producer_id, []).extend(self._produced(info, records))
        return info.first_offset

    def end_transaction(self, producer_id: int, epoch: int, commit: bool) -> None:
        """The COMMIT or ABORT marker of `producer_id`'s transaction, as its coordinator
        writes it."""
        info = self.log.append_marker_as_leader(producer_id, epoch, commit, 0, EPOCH)
        assert info is not None
        self.log.advance_high_watermark(info.last_offset + 1)
        records = self.open.pop(producer_id, [])
        if commit:
            self.produced.extend(records)

    def _produced(
        self, info: AppendInfo, records: list[tuple[bytes | None, bytes | None, list[Header], int]]
    ) -> list[Produced]:
        return [
            Produced(
                self.topic,
                self.partition,
                info.first_offset + i,
                ts if info.log_append_time < 0 else info.log_append_time,
                key,
                value,
                tuple(headers),
            )
            for i, (key, value, headers, ts) in enumerate(records)
        ]

    def append_commit_marker(self, timestamp: int) -> None:
        """A transaction commit marker: a control batch no reader may show as a record."""
        marker = fmt.encode_batch(
            [fmt.RecordInput(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], timestamp)]
        )
        header = fmt.read_header(marker)
        fmt.set_attributes(
            marker, 0, header, header.attributes | fmt.CONTROL_MASK | fmt.TRANSACTIONAL_MASK
        )
        fmt.set_base_offset(marker, 0, self.log.log_end_offset)
        fmt.set_leader_epoch(marker, 0, EPOCH)
        self.log.append_as_follower(marker)

    def upload(self, log_start_offset: int | None = None) -> None:
        """Roll, upload every closed segment not uploaded yet, then commit the manifest."""
        self.log.roll()
        done = {e["base_offset"] for e in self.entries}
        base = record_key(self.prefix, self.topic, self.partition)
        for segment in self.log.segments[:-1]:
            if segment.base_offset in done:
                continue
            data = segment.path.read_bytes()
            headers = [h for _, h in fmt.scan(data).headers]
            first, last = headers[0].base_offset, headers[-1].last_offset
            name = f"{first:020d}-{last:020d}"
            self.s3.put_object(Bucket=self.bucket, Key=f"{base}/{name}.log", Body=data)
            for suffix, path in (
                ("index", segment.index.path),
                ("timeindex", segment.time_index.path),
            ):
                body = path.read_bytes() if path.exists() else b""
                self.s3.put_object(Bucket=self.bucket, Key=f"{base}/{name}.{suffix}", Body=body)
            self.s3.put_object(
                Bucket=self.bucket, Key=f"{base}/{name}.epochs", Body=f"{EPOCH} {first}\n"
            )
            self.entries.append(
                {
                    "base_offset": first,
                    "last_offset": last,
                    "records": sum(h.record_count for h in headers if not h.is_control),
                    "size": len(data),
                    "first_timestamp": headers[0].first_timestamp,
                    "max_timestamp": max(h.max_timestamp for h in headers),
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "epochs": [[EPOCH, first]],
                    "uploaded_ms": int(time.time() * 1000),
                }
            )
        if log_start_offset is not None:
            self.log_start_offset = log_start_offset
        self.write_manifest()

    def drop_segments_below(self, offset: int) -> None:
        """Remote retention: the log start moves to `offset`, whole segments below it go."""
        self.log_start_offset = offset
        self.entries = [e for e in self.entries if e["last_offset"] >= offset]
        self.write_manifest()

    def write_manifest(self) -> None:
        manifest = {
            "format": 1,
            "topic": self.topic,
            "partition": self.partition,
            "topic_id": hashlib.md5(self.topic.encode()).hexdigest(),
            "leader_epoch": EPOCH,
            "log_start_offset": self.log_start_offset,
            "segments": self.entries,
        }
        key = f"{record_key(self.prefix, self.topic, self.partition)}/manifest.json"
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=json.dumps(manifest).encode())

    def close(self) -> None:
        self.log.close()


def mixed_records(
    count: int, start_ms: int, step_ms: int, seed: int
) -> list[tuple[bytes | None, bytes | None, list[Header], int]]:
    """Records with and without keys; JSON, binary, text and null values; some headers."""
    out: list[tuple[bytes | None, bytes | None, list[Header], int]] = []
    for i in range(count):
        n = seed + i
        key = None if n % 7 == 0 else f"key-{n % 13}".encode()
        kind = n % 5
        value: bytes | None
        if kind == 0:
            value = json.dumps({"id": n, "name": f"user-{n}", "score": n * 0.5}).encode()
        elif kind == 1:
            value = bytes([0xFF, 0xFE, n % 256, 0x00])  # not UTF-8
        elif kind == 2:
            value = f"plain text {n}".encode()  # UTF-8 but not JSON
        elif kind == 3:
            value = None  # a tombstone
        else:
            value = json.dumps([n, "x", None]).encode()  # JSON, but not an object
        headers: list[Header] = (
            [("trace", f"t{n}".encode()), ("nullable", None)] if n % 3 == 0 else []
        )
        out.append((key, value, headers, start_ms + i * step_ms))
    return out


def json_records(
    count: int, start_ms: int, step_ms: int, seed: int
) -> list[tuple[bytes | None, bytes | None, list[Header], int]]:
    """Objects only, as the gateway's JSON produce stores them (batch flagged as JSON)."""
    return [
        (
            f"k{seed + i}".encode(),
            json.dumps({"id": seed + i, "kind": "order", "amount": (seed + i) % 100}).encode(),
            [],
            start_ms + i * step_ms,
        )
        for i in range(count)
    ]
