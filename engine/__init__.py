"""Storage engine: partitioned append-only logs of Kafka RecordBatch v2 segments.

Imports nothing of Sluice's other packages: no HTTP, no replication."""
