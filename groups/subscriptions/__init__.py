"""Push subscriptions: a consumer group whose member is the cluster. The spec and its checks,
the delivery state machine (sans-IO), the request formats (CloudEvents, Standard Webhooks
signatures), and the dispatchers that run on each partition's leader.

Domain code on groups and replication, like the coordinator: no gateway, no HTTP server; its
only HTTP is the client that POSTs to endpoints."""
