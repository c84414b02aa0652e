"""Confluent Schema Registry's API over this node's registry view: one module per resource,
the media types and error body in `media`, the routes (under a prefix, or at the root of the
registry's own port) in `routes`."""
