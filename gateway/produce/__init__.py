"""The produce front: a body -> per-partition batches -> appends, with Kafka's partitioner,
acks and idempotency keys.

Domain code: raises domain errors, never HTTP problems; imports the partition layer
(replication), the engine and the body codecs."""
