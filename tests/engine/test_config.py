"""Topic names and configs follow Kafka's rules and defaults."""

from __future__ import annotations

import re

import pytest

from engine.config import CONFIG_NAMES, TopicConfig, validate_topic_name
from engine.errors import InvalidConfig, InvalidTopicName

KAFKA_DEFAULTS: dict[str, object] = {
    "segment.bytes": 1073741824,
    "segment.ms": 604800000,
    "retention.ms": 604800000,
    "retention.bytes": -1,
    "cleanup.policy": "delete",
    "delete.retention.ms": 86400000,
    "min.cleanable.dirty.ratio": 0.5,
    "index.interval.bytes": 4096,
    "flush.messages": 9223372036854775807,
    "flush.ms": 9223372036854775807,
    "max.message.bytes": 1048588,
    "message.timestamp.type": "CreateTime",
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": False,
    "remote.storage.enable": False,
    "local.retention.ms": -2,
    "local.retention.bytes": -2,
    # Confluent Server's (also under their `confluent.` names)
    "key.schema.validation": False,
    "value.schema.validation": False,
    "key.subject.name.strategy": "TopicNameStrategy",
    "value.subject.name.strategy": "TopicNameStrategy",
}


@pytest.mark.parametrize("name", ["a", "orders.v1", "A_b-C.9", "x" * 249, "__consumer_offsets"])
def test_valid_topic_names(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", "x" * 250, "has space", "slash/no", "ünïcode", "semi;colon", 7, None]
)
def test_invalid_topic_names(name: object) -> None:
    with pytest.raises(InvalidTopicName):
        validate_topic_name(name)


def test_defaults_are_kafkas() -> None:
    assert TopicConfig().to_dict() == KAFKA_DEFAULTS
    assert set(CONFIG_NAMES) == set(KAFKA_DEFAULTS)


def test_overrides_accept_strings_like_kafka() -> None:
    config = TopicConfig().with_overrides(
        {
            "retention.ms": "1000",
            "cleanup.policy": "delete,compact",
            "min.cleanable.dirty.ratio": "0.1",
        }
    )
    assert config.retention_ms == 1000
    assert config.cleanup_policy == "compact,delete"
    assert config.compact and config.delete
    assert config.min_cleanable_dirty_ratio == 0.1


def test_policy_as_list() -> None:
    assert TopicConfig().with_overrides({"cleanup.policy": ["compact"]}).cleanup_policy == "compact"


@pytest.mark.parametrize(
    ("configs", "fragment"),
    [
        ({"no.such.config": 1}, "unknown topic config"),
        ({"segment.bytes": 13}, "segment.bytes"),
        ({"segment.bytes": 2**31}, "segment.bytes"),
        ({"retention.ms": -2}, "retention.ms"),
        ({"retention.ms": "soon"}, "integer"),
        ({"retention.ms": True}, "integer"),
        ({"retention.ms": 1.5}, "integer"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"min.cleanable.dirty.ratio": 1.5}, "between 0 and 1"),
        ({"message.timestamp.type": "WallTime"}, "message.timestamp.type"),
        ({"flush.messages": 0}, "flush.messages"),
    ],
)
def test_invalid_configs_are_rejected_with_the_name(
    configs: dict[str, object], fragment: str
) -> None:
    with pytest.raises(InvalidConfig, match=re.escape(fragment)):
        TopicConfig().with_overrides(configs)


def test_configs_must_be_a_mapping() -> None:
    with pytest.raises(InvalidConfig):
        TopicConfig().with_overrides(["retention.ms"])  # type: ignore[arg-type]


def test_round_trip() -> None:
    config = TopicConfig().with_overrides({"message.timestamp.type": "LogAppendTime"})
    assert TopicConfig.from_dict(config.to_dict()) == config
    assert config.log_append_time


def test_remote_storage_rolls_segments_sooner_and_refuses_compaction() -> None:
    tiered = TopicConfig().with_overrides({"remote.storage.enable": "true"})
    assert tiered.segment_ms == 10 * 60 * 1000  # records reach S3 within ~10 minutes
    assert tiered.local_retention == (tiered.retention_ms, tiered.retention_bytes)
    chosen = TopicConfig().with_overrides({"remote.storage.enable": True, "segment.ms": 5000})
    assert chosen.segment_ms == 5000
    local = TopicConfig().with_overrides(
        {"remote.storage.enable": True, "local.retention.ms": 1000, "local.retention.bytes": 0}
    )
    assert local.local_retention == (1000, 0)
    with pytest.raises(InvalidConfig, match=r"cleanup\.policy"):
        TopicConfig().with_overrides({"remote.storage.enable": True, "cleanup.policy": "compact"})
    with pytest.raises(InvalidConfig, match=r"local\.retention\.ms"):
        TopicConfig().with_overrides({"local.retention.ms": -3})


def test_confluent_names_are_the_same_settings() -> None:
    config = TopicConfig().with_overrides(
        {
            "confluent.value.schema.validation": "true",
            "confluent.key.subject.name.strategy": "io.confluent.kafka.serializers.subject."
            "TopicRecordNameStrategy",
        }
    )
    assert config.value_schema_validation and not config.key_schema_validation
    assert config.key_subject_name_strategy == "TopicRecordNameStrategy"
    assert "confluent.value.schema.validation" not in config.to_dict()
    with pytest.raises(InvalidConfig, match="TopicNameStrategy"):
        TopicConfig().with_overrides({"value.subject.name.strategy": "Mine"})
