"""Load generators and the benchmark harness: they drive the gateway over HTTP only."""
