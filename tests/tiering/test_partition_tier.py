"""The engine's side of tiering against moto_server: uploads and the manifest as the commit
point, conditional writes that a stale leader cannot win, a new leader whose segments are cut
elsewhere continuing from the manifest, local retention waiting for S3, and remote reads."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from engine import batch as fmt
from engine import producer_state, txn_index
from engine.config import TopicConfig
from engine.errors import CorruptRecord, OffsetMovedToTieredStorage
from engine.log import PartitionLog
from engine.producer_state import ProducerState
from engine.segment import LogSegment
from engine.tiered import shipping
from engine.tiered.manifest import Manifest, RemoteSegment, decode_manifest
from engine.tiered.reader import RemoteReader
from engine.tiered.remote import ManifestConflict, RemoteStorage, S3Location
from engine.tiered.shipping import NICENESS, OBJECTS_IN_FLIGHT, Shipper, ShipperFailed, scan_segment
from engine.tiered.uploader import PartitionTier, Ship, StaleLeader
from replication.tiering import TieringService, TieringSettings
from tests.s3 import CREDENTIALS, MotoServer

TIERED = {"remote.storage.enable": True, "local.retention.bytes": 0}
START_WAIT_S = 60.0  # for a spawned shipper process to run its start; never reached when right


def make_log(directory: Path, segment_bytes: int) -> PartitionLog:
    config = TopicConfig().with_overrides({**TIERED, "segment.bytes": segment_bytes})
    return PartitionLog(directory, "t", 0, config)


RECENT_MS = int(time.time() * 1000) - 3_600_000  # within retention.ms whatever the date


def fill(log: PartitionLog, batches: int, epoch: int = 0, per_batch: int = 5) -> None:
    for b in range(batches):
        values = [b"v%d-%d" % (b, i) for i in range(per_batch)]
        log.append_as_leader(
            fmt.encode_batch([fmt.RecordInput(None, v, [], RECENT_MS) for v in values]),
            epoch,
        )
    log.advance_high_watermark(log.log_end_offset)


def copy_batches(source: PartitionLog, target: PartitionLog) -> None:
    """Give `target` the same batches, appended as a follower (its own segment cuts)."""
    for segment in source.segments:
        for _, data in segment.batches():
            target.append_as_follower(data)
    target.advance_high_watermark(target.log_end_offset)


@pytest.fixture(scope="module")
def shipper(moto: MotoServer) -> Iterator[Shipper]:
    """Uploads run in a process of their own, as in a node (which takes its credentials from
    the environment as it starts)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS.items():
            patch.setenv(name, value)
        processes = Shipper(1, S3Location(moto.url, "any", "p"))
    yield processes
    processes.close()


@pytest.fixture
def ship(shipper: Shipper) -> Ship:
    return shipper.ship


@pytest.fixture
def storage(moto: MotoServer, bucket: str) -> RemoteStorage:
    return RemoteStorage(S3Location(moto.url, bucket, "p"))


def test_uploads_commit_through_the_manifest_and_local_retention_waits(
    tmp_path: Path,
    storage: RemoteStorage,
    ship: Ship,
    moto: MotoServer,
    bucket: str,
) -> None:
    log = make_log(tmp_path / "a", 600)
    fill(log, 20)
    closed = len(log.segments) - 1
    assert closed >= 3
    assert log.apply_retention() == 0  # nothing is on S3 yet: nothing local may go
    tier = PartitionTier(storage, "p", log, "id-1", ship)
    for segment in tier.pending():
        tier.upload(segment, 0)
    manifest = decode_manifest(
        moto.client().get_object(Bucket=bucket, Key="p/t/0/manifest.json")["Body"].read()
    )
    assert len(manifest.segments) == closed
    assert manifest.end_offset == log.segments[-1].base_offset == log.remote_end_offset
    assert tier.pending() == []
    assert log.apply_retention() == closed
    assert log.local_log_start_offset == manifest.end_offset and log.log_start_offset == 0
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries] == [(0, 0)]  # kept
    with pytest.raises(OffsetMovedToTieredStorage):
        log.read(0, 1024)

    reader = RemoteReader(storage, "p", cache_bytes=1 << 20)
    offset, seen = 0, []
    while offset < manifest.end_offset:
        data = reader.read(manifest, offset, 100)  # smaller than a batch: one whole batch
        assert data
        for record in fmt.iter_records(data):
            if record.offset >= offset:
                seen.append(record.offset)
        offset = fmt.scan(data, check_crc=False).headers[-1][1].next_offset
    assert seen == list(range(manifest.end_offset))
    assert reader.read(manifest, manifest.end_offset, 100) == b""
    assert reader.cache.hits > 0


