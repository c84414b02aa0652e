"""The `sluice` command: `serve`, the console tools (talking HTTP to `--url`), the local dev
cluster and progress output.

The top of the tree: may import anything in gateway/, nothing imports it."""
