"""The HTTP contract: `openapi.yaml` (OpenAPI 3.1), served by the gateway at /openapi.yaml."""

from pathlib import Path

SPEC = Path(__file__).resolve().parent / "openapi.yaml"
