"""LogManager: the topics and partition logs under one data directory.

It owns what spans partitions: topic metadata (the commit point of create and delete), the
checkpoint files, the clean-shutdown marker and a lock that keeps a second process out. Topic
mutations run on worker threads; one lock serializes them, each check with its act.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import resource
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import orjson

from engine import checkpoint, cleaner, file_cache, producer_state
from engine.config import (
    TopicConfig,
    collision_key,
    merged_overrides,
    normalised_overrides,
    validate_topic_name,
)
from engine.errors import (
    InvalidPartitions,
    InvalidTopicName,
    StorageError,
    TooManyPartitions,
    TopicAlreadyExists,
    UnknownPartition,
    UnknownTopic,
)
from engine.log import Listener, PartitionLog, partition_dir_name

TOPICS_DIR = "topic-configs"
LOCK_FILE = ".lock"
CLEAN_SHUTDOWN = ".clean-shutdown"
RECOVERY_POINTS = "recovery-point-offset-checkpoint"
HIGH_WATERMARKS = "replication-offset-checkpoint"
LOG_START_OFFSETS = "log-start-offset-checkpoint"
CLEANER_OFFSETS = "cleaner-offset-checkpoint"
MAX_PARTITIONS = 10_000
CLOSE_THREADS = 8  # logs fsynced at once at shutdown
logger = logging.getLogger(__name__)
_PARTITION_DIR = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)")


@dataclass
class Topic:
    """A topic: its identity, configuration overrides and partition logs."""

    name: str
    topic_id: str
    overrides: dict[str, object]
    config: TopicConfig
    partitions: list[PartitionLog] = field(default_factory=list)

    def metadata(self) -> bytes:
        return orjson.dumps(
            {
                "name": self.name,
                "topic_id": self.topic_id,
                "partitions": len(self.partitions),
                "configs": self.overrides,
            },
            option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS,
        )


class PartitionRecovery(NamedTuple):
    """A partition whose segments were CRC-checked at start-up, and what that found."""

    topic: str
    partition: int
    truncated_bytes: int  # of a torn or corrupt tail, and of the segments after a corruption
    segments_deleted: int
    seconds: float


@dataclass(frozen=True)
class StartupReport:
    """What opening the data directory found: the start-up log lines and metrics."""

    new: bool  # the directory held no Sluice data yet
    clean_shutdown: bool
    topics: int
    partitions: int
    recovered: list[PartitionRecovery]  # the partitions checked (after an unclean shutdown)
    errors: list[str]
    seconds: float

    @property
    def checked(self) -> int:
        return len(self.recovered)

    @property
    def truncated(self) -> list[PartitionRecovery]:
        """The partitions recovery cut back."""
        return [r for r in self.recovered if r.truncated_bytes or r.segments_deleted]

    @property
    def truncated_bytes(self) -> int:
        return sum(r.truncated_bytes for r in self.recovered)

    def summary(self) -> str:
        """One line: what was opened, after what kind of shutdown, and what recovery did."""
        if self.new:
            return f"a new data directory, nothing to recover (opened in {self.seconds:.2f} s)"
        how = "after a clean shutdown" if self.clean_shutdown else "after an unclean shutdown"
        line = (
            f"{_count(self.topics, 'topic')}, {_count(self.partitions, 'partition')} opened "
            f"{how} in {self.seconds:.2f} s"
        )
        if not self.clean_shutdown:
            line += (
                f": {_count(self.checked, 'partition')} checked, "
                f"{_count(len(self.truncated), 'partition')} cut back by "
                f"{self.truncated_bytes} bytes"
            )
            if self.recovered:
                slowest = max(self.recovered, key=lambda r: r.seconds)
                line += f"; slowest {slowest.topic}-{slowest.partition} ({slowest.seconds:.2f} s)"
        return line


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class DataDirLocked(Exception):
    """Another process has this data directory open."""


class LogManager:
    """Creates, opens, alters and deletes topics; checkpoints and shuts down cleanly."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        defaults: TopicConfig | None = None,
        clock: Callable[[], float] = time.time,
        file_cache_size: int | None = None,
        publish_watermarks: bool = False,
        close_threads: int = CLOSE_THREADS,
        producer_id_expiration_ms: int = producer_state.EXPIRATION_MS,
    ) -> None:
        """`file_cache_size` bounds the descriptors of closed segments kept open (process-wide;
        default: `file_cache.default_capacity()`, from the descriptor limit).
        `publish_watermarks`: each log keeps its watermarks in a shared file, for the other
        processes on this host that read it (engine.sibling_log).
        `close_threads`: how many logs `close` fsyncs at once, so their fsyncs overlap (as
        Kafka's num.recovery.threads.per.data.dir). Opening stays one log at a time: it is
        CPU work, which threads only slow down under the GIL.
        `producer_id_expiration_ms`: how long a transactional producer with no transaction open
        is remembered by a partition after its last write there (producer.id.expiration.ms)."""
        if close_threads < 1:
            raise ValueError(f"close_threads must be at least 1, got {close_threads}")
        self.close_threads = close_threads
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.data_dir = Path(data_dir)
        self.files = file_cache.shared
        self.files.resize(
            file_cache.default_capacity() if file_cache_size is None else file_cache_size
        )
        self.defaults = defaults or TopicConfig()
        self.clock = clock
        self.publish_watermarks = publish_watermarks
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.new_data_dir = not (self.data_dir / TOPICS_DIR).exists()
        (self.data_dir / TOPICS_DIR).mkdir(exist_ok=True)
        self._lock_fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise DataDirLocked(f"{self.data_dir} is in use by another process") from None
        marker = self.data_dir / CLEAN_SHUTDOWN
        self.had_clean_shutdown = marker.exists()
        marker.unlink(missing_ok=True)
        checkpoint.fsync_directory(self.data_dir)
        self.cleaner_offsets = self._read_checkpoint(CLEANER_OFFSETS)
        self.topics: dict[str, Topic] = {}
        self._offline_listeners: list[Listener] = []
        self._topics_lock = threading.Lock()
        self._closed = False
        self.closed_cleanly = False  # set by `close` when it marks the shutdown clean
        started = time.monotonic()
        self._load()
        self.startup = self._report(time.monotonic() - started)

    # -- loading -------------------------------------------------------------------------------

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        try:
            return checkpoint.read_offsets(self.data_dir / name)
        except checkpoint.CheckpointError:
            return {}

    def _load(self) -> None:
        recovery_points = self._read_checkpoint(RECOVERY_POINTS)
        high_watermarks = self._read_checkpoint(HIGH_WATERMARKS)
        log_starts = self._read_checkpoint(LOG_START_OFFSETS)
        for path in sorted((self.data_dir / TOPICS_DIR).glob("*.json")):
            meta = orjson.loads(path.read_bytes())
            overrides = dict(meta.get("configs", {}))
            topic = Topic(
                meta["name"], meta["topic_id"], overrides, self.defaults.with_overrides(overrides)
            )
            for p in range(int(meta["partitions"])):
                key = (topic.name, p)
                topic.partitions.append(
                    self._open_log(
                        topic,
                        p,
                        recovery_point=recovery_points.get(key, 0),
                        log_start_offset=log_starts.get(key, 0),
                        high_watermark=high_watermarks.get(key, 0),
                        trust_files=self.had_clean_shutdown,
                    )
                )
            self.topics[topic.name] = topic
        self._remove_orphans()

    def _report(self, seconds: float) -> StartupReport:
        logs = self.all_logs()
        return StartupReport(
            new=self.new_data_dir,
            clean_shutdown=self.had_clean_shutdown,
            topics=len(self.topics),
            partitions=len(logs),
            recovered=[
                PartitionRecovery(
                    log.topic,
                    log.partition,
                    log.recovery.truncated_bytes,
                    log.recovery.segments_deleted,
                    log.recovery.seconds,
                )
                for log in logs
                if log.recovery.segments_scanned
            ],
            errors=[
                f"{log.topic}-{log.partition}: {e}" for log in logs for e in log.recovery.errors
            ],
            seconds=seconds,
        )

    def _open_log(
        self,
        topic: Topic,
        partition: int,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        trust_files: bool = False,
    ) -> PartitionLog:
        return PartitionLog(
            self.data_dir / partition_dir_name(topic.name, partition),
            topic.name,
            partition,
            topic.config,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            high_watermark=high_watermark,
            trust_files=trust_files,
            clock=self.clock,
            files=self.files,
            on_offline=self._went_offline,
            publish_watermarks=self.publish_watermarks,
        )

    def add_offline_listener(self, listener: Listener) -> None:
        """Call `listener(log)` when a storage failure takes a log offline, from whichever
        thread met the failure."""
        self._offline_listeners.append(listener)

    def remove_offline_listener(self, listener: Listener) -> None:
        self._offline_listeners.remove(listener)

    def _went_offline(self, log: PartitionLog) -> None:
        for listener in list(self._offline_listeners):
            listener(log)

    def _remove_orphans(self) -> None:
        """Delete partition directories no topic owns: a create or delete cut short by a crash."""
        for path in self.data_dir.iterdir():
            match = _PARTITION_DIR.fullmatch(path.name)
            if not path.is_dir() or match is None:
                continue
            topic = self.topics.get(match["topic"])
            if topic is None or int(match["partition"]) >= len(topic.partitions):
                shutil.rmtree(path, ignore_errors=True)

    # -- topics --------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, object] | None = None,
        *,
        topic_id: str | None = None,
    ) -> Topic:
        """Create a topic; its metadata file, written last, commits the creation.

        `topic_id` keeps an identity assigned elsewhere (the cluster controller's); default: new.
        """
        validate_topic_name(name)
        check_partition_count(partitions)
        config = self.defaults.with_overrides(configs or {})
        overrides = normalised_overrides(config, configs or {})
        with self._topics_lock:
            if name in self.topics:
                raise TopicAlreadyExists(f"topic {name!r} already exists")
            collision = collision_key(name)
            for existing in self.topics:
                if collision_key(existing) == collision:
                    raise InvalidTopicName(
                        f"topic {name!r} collides with existing topic {existing!r} "
                        "('.' and '_' are interchangeable in metric names)"
                    )
            identity = uuid.uuid4().hex if topic_id is None else topic_id
            topic = Topic(name, identity, overrides, config)
            self._check_capacity(partitions)
            self._open_new_partitions(topic, range(partitions))
            self._write_metadata(topic)
            self.topics[name] = topic
            return topic

    def _check_capacity(self, new_partitions: int) -> None:
        """Refuse partitions whose active segments could not all stay open (one descriptor
        each, two with the watermarks file published; closed segments share the file cache's)."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        # The rest: the file cache, sockets, index writes, checkpoints.
        budget = soft * 3 // 4 // (2 if self.publish_watermarks else 1)
        in_use = len(self.all_logs())
        if in_use + new_partitions > budget:
            raise TooManyPartitions(
                f"this node keeps the active segments of {in_use} partitions open and can hold "
                f"{budget} with its file-descriptor limit of {soft}; {new_partitions} more "
                "partitions do not fit"
            )

    def _open_new_partitions(self, topic: Topic, numbers: range) -> None:
        """Create empty partition logs; on failure remove every one made here and raise."""
        made: list[PartitionLog] = []
        try:
            for p in numbers:
                shutil.rmtree(self.data_dir / partition_dir_name(topic.name, p), ignore_errors=True)
                made.append(self._open_log(topic, p))
        except OSError as exc:
            for log in made:
                log.delete()
            raise StorageError(f"could not create partitions of {topic.name!r}: {exc}") from exc
        topic.partitions.extend(made)

    def delete_topic(self, name: str) -> None:
        """Delete a topic: its metadata goes first, so a crash cannot resurrect it.

        The directories go under the lock too: a create of the same name must not race them.
        """
        with self._topics_lock:
            topic = self.topic(name)
            (self.data_dir / TOPICS_DIR / f"{name}.json").unlink()
            checkpoint.fsync_directory(self.data_dir / TOPICS_DIR)
            del self.topics[name]
            for log in topic.partitions:
                log.delete()
                self.cleaner_offsets.pop((name, log.partition), None)

    def alter_topic_configs(self, name: str, changes: Mapping[str, object | None]) -> Topic:
        """Set config overrides; a None value removes an override (back to the default)."""
        with self._topics_lock:
            topic = self.topic(name)
            overrides = merged_overrides(topic.overrides, changes)
            config = self.defaults.with_overrides(overrides)
            topic.overrides, topic.config = normalised_overrides(config, overrides), config
            self._write_metadata(topic)
            for log in topic.partitions:
                log.update_config(config)
            return topic

    def add_partitions(self, name: str, total: int) -> Topic:
        """Grow a topic to `total` partitions (Kafka never shrinks one)."""
        with self._topics_lock:
            topic = self.topic(name)
            check_partition_count(total, more_than=len(topic.partitions))
            self._check_capacity(total - len(topic.partitions))
            self._open_new_partitions(topic, range(len(topic.partitions), total))
            self._write_metadata(topic)
            return topic

    def _write_metadata(self, topic: Topic) -> None:
        path = self.data_dir / TOPICS_DIR / f"{topic.name}.json"
        tmp = path.with_name(f".{topic.topic_id}.tmp")  # <name>.json.tmp could pass NAME_MAX
        with open(tmp, "wb") as f:
            f.write(topic.metadata())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        checkpoint.fsync_directory(path.parent)

    def topic(self, name: str) -> Topic:
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopic(f"topic {name!r} does not exist") from None

    def log(self, topic: str, partition: int) -> PartitionLog:
        logs = self.topic(topic).partitions
        if not 0 <= partition < len(logs):
            raise UnknownPartition(
                f"topic {topic!r} has partitions 0..{len(logs) - 1}; {partition} does not exist"
            )
        return logs[partition]

    def all_logs(self) -> list[PartitionLog]:
        """A snapshot of every partition log (safe while the event loop adds topics)."""
        topics = list(self.topics.values())
        return [log for topic in topics for log in list(topic.partitions)]

    def offline_logs(self) -> list[PartitionLog]:
        """The logs a storage failure took offline (until a restart)."""
        return [log for log in self.all_logs() if log.offline]

    # -- maintenance (synchronous; `engine.background` runs these off the event loop) -----------

    def write_checkpoints(self) -> None:
        logs = self.all_logs()
        by_key = {(log.topic, log.partition): log for log in logs}
        checkpoint.write_offsets(
            self.data_dir / RECOVERY_POINTS, {k: v.recovery_point for k, v in by_key.items()}
        )
        checkpoint.write_offsets(
            self.data_dir / HIGH_WATERMARKS, {k: v.high_watermark for k, v in by_key.items()}
        )
        checkpoint.write_offsets(
            self.data_dir / LOG_START_OFFSETS, {k: v.log_start_offset for k, v in by_key.items()}
        )
        checkpoint.write_offsets(self.data_dir / CLEANER_OFFSETS, self.cleaner_offsets)

    def flush_due_logs(self) -> int:
        """fsync logs whose flush.ms has passed; returns how many were flushed. A log that
        fails does not keep the others from their flush; an offline one is skipped."""
        flushed = 0
        for partition_log in self.all_logs():
            if partition_log.offline or not partition_log.flush_due_by_time():
                continue
            try:
                partition_log.flush()
            except StorageError as exc:
                logger.warning("flush failed: %s", exc)
            else:
                flushed += 1
        return flushed

    def apply_retention(self) -> int:
        """Delete expired segments in every online log; returns segments deleted."""
        deleted = 0
        for partition_log in self.all_logs():
            if partition_log.offline:
                continue
            try:
                deleted += partition_log.apply_retention()
            except StorageError as exc:
                logger.warning("retention failed: %s", exc)
        return deleted

    def remove_expired_producers(self) -> int:
        """Forget, in every online log, the producers idle past producer.id.expiration.ms
        with no transaction open there; how many."""
        removed = 0
        for partition_log in self.all_logs():
            if partition_log.offline:
                continue
            try:
                removed += partition_log.remove_expired_producers(self.producer_id_expiration_ms)
            except StorageError as exc:
                logger.warning("producer expiration failed: %s", exc)
        return removed

    def clean_logs(self, *, force: bool = False) -> list[cleaner.CleanStats]:
        """One compaction pass over every compacted log that needs it."""
        done = []
        for log in self.all_logs():
            if not log.config.compact or log.offline:
                continue
            key = (log.topic, log.partition)
            first_dirty = max(self.cleaner_offsets.get(key, 0), log.log_start_offset)
            stats = cleaner.clean(log, first_dirty, force=force)
            if stats is not None:
                self.cleaner_offsets[key] = stats.cleaned_up_to
                done.append(stats)
        return done

    def close(self) -> None:
        """Flush every log, write checkpoints and mark the shutdown clean. With a log offline
        (or failing now) the shutdown is not marked clean: the next start CRC-checks the logs
        from their recovery points, as after a crash."""
        if self._closed:
            return
        self._flush_at_once()
        failed: list[str] = []  # the logs that were offline or failed now
        for partition_log in self.all_logs():
            try:
                partition_log.close()
            except StorageError as exc:  # each names its partition
                failed.append(str(exc))
        problems = []
        if failed:
            shown = "; ".join(failed[:3]) + (f"; and {len(failed) - 3} more" if failed[3:] else "")
            problems.append(f"{len(failed)} partitions could not be closed ({shown})")
        try:
            self.write_checkpoints()
            if not failed:
                (self.data_dir / CLEAN_SHUTDOWN).touch()
                checkpoint.fsync_directory(self.data_dir)
                self.closed_cleanly = True
        except OSError as exc:
            self.closed_cleanly = False
            problems.append(f"writing the checkpoints failed: {exc}")
        if problems:
            logger.error(
                "the shutdown is not clean, the next start checks the logs: %s",
                "; ".join(problems),
            )
        os.close(self._lock_fd)
        self._closed = True

    def _flush_at_once(self) -> None:
        """fsync the logs holding unsynced records, `close_threads` at a time, so that `close`,
        one log after another, finds them synced: only the waits for the disk overlap, not
        the Python work around them, which threads would slow down."""
        unsynced = [
            log
            for log in self.all_logs()
            if not log.offline and log.log_end_offset > log.recovery_point
        ]
        threads = min(self.close_threads, len(unsynced))
        if threads < 2:
            return
        with ThreadPoolExecutor(threads, thread_name_prefix="log-flush") as pool:
            for _ in pool.map(_flush_for_close, unsynced):
                pass


def _flush_for_close(partition_log: PartitionLog) -> None:
    """Flush a log about to close. A storage error leaves it offline, and its close says so."""
    with contextlib.suppress(StorageError):
        partition_log.flush()


def check_partition_count(partitions: object, more_than: int = 0) -> None:
    """A partition count must be an integer in 1..MAX_PARTITIONS, above the current count."""
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise InvalidPartitions(f"partitions must be an integer, got {partitions!r}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitions(f"partitions must be between 1 and {MAX_PARTITIONS}")
    if partitions <= more_than:
        raise InvalidPartitions(
            f"the topic has {more_than} partitions; a new count must be larger (Kafka never "
            f"removes partitions), got {partitions}"
        )
