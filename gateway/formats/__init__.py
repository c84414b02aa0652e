"""The API's body formats: JSON, NDJSON and binary record batches to and from records, with
their C paths (_producejson, _fetchjson, _batchcheck).

Imports the engine's batch format, gateway.http's problems and the schema registry's value
decoder (decoded.py); nothing above."""
