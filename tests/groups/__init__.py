"""The group coordinator driven directly, over a replica manager and an in-memory store."""
