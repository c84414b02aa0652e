"""Share groups (queues, KIP-932): the share-partition state machine, the share-group state
topic and the coordinator that serves them (domain code, no HTTP; beside the group
coordinator)."""