def test_a_stale_leader_cannot_overwrite_a_newer_manifest(
    tmp_path: Path, storage: RemoteStorage, ship: Ship
) -> None:
    old = make_log(tmp_path / "old", 600)
    fill(old, 20, epoch=0)
    new = make_log(tmp_path / "new", 600)
    copy_batches(old, new)
    stale, current = (
        PartitionTier(storage, "p", old, "id", ship),
        PartitionTier(storage, "p", new, "id", ship),
    )
    stale.refresh()
    current.refresh()
    first = current.pending()[0]
    current.upload(first, 3)  # the new leader, in epoch 3
    with pytest.raises(ManifestConflict):
        stale.upload(stale.pending()[0], 0)  # read before the new leader wrote: ETag moved
    with pytest.raises(StaleLeader):
        stale.upload(stale.pending()[0], 0)  # re-read: written in a newer epoch
    assert [s.base_offset for s in current.refresh().segments] == [first.base_offset]


def test_a_new_leader_continues_from_the_manifest_where_its_segments_differ(
    tmp_path: Path, storage: RemoteStorage, ship: Ship
) -> None:
    leader = make_log(tmp_path / "leader", 600)
    fill(leader, 12)
    follower = make_log(tmp_path / "follower", 1000)  # other segment boundaries
    copy_batches(leader, follower)
    tier = PartitionTier(storage, "p", leader, "id", ship)
    tier.upload(tier.pending()[0], 0)
    uploaded_to = tier.manifest.end_offset if tier.manifest else None
    assert uploaded_to is not None
    successor = PartitionTier(storage, "p", follower, "id", ship)
    successor.refresh()
    for segment in successor.pending():
        successor.upload(segment, 1)
    manifest = successor.refresh()
    starts = [s.base_offset for s in manifest.segments]
    assert starts[0] == 0 and starts[1] == uploaded_to  # cut mid-segment, at a batch
    for before, after in zip(manifest.segments, manifest.segments[1:], strict=False):
        assert after.base_offset == before.next_offset
    assert manifest.leader_epoch == 1
    reader = RemoteReader(storage, "p")
    data = reader.read(manifest, uploaded_to, 1 << 20)
    assert fmt.read_header(data).base_offset == uploaded_to


def test_an_earlier_topic_of_the_same_name_is_not_continued(
    tmp_path: Path, storage: RemoteStorage, ship: Ship
) -> None:
    log = make_log(tmp_path / "a", 600)
    fill(log, 6)
    first = PartitionTier(storage, "p", log, "old-id", ship)
    first.upload(first.pending()[0], 0)
    again = make_log(tmp_path / "b", 600)
    fill(again, 6)
    second = PartitionTier(storage, "p", again, "new-id", ship)
    assert second.refresh().segments == []
    second.upload(second.pending()[0], 0)
    assert second.refresh().topic_id == "new-id"


PRODUCERS = (1000, 2000, 3000)


def in_txn(log: PartitionLog, producer_id: int, value: bytes) -> None:
    batch = fmt.encode_batch([fmt.RecordInput(None, value, [], RECENT_MS)])
    log.append_transactional_as_leader(batch, 0, producer_id, 0)
    log.advance_high_watermark(log.log_end_offset)


def marker(log: PartitionLog, producer_id: int, commit: bool) -> None:
    log.append_marker_as_leader(producer_id, 0, commit, 0, 0)
    log.advance_high_watermark(log.log_end_offset)


def transactions(log: PartitionLog) -> None:
    """An aborted transaction whose records and ABORT marker lie in different segments (a
    committed one open across it), one aborted within a segment, plain batches around them and
    after, so that every marker is in a closed segment."""
    a, b, c = PRODUCERS
    fill(log, 2)
    in_txn(log, a, b"a1")
    fill(log, 6)
    in_txn(log, b, b"b1")
    in_txn(log, a, b"a2")
    marker(log, a, commit=False)
    fill(log, 2)
    in_txn(log, b, b"b2")
    marker(log, b, commit=True)
    in_txn(log, c, b"c1")
    marker(log, c, commit=False)
    fill(log, 8)


