"""Confluent REST Proxy compatibility: the v2 API (metadata, produce, consumer instances) and
v3 record produce, at the root paths its clients use, over the same domain code as /v1.

One module per resource, as Karapace lays them out: `metadata` (topics, partitions, brokers),
`produce`, `consumers`, `v3`; `errors` (v2's error body and codes) and `media` (content
negotiation, slash-tolerant routes) are their vocabulary. Imports what gateway.api may."""
