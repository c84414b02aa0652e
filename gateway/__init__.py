"""Network gateway: serves the partition layer over HTTP/1.1, h2c and HTTP/2 over TLS.

Layers, each importing only those below it (docs/layers.md, checked by `lint-imports`): cli,
workers, server, app, api, state, produce, metrics, auth, formats, http, then settings; under
them groups, replication and engine."""