def batch_bounds(log: PartitionLog, end: int) -> list[int]:
    """Every batch's base offset below `end`, and `end`."""
    bases = [
        h.base_offset
        for s in log.segments
        for _, data in s.batches()
        for h in [fmt.read_header(data)]
    ]
    return sorted({b for b in bases if b < end} | {end})


def check_aborted_reads(reader: RemoteReader, manifest: Manifest, log: PartitionLog) -> None:
    """Over every range of whole batches S3 holds, the aborted transactions its indexes give
    are those the log's own indexes give."""
    end = manifest.end_offset
    assert end is not None
    bounds = batch_bounds(log, end)
    for i, start in enumerate(bounds):
        for stop in bounds[i + 1 :]:
            remote = reader.aborted_transactions(manifest, start, stop)
            assert remote is not None
            assert sorted(remote) == sorted(log.aborted_transactions(start, stop)), (start, stop)


def test_a_segments_aborted_transactions_go_up_beside_it_and_are_read_back(
    tmp_path: Path, storage: RemoteStorage, ship: Ship, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Kafka's copy: a segment holding ABORT markers goes up with its `.txnindex` (the local
    file's bytes, Kafka's format), one holding none without; the manifest counts the entries.
    A read_committed reader's aborted transactions come back from them, each object GET once."""
    log = make_log(tmp_path, 600)
    transactions(log)
    local = {
        s.base_offset: txn_index.index_path(log.directory, s.base_offset) for s in log.segments
    }
    tier = PartitionTier(storage, "p", log, "id", ship)
    for segment in tier.pending():
        tier.upload(segment, 0)
    manifest = tier.refresh()
    assert manifest.end_offset == log.segments[-1].base_offset
    keys = set(storage.list_keys("p/t/0/"))
    with_entries = 0
    for remote in manifest.segments:
        path, key = local[remote.base_offset], f"p/t/0/{remote.name}{txn_index.SUFFIX}"
        entries = txn_index.read_entries(path)
        assert remote.aborted_transactions == len(entries)
        if entries:
            with_entries += 1
            assert storage.get(key) == path.read_bytes()
            assert txn_index.SUFFIX in remote.suffixes
        else:
            assert key not in keys and txn_index.SUFFIX not in remote.suffixes
    assert with_entries >= 1
    assert sum(s.aborted_transactions or 0 for s in manifest.segments) == 2  # a's and c's

    reader = RemoteReader(storage, "p")
    fetched: list[str] = []
    get = storage.get

    def counted(key: str) -> bytes:
        fetched.append(key)
        return get(key)

    monkeypatch.setattr(storage, "get", counted)
    check_aborted_reads(reader, manifest, log)
    indexes = [k for k in fetched if k.endswith(txn_index.SUFFIX)]
    assert indexes and len(indexes) == len(set(indexes))  # cached after the first read


def test_a_new_leader_ships_the_aborted_transactions_of_what_it_uploads(
    tmp_path: Path, storage: RemoteStorage, ship: Ship
) -> None:
    """A successor whose segments are cut elsewhere uploads from mid-segment: its index holds
    the ABORT markers from there on, none the old leader's object already holds."""
    leader = make_log(tmp_path / "leader", 600)
    transactions(leader)
    follower = make_log(tmp_path / "follower", 1000)
    copy_batches(leader, follower)
    tier = PartitionTier(storage, "p", leader, "id", ship)
    for segment in tier.pending()[:3]:
        tier.upload(segment, 0)
    successor = PartitionTier(storage, "p", follower, "id", ship)
    successor.refresh()
    for segment in successor.pending():
        successor.upload(segment, 1)
    manifest = successor.refresh()
    assert sum(s.aborted_transactions or 0 for s in manifest.segments) == 2
    check_aborted_reads(RemoteReader(storage, "p"), manifest, leader)


