"""The internal topics: written only by the coordinators that own them (consumer groups, the
schema registry, share groups, transactions), never by a client's produce (Kafka's
`Topic.INTERNAL_TOPICS`). Every layer that needs the rule reads the names here."""

from __future__ import annotations

CONSUMER_OFFSETS = "__consumer_offsets"
SCHEMAS = "_schemas"
SHARE_GROUP_STATE = "__share_group_state"
TRANSACTION_STATE = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, SCHEMAS, SHARE_GROUP_STATE, TRANSACTION_STATE})
