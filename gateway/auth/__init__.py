"""Authentication (API keys, JWT, HTTP Basic, mutual TLS), Kafka's ACL authorization and
client quotas, with their stores (files, the shared files of --workers, etcd).

Imports gateway.http, settings, worker_dirs and the partition layer; never the routes."""
