"""The per-partition manifest (docs/tiering.md): which segments S3 holds, and the commit point
of every upload and remote deletion."""

from __future__ import annotations

from bisect import bisect_right

import msgspec

from engine import txn_index
from engine.errors import EngineError
from engine.producer_state import SNAPSHOT_SUFFIX

FORMAT = 1
OBJECTS = (".log", ".index", ".timeindex", ".epochs")  # every segment's, by suffix


class ManifestError(EngineError):
    code = "MANIFEST_INVALID"


class RemoteSegment(msgspec.Struct, frozen=True):
    """One uploaded segment: offsets [base_offset, last_offset] of its `.log` object."""

    base_offset: int
    last_offset: int
    records: int
    size: int
    first_timestamp: int
    max_timestamp: int
    sha256: str
    epochs: list[tuple[int, int]]  # (leader epoch, first offset) of each epoch it holds
    uploaded_ms: int
    # The entries of its `.txnindex` object, the aborted transactions whose ABORT marker it
    # holds (0: no object, as Kafka's copy ships a transaction index only when there is one);
    # None: uploaded before transaction indexes were, so what it aborts is not known.
    aborted_transactions: int | None = None
    # The producers of its `.snapshot` object, the partition's producer state as of its end
    # (Kafka's remote producer snapshot: what a replica that starts after it loads; 0: no
    # producer, no object); None: uploaded without one, so that state is not known.
    producers: int | None = None

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def name(self) -> str:
        return f"{self.base_offset:020d}-{self.last_offset:020d}"

    @property
    def suffixes(self) -> tuple[str, ...]:
        """Those of its objects: `<name><suffix>`."""
        suffixes: tuple[str, ...] = OBJECTS
        if self.aborted_transactions:
            suffixes = (*suffixes, txn_index.SUFFIX)
        if self.producers:
            suffixes = (*suffixes, SNAPSHOT_SUFFIX)
        return suffixes


class Manifest(msgspec.Struct, frozen=True):
    format: int
    topic: str
    partition: int
    topic_id: str
    leader_epoch: int
    log_start_offset: int
    segments: list[RemoteSegment]

    @property
    def end_offset(self) -> int | None:
        """The offset after the last uploaded one; None while nothing is uploaded."""
        return self.segments[-1].next_offset if self.segments else None

    def segment_for(self, offset: int) -> RemoteSegment | None:
        """The segment holding `offset`, or the first one after it (a gap); None past the end."""
        bases = [s.base_offset for s in self.segments]
        i = max(bisect_right(bases, offset) - 1, 0)
        for segment in self.segments[i:]:
            if offset <= segment.last_offset:
                return segment
        return None

    def encode(self) -> bytes:
        return msgspec.json.encode(self)


def empty_manifest(topic: str, partition: int, topic_id: str, leader_epoch: int) -> Manifest:
    return Manifest(FORMAT, topic, partition, topic_id, leader_epoch, 0, [])


def decode_manifest(data: bytes) -> Manifest:
    """Parse and check a manifest: a malformed one is an error, never read as empty."""
    try:
        manifest = msgspec.json.decode(data, type=Manifest)
    except msgspec.DecodeError as exc:
        raise ManifestError(f"malformed manifest.json: {exc}") from None
    if manifest.format != FORMAT:
        raise ManifestError(f"manifest format {manifest.format} is not {FORMAT}")
    previous = -1
    for segment in manifest.segments:
        if segment.base_offset <= previous or segment.last_offset < segment.base_offset:
            raise ManifestError(f"manifest segments overlap or go back at {segment.name}")
        previous = segment.last_offset
    return manifest


def topic_prefix(prefix: str, topic: str) -> str:
    """`<prefix>/<topic>/` (no leading slash; an empty prefix is the bucket root)."""
    root = prefix.strip("/")
    return f"{root}/{topic}/" if root else f"{topic}/"


def partition_prefix(prefix: str, topic: str, partition: int) -> str:
    """`<prefix>/<topic>/<partition>/`, where a partition's objects and manifest live."""
    return f"{topic_prefix(prefix, topic)}{partition}/"
