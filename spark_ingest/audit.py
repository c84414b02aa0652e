"""Audit a run: the rows it ingested per partition against the manifests' record counts.

Every offset the gateway acknowledged ends up in a manifest, whose `records` counts the data
records of each segment. A segment the run covered whole is checked by that count; one it
covered in part (a run that started at a log start inside a segment, or stopped at an
undecided transaction) is counted by decoding the object. The records of aborted
transactions the run left out (its summary says how many) are not expected. Offsets no
longer in the manifest cannot be checked and fail the audit too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_ingest import decode, manifest, s3
from spark_ingest.errors import IngestError
from spark_ingest.manifest import Manifest


@dataclass(frozen=True)
class Finding:
    """The audit of one partition's range."""

    topic: str
    partition: int
    start: int
    end: int
    ingested: int
    expected: int | None  # None: not verifiable
    note: str

    @property
    def ok(self) -> bool:
        return self.expected == self.ingested

    def line(self) -> str:
        head = f"{self.topic}/{self.partition} [{self.start}, {self.end})"
        if self.ok:
            return f"ok        {head}: {self.ingested} rows"
        if self.expected is None:
            return f"UNCHECKED {head}: {self.ingested} rows; {self.note}"
        told = f"ingested {self.ingested}, manifest says {self.expected}"
        return f"MISMATCH  {head}: {told}" + (f" ({self.note})" if self.note else "")


def expected_records(
    m: Manifest, start: int, end: int, endpoint: str | None, bucket: str, prefix: str
) -> tuple[int | None, str]:
    """Data records the manifest holds in [start, end), or None and why it cannot tell."""
    total = 0
    covered = start
    for s in m.segments:
        if s.last_offset < start or s.base_offset >= end:
            continue
        if s.base_offset > covered:
            return None, f"offsets [{covered}, {s.base_offset}) are not in the manifest"
        if start <= s.base_offset and s.last_offset < end:
            total += s.records
        else:
            key = manifest.segment_key(prefix, m.topic, m.partition, s.base_offset, s.last_offset)
            where = f"s3://{bucket}/{key}"
            data = s3.get(endpoint, bucket, key)
            if data is None:
                return None, f"segment {where} is missing"
            decode.verify(data, s.size, s.sha256, where)
            total += decode.count_records(data, start, end, where)
        covered = s.last_offset + 1
    if covered < end:
        return None, f"offsets [{covered}, {end}) are not in the manifest"
    return total, ""


def audit(summary: dict[str, Any], endpoint: str | None, bucket: str, prefix: str) -> list[Finding]:
    """One finding per partition range of `summary`."""
    topics = sorted({p["topic"] for p in summary["partitions"]})
    manifests = {
        (m.topic, m.partition): m for m in manifest.load_topics(endpoint, bucket, prefix, topics)
    }
    findings: list[Finding] = []
    for p in summary["partitions"]:
        topic, partition, start, end = p["topic"], p["partition"], p["start"], p["end"]
        m = manifests.get((topic, partition))
        if m is None:
            raise IngestError(f"partition {topic}/{partition} has no manifest in s3://{bucket}")
        expected, note = expected_records(m, start, end, endpoint, bucket, prefix)
        if expected is not None and p["aborted"]:
            expected -= p["aborted"]
            note = f"its count less the {p['aborted']} records of aborted transactions"
        findings.append(Finding(topic, partition, start, end, p["rows"], expected, note))
    return findings
