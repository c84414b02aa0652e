"""Consumer groups: the coordinator, its assignors and its errors.

Domain code on the partition layer: imports replication and engine, never gateway (no HTTP)."""
