"""The HTTP API: one module per resource (records, topics, groups, acls, quotas, ops,
internal; rest_proxy: Confluent REST Proxy v2 compatibility), the fast routes, and the
vocabulary they share (problems, parameters, body codecs, bodies, backpressure, CORS,
forwarding).

Imports the transport (gateway.http), the domain below it (gateway.produce.front, groups,
replication, engine) and gateway.auth; never the app, server, workers or cli."""
