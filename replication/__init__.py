"""The partition layer between the engine and the HTTP gateway: partition roles, leader epochs,
the in-sync replica set, the high watermark, acks, follower fetching, cluster metadata, the
controller, request routing and the node-to-node contract. Imports only the engine: never
`groups` or `gateway`."""
