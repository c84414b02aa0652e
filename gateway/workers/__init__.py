"""`sluice serve --workers N`: the supervisor that runs N processes on one port as a cluster.

Imports settings and configuration, never the HTTP layers."""