def test_segments_uploaded_before_their_index_was_leave_aborted_transactions_unknown(
    tmp_path: Path, storage: RemoteStorage, ship: Ship
) -> None:
    """A segment listed without a count (uploaded before indexes were shipped) may hold ABORT
    markers: a search that reaches it knows nothing; one from a later segment on does."""
    log = make_log(tmp_path, 600)
    transactions(log)
    tier = PartitionTier(storage, "p", log, "id", ship)
    for segment in tier.pending():
        tier.upload(segment, 0)
    manifest = tier.refresh()
    first, second = manifest.segments[:2]
    old = msgspec.structs.replace(
        manifest,
        segments=[
            msgspec.structs.replace(first, aborted_transactions=None),
            *manifest.segments[1:],
        ],
    )
    reader = RemoteReader(storage, "p")
    end = manifest.end_offset
    assert end is not None
    assert reader.aborted_transactions(old, first.base_offset, end) is None
    found = reader.aborted_transactions(old, second.base_offset, end)
    assert found is not None
    assert sorted(found) == sorted(log.aborted_transactions(second.base_offset, end))
    assert found  # a's and c's


def state_at(log: PartitionLog, end: int) -> ProducerState:
    """The producer state after every batch of `log` below `end`, replayed from the start."""
    state = ProducerState()
    for segment in log.segments:
        for header, data in segment.batches():
            if header.base_offset < end:
                state.apply(data, [(0, header)])
    return state


def same_state(one: ProducerState, other: ProducerState) -> bool:
    return (one.producers, one.ongoing, one.first_transactional) == (
        other.producers,
        other.ongoing,
        other.first_transactional,
    )


def test_each_segment_goes_up_with_the_producer_state_as_of_its_end(
    tmp_path: Path, storage: RemoteStorage, ship: Ship
) -> None:
    """As Kafka's remote producer snapshot: the log's snapshot at a segment's end (written as it
    rolled, kept on disk until it goes up however many rolls come first) is put beside it,
    counted in the manifest, and no object for a segment with no producer; a replica starting
    past any offset reads the state at the end of the segment holding the offset before it.
    Remote retention deletes the objects with their segments."""
    log = make_log(tmp_path, 600)
    fill(log, 6)  # a segment before any transaction
    transactions(log)
    tier = PartitionTier(storage, "p", log, "id", ship)
    pending = tier.pending()
    assert len(pending) > producer_state.SNAPSHOTS_KEPT  # more than a log keeps untiered
    for segment in pending:
        tier.upload(segment, 0)
    manifest = tier.refresh()
    keys = set(storage.list_keys("p/t/0/"))
    reader = RemoteReader(storage, "p")
    counts = [remote.producers for remote in manifest.segments]
    assert counts[0] == 0 and max(c or 0 for c in counts) == len(PRODUCERS)
    for remote in manifest.segments:
        expected = state_at(log, remote.next_offset)
        assert remote.producers == len(expected.producers)
        key = f"p/t/0/{remote.name}{producer_state.SNAPSHOT_SUFFIX}"
        assert (key in keys) == bool(remote.producers)
        if remote.producers:
            assert same_state(ProducerState.decode(storage.get(key)), expected)
        for offset in (remote.base_offset + 1, remote.next_offset):
            found = reader.producer_state_before(manifest, offset)
            assert found is not None
            assert found[0] == remote.next_offset and same_state(found[1], expected)
    assert any(state_at(log, s.next_offset).ongoing for s in manifest.segments)  # a's, open

    fill(log, 4)  # a roll now lets the uploaded segments' snapshots go but the last ones
    kept = producer_state.snapshot_offsets(log.directory)
    assert (
        len(kept) == producer_state.SNAPSHOTS_KEPT and kept[0] >= manifest.segments[-1].last_offset
    )

    dropped = manifest.segments[:3]
    log.delete_records(dropped[-1].next_offset)
    assert tier.expire(0, log.now_ms()) == len(dropped)
    left = set(storage.list_keys("p/t/0/"))
    assert not any(k.startswith(f"p/t/0/{s.name}") for s in dropped for k in left)
    assert any(k.endswith(producer_state.SNAPSHOT_SUFFIX) for k in left)


