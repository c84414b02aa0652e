"""The schema registry's domain: subjects, versions, ids and compatibility per schema type,
stored in an internal compacted topic; no HTTP (the gateway serves it)."""
