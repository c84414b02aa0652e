"""The API's body formats: JSON, NDJSON and binary record batches to and from records, with
their C paths (_producejson, _fetchjson, _batchcheck).

Imports the engine's batch format and gateway.http's problems; nothing above."""
