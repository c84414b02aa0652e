"""The registry's domain errors, with Confluent Schema Registry's error codes.

The codes are its clients' contract (confluent-kafka's `SchemaRegistryError.error_code`); the
gateway answers each with the HTTP status that is the code's first three digits.
"""

from __future__ import annotations

from engine.errors import EngineError

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
FORWARDING_ERROR = 50003


class SchemaError(EngineError):
    """A refused registry operation: Confluent's `error_code` and a message saying why."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self) -> int:
        """The HTTP status Confluent answers this code with (40401 → 404, 409 → 409)."""
        return self.error_code if self.error_code < 1000 else self.error_code // 100


class InvalidValue(ValueError):
    """A value, or a binary payload, the schema does not describe (here, not in the schema
    types, so that the wire format needs nothing of them)."""
