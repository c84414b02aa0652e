"""Tiered storage: closed segments copied to S3 under deterministic keys, a per-partition
manifest as the commit point, and reads of tiered offsets back from S3 (docs/tiering.md)."""
