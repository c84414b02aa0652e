"""Prometheus metrics of a node: per-route request counts and latency, traffic per topic,
log sizes, groups, quotas.

Imports the domain (replication, groups, engine) to read it; nothing of the HTTP layers."""
