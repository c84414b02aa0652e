"""Storage engine: partitioned append-only logs of Kafka RecordBatch v2 segments."""