def test_a_segment_closed_without_a_producer_snapshot_goes_up_without_one(
    tmp_path: Path, storage: RemoteStorage, ship: Ship, caplog: pytest.LogCaptureFixture
) -> None:
    """A segment rolled before snapshots were kept for upload has none on disk: it goes up
    without one (the manifest counts None, warned), and a replica starting past it learns that
    the state is unknown."""
    log = make_log(tmp_path, 600)
    transactions(log)
    producer_state.delete_snapshots(log.directory)
    tier = PartitionTier(storage, "p", log, "id", ship)
    first = tier.pending()[0]
    with caplog.at_level(logging.WARNING, "engine.tiered.uploader"):
        remote = tier.upload(first, 0)
    assert remote.producers is None
    assert producer_state.SNAPSHOT_SUFFIX not in remote.suffixes
    assert f"no producer-state snapshot at {first.next_offset}" in caplog.text
    assert (
        RemoteReader(storage, "p").producer_state_before(tier.refresh(), first.next_offset) is None
    )


def shipper_processes() -> list[int]:
    """This process's children that run a shipper (multiprocessing's spawned interpreters)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rpartition(")")[2].split()[1]) == os.getpid() and b"spawn_main" in command:
            found.append(int(entry.name))
    return found


def test_shippers_are_child_processes_at_a_lower_priority(shipper: Shipper) -> None:
    """A segment's scan and PUTs do not run on the node's GIL, and yield the CPU to it; the
    processes start with the shipper, not at the first upload."""
    children = shipper_processes()
    assert children  # this module's shipper's, before any upload
    lower = min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICENESS)
    # A child lowers its own priority as it starts (its interpreter's start and imports come
    # first, slower on a loaded machine): wait for that, bounded, rather than read it at once.
    deadline = time.monotonic() + START_WAIT_S
    while (found := {os.getpriority(os.PRIO_PROCESS, c) for c in children}) != {lower}:
        assert time.monotonic() < deadline, f"priorities {found}, not {lower}"
        time.sleep(0.01)


def test_uploads_go_on_after_a_shipper_process_is_killed(
    tmp_path: Path, storage: RemoteStorage, moto: MotoServer, bucket: str
) -> None:
    """A shipper process that dies (killed, out of memory) fails at most the upload it was
    running, as ShipperFailed (retried like any failed upload); a new process takes the next."""
    others = set(shipper_processes())
    shipper = Shipper(1, S3Location(moto.url, bucket, "p"))
    try:
        log = make_log(tmp_path, 600)
        fill(log, 20)
        tier = PartitionTier(storage, "p", log, "id", shipper.ship)
        tier.upload(tier.pending()[0], 0)
        (killed,) = set(shipper_processes()) - others
        os.kill(killed, signal.SIGKILL)
        failures = 0
        for _ in range(2):
            try:
                tier.upload(tier.pending()[0], 0)
            except ShipperFailed:
                failures += 1
        assert failures <= 1 and len(tier.refresh().segments) == 1 + 2 - failures
        (started,) = set(shipper_processes()) - others
        assert started != killed
    finally:
        shipper.close()


NODE = """
import os, sys
from engine.tiered.remote import S3Location
from engine.tiered.shipping import Shipper
shipper = Shipper(2, S3Location(sys.argv[1], "any"))
children = []
for task in os.listdir("/proc/self/task"):
    children += open(f"/proc/self/task/{task}/children").read().split()
