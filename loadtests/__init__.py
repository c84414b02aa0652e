"""Load generators and the benchmark harness: they drive the gateway over HTTP only (the
placement planners' simulation, balance_sim, calls those pure functions directly)."""
