"""Per-topic configuration with Kafka's names, defaults and validation rules."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from engine.errors import InvalidConfig, InvalidTopicName

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
MAX_TOPIC_NAME_LENGTH = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
# How the schema registry's subject of a record's key or value is named (Confluent's).
SUBJECT_NAME_STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
_STRATEGY_PACKAGE = "io.confluent.kafka.serializers.subject."  # Confluent's class names


def validate_topic_name(name: object) -> str:
    """Apply Kafka's topic-name rules: [a-zA-Z0-9._-], 1..249 characters, not '.' or '..'."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicName("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicName(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicName(
            f"topic name is {len(name)} characters; the maximum is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _TOPIC_NAME.fullmatch(name):
        raise InvalidTopicName(
            f"topic name {name!r} may contain only ASCII letters, digits, '.', '_' and '-'"
        )
    return name


def _as_int(name: str, value: object, minimum: int, maximum: int = LONG_MAX) -> int:
    if isinstance(value, bool):
        raise InvalidConfig(f"{name} must be an integer, got {value!r}")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InvalidConfig(f"{name} must be an integer, got {value!r}") from None
    if not isinstance(value, int):
        raise InvalidConfig(f"{name} must be an integer, got {value!r}")
    if not minimum <= value <= maximum:
        raise InvalidConfig(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def _as_ratio(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidConfig(f"{name} must be a number between 0 and 1, got {value!r}")
    try:
        ratio = float(value)
    except ValueError:
        raise InvalidConfig(f"{name} must be a number between 0 and 1, got {value!r}") from None
    if not 0.0 <= ratio <= 1.0:
        raise InvalidConfig(f"{name} must be between 0 and 1, got {ratio}")
    return ratio


def _as_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise InvalidConfig(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    normalised = ",".join(sorted(part.strip() for part in value.split(",")))
    if normalised not in choices:
        raise InvalidConfig(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return normalised


def _as_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidConfig(f"{name} must be true or false, got {value!r}")


def _as_strategy(name: str, value: object) -> str:
    """A subject name strategy by its short name or Confluent's class name."""
    short = value.removeprefix(_STRATEGY_PACKAGE) if isinstance(value, str) else value
    if short not in SUBJECT_NAME_STRATEGIES:
        raise InvalidConfig(
            f"{name} must be one of {', '.join(SUBJECT_NAME_STRATEGIES)}, got {value!r}"
        )
    return str(short)


def _int(minimum: int, maximum: int = LONG_MAX) -> Callable[[str, object], Any]:
    return lambda name, value: _as_int(name, value, minimum, maximum)


def _choice(choices: tuple[str, ...]) -> Callable[[str, object], Any]:
    return lambda name, value: _as_choice(name, value, choices)


# Kafka name -> (attribute, parser). Defaults live on the dataclass fields below.
_SPEC: dict[str, tuple[str, Callable[[str, object], Any]]] = {
    "segment.bytes": ("segment_bytes", _int(14, INT_MAX)),
    "segment.ms": ("segment_ms", _int(1)),
    "retention.ms": ("retention_ms", _int(-1)),
    "retention.bytes": ("retention_bytes", _int(-1)),
    "cleanup.policy": ("cleanup_policy", _choice(CLEANUP_POLICIES)),
    "delete.retention.ms": ("delete_retention_ms", _int(0)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _as_ratio),
    "index.interval.bytes": ("index_interval_bytes", _int(0)),
    "flush.messages": ("flush_messages", _int(1)),
    "flush.ms": ("flush_ms", _int(0)),
    "max.message.bytes": ("max_message_bytes", _int(0, INT_MAX)),
    "message.timestamp.type": ("message_timestamp_type", _choice(TIMESTAMP_TYPES)),
    "min.insync.replicas": ("min_insync_replicas", _int(1, INT_MAX)),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _as_bool),
    "remote.storage.enable": ("remote_storage_enable", _as_bool),
    "local.retention.ms": ("local_retention_ms", _int(-2)),
    "local.retention.bytes": ("local_retention_bytes", _int(-2)),
    "key.schema.validation": ("key_schema_validation", _as_bool),
    "value.schema.validation": ("value_schema_validation", _as_bool),
    "key.subject.name.strategy": ("key_subject_name_strategy", _as_strategy),
    "value.subject.name.strategy": ("value_subject_name_strategy", _as_strategy),
}
# Confluent Server's names of the same settings.
_ALIASES = {
    f"confluent.{name}": name
    for name in (
        "key.schema.validation",
        "value.schema.validation",
        "key.subject.name.strategy",
        "value.subject.name.strategy",
    )
}

KAFKA_SEGMENT_MS = 7 * 24 * 3600 * 1000
# A tiered topic rolls its active segment at least this often unless segment.ms says otherwise,
# so a record reaches S3 within ~10 minutes: well inside the hour an hourly batch job waits.
TIERED_SEGMENT_MS = 10 * 60 * 1000


@dataclasses.dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's log configuration; defaults are Kafka's."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = KAFKA_SEGMENT_MS
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1  # acks=all needs this many in-sync replicas
    unclean_leader_election_enable: bool = False  # may elect outside the ISR, losing records
    remote_storage_enable: bool = False  # closed segments are copied to S3
    local_retention_ms: int = -2  # -2: as retention.ms (how long data stays on local disk)
    local_retention_bytes: int = -2  # -2: as retention.bytes
    # produced keys / values must be described by a schema registered under their subject
    key_schema_validation: bool = False
    value_schema_validation: bool = False
    key_subject_name_strategy: str = "TopicNameStrategy"
    value_subject_name_strategy: str = "TopicNameStrategy"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def local_retention(self) -> tuple[int, int]:
        """(ms, bytes) that data stays on local disk; Kafka's -2 means the total retention."""
        ms = self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms
        size = (
            self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes
        )
        return ms, size

    def with_overrides(self, overrides: Mapping[str, object]) -> TopicConfig:
        """Return a copy with Kafka-named overrides applied; unknown names or bad values raise."""
        if not isinstance(overrides, Mapping):
            raise InvalidConfig("configs must be an object of Kafka config names to values")
        changes: dict[str, Any] = {}
        for given, value in overrides.items():
            name = _ALIASES.get(given, given)
            spec = _SPEC.get(name)
            if spec is None:
                raise InvalidConfig(
                    f"unknown topic config {name!r}; supported: {', '.join(sorted(_SPEC))}"
                )
            attribute, parse = spec
            changes[attribute] = parse(name, value)
        config = dataclasses.replace(self, **changes)
        if config.remote_storage_enable:
            if config.compact:
                raise InvalidConfig(
                    "remote.storage.enable is not supported with cleanup.policy "
                    f"{config.cleanup_policy!r} (as in Kafka: compaction would rewrite tiered data)"
                )
            if "segment.ms" not in overrides and config.segment_ms == KAFKA_SEGMENT_MS:
                config = dataclasses.replace(config, segment_ms=TIERED_SEGMENT_MS)
        return config

    def to_dict(self) -> dict[str, object]:
        """Kafka-named values, as stored on disk and shown to users."""
        return {name: getattr(self, attribute) for name, (attribute, _) in _SPEC.items()}

    @classmethod
    def from_dict(cls, values: Mapping[str, object]) -> TopicConfig:
        return cls().with_overrides(values)


CONFIG_NAMES = tuple(_SPEC)


def merged_overrides(
    overrides: Mapping[str, object], changes: Mapping[str, object | None]
) -> dict[str, object]:
    """Overrides after `changes`, where a None value removes one (back to the default)."""
    merged = {_ALIASES.get(name, name): value for name, value in overrides.items()}
    for given, value in changes.items():
        name = _ALIASES.get(given, given)
        if value is not None:
            merged[name] = value
        elif name in CONFIG_NAMES:
            merged.pop(name, None)
        else:
            raise InvalidConfig(
                f"unknown topic config {name!r}; supported: {', '.join(CONFIG_NAMES)}"
            )
    return merged


def normalised_overrides(config: TopicConfig, overrides: Mapping[str, object]) -> dict[str, object]:
    """Overrides as parsed values ("1000" -> 1000), as stored and shown."""
    values = config.to_dict()
    names = (_ALIASES.get(name, name) for name in overrides)
    return {name: values[name] for name in names}


def collision_key(name: str) -> str:
    """Kafka refuses two topics that differ only by '.' against '_' (metric names)."""
    return name.replace(".", "_")