print(" ".join(children), flush=True)
sys.stdin.read()
"""


def test_shipper_processes_end_with_a_killed_node(moto: MotoServer) -> None:
    """A node killed outright (SIGKILL, the OOM killer) closes nothing: its shipper processes
    (and multiprocessing's resource tracker) see it end and end too, none left behind."""
    node = subprocess.Popen(
        [sys.executable, "-c", NODE, moto.url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **CREDENTIALS},
    )  # fmt: skip
    assert node.stdout is not None
    children = [int(pid) for pid in node.stdout.readline().split()]
    assert len(children) == 3  # two shippers and the resource tracker
    watches = [os.pidfd_open(pid) for pid in children]
    try:
        node.kill()
        node.wait(30)
        for watch in watches:  # readable once the process has ended
            poll = select.poll()  # not select(): a test process may hold 1,024 descriptors
            poll.register(watch, select.POLLIN)
            assert poll.poll(30_000) == [(watch, select.POLLIN)]
    finally:
        for watch in watches:
            os.close(watch)


def test_a_corrupt_segment_is_refused_across_the_process_and_nothing_is_committed(
    tmp_path: Path, storage: RemoteStorage, ship: Ship, moto: MotoServer, bucket: str
) -> None:
    """The shipper's CRC check of a damaged batch reaches the partition as the CorruptRecord it
    raised (its offset too), and the manifest is not written."""
    log = make_log(tmp_path, 600)
    fill(log, 20)
    tier = PartitionTier(storage, "p", log, "id", ship)
    segment = tier.pending()[0]
    with open(segment.path, "r+b") as file:
        file.seek(fmt.HEADER_SIZE + 4)  # in the first batch's records
        byte = file.read(1)
        file.seek(fmt.HEADER_SIZE + 4)
        file.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptRecord) as raised:
        tier.upload(segment, 0)
    assert raised.value.offset == segment.base_offset and "CRC" in str(raised.value).upper()
    listed = moto.client().list_objects_v2(Bucket=bucket, Prefix="p/t/0/manifest")
    assert listed.get("KeyCount", 0) == 0 and tier.manifest is not None
    assert tier.manifest.segments == []


@pytest.mark.parametrize("from_batch", [0, 1, 2_500, 7_999])
def test_a_scan_hashes_exactly_the_bytes_it_uploads(tmp_path: Path, from_batch: int) -> None:
    """The checksum covers the batches from `from_offset` on, hashed a read (256 KiB) at a
    time: the same as the file's bytes there, wherever the first batch falls in a read."""
    log = make_log(tmp_path, 8 << 20)
    fill(log, 8_000, per_batch=1)  # about 600 KiB: three reads
    log.roll()
    segment = log.segments[0]
    scanned = scan_segment(segment, from_batch, 4096)
    data = segment.pread(segment.size, 0)
    uploaded = data[scanned.start_position : scanned.start_position + scanned.segment.size]
    assert scanned.start_position + scanned.segment.size == segment.size
    assert fmt.read_header(uploaded).base_offset == scanned.segment.base_offset == from_batch
    assert hashlib.sha256(uploaded).hexdigest() == scanned.segment.sha256


def test_a_closing_service_begins_no_further_upload(
    tmp_path: Path,
    storage: RemoteStorage,
    ship: Ship,
    moto: MotoServer,
    bucket: str,
) -> None:
    """A pass over a backlog runs in a thread the process waits for as it exits: once the
    service closes, the segment being uploaded is finished and no other is begun."""
    log = make_log(tmp_path, 300)
    fill(log, 12)
    service = TieringService(storage, TieringSettings(S3Location(moto.url, bucket, "p")))
    tier = PartitionTier(storage, "p", log, "id", ship)
    backlog = len(tier.pending())
    assert backlog >= 3
    entered, release = threading.Event(), threading.Event()
    uploaded: list[int] = []
    upload = tier.upload

    def held(segment: LogSegment, epoch: int) -> RemoteSegment:
        uploaded.append(segment.base_offset)
        entered.set()
        assert release.wait(30)
        return upload(segment, epoch)

    tier.upload = held  # type: ignore[method-assign,assignment]
    passing = threading.Thread(target=service._lead, args=(tier, 0))
    passing.start()
    assert entered.wait(30)
    asyncio.run(service.close())
    release.set()
    passing.join(30)
    assert not passing.is_alive()
    assert len(uploaded) == 1 and len(tier.pending()) == backlog - 1


def test_uploads_start_no_thread_of_their_own(
    tmp_path: Path,
    storage: RemoteStorage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shipper sends an upload's four objects side by side in its own long-lived pool: at
    most that pool's threads ever start, however many segments go up (here the uploads run in
    this process, so that its threads can be counted)."""
    log = make_log(tmp_path, 600)
    fill(log, 40)
    started: list[threading.Thread] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    tier = PartitionTier(storage, "p", log, "id", shipping.ship)
    pending = tier.pending()
    for segment in pending:
        tier.upload(segment, 0)
    assert len(pending) > 2 * OBJECTS_IN_FLIGHT
    assert tier.refresh().end_offset == pending[-1].next_offset
    assert len(started) <= OBJECTS_IN_FLIGHT
    assert all(thread.name.startswith("s3-upload") for thread in started)
