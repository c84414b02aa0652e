"""HTTP API tests of the gateway: every route, good and bad input."""
