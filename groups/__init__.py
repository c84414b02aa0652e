"""Consumer groups: the coordinator (a facade over membership, offsets, the offsets log and
members' fetches), its assignors and its errors.

Domain code on the partition layer: imports replication and engine, never gateway (no HTTP)."""
