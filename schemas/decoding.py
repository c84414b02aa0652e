"""Record values in Confluent's wire format decoded to JSON for readers (Server-Sent Events,
fetches, push subscriptions), with this node's registry view.

A value the view cannot decode (no wire-format header, an id it does not know, a payload its
schema does not read) is never an error for the reader: it comes back as `Undecoded`, saying
why, and the reader delivers the value as stored with that reason beside it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

import orjson

from schemas import wire
from schemas.errors import SchemaError
from schemas.state import RegistryState
from schemas.types import InvalidValue

log = logging.getLogger(__name__)


class Decoded(NamedTuple):
    """A value read with the schema its header names, as JSON text."""

    schema_id: int
    json: bytes


class Undecoded(NamedTuple):
    """A value left as stored, and why (`schema_id`: the id its header names, if it has one)."""

    reason: str
    schema_id: int | None = None


class ValueDecoder:
    """Decodes values with the registry view `view()` returns (the store replaces its view
    when it reads the topic again). Parsed schemas are the view's (kept once parsed); a schema
    that cannot be parsed is remembered here, so a stream of its values parses it once."""

    def __init__(
        self,
        view: Callable[[], RegistryState],
        synced: Callable[[], Awaitable[RegistryState]] | None = None,
    ) -> None:
        """`synced`: waits until the view holds what the registry has committed (the store's
        `synced`), for values naming ids newer than the view."""
        self.view = view
        self.synced = synced
        self._unparsable: dict[int, str] = {}
        self._unparsable_in: tuple[RegistryState | None, int] = (None, 0)  # view, its schemas

    def decode(self, data: bytes) -> Decoded | Undecoded:
        """The JSON value of one record value, or why it stays as stored."""
        try:
            schema_id, payload = wire.unframe(data)
        except InvalidValue as exc:
            return Undecoded(f"not in the wire format: {exc}")
        state = self.view()
        if schema_id not in state.schemas:
            return Undecoded(f"schema id {schema_id} is not registered", schema_id)
        unparsable = self._unparsable_of(state)
        if schema_id in unparsable:
            return Undecoded(unparsable[schema_id], schema_id)
        try:
            parsed = state.parsed(schema_id)
        except SchemaError as exc:
            reason = unparsable[schema_id] = f"schema id {schema_id} cannot be read: {exc.message}"
            return Undecoded(reason, schema_id)
        try:
            value = parsed.decode(payload)
        except InvalidValue as exc:
            return Undecoded(f"not a value of schema id {schema_id}: {exc}", schema_id)
        except RecursionError:
            return Undecoded(f"not a value of schema id {schema_id}: nested too deep", schema_id)
        except Exception as exc:  # a library failing where it documents nothing (a Protobuf
            # Any naming a type the schema does not hold raises TypeError): still the reader's
            log.debug("decoding a value of schema id %d failed", schema_id, exc_info=True)
            return Undecoded(f"schema id {schema_id} cannot decode this value: {exc}", schema_id)
        try:
            return Decoded(schema_id, orjson.dumps(value))
        except orjson.JSONEncodeError as exc:  # a JSON payload's integer past 64 bits, say
            return Undecoded(
                f"schema id {schema_id}'s value is not writable as JSON: {exc}", schema_id
            )

    async def decode_all(self, values: Sequence[bytes | None]) -> list[Decoded | Undecoded | None]:
        """`decode` of each value (None stays None). Values naming ids newer than the view wait
        for it to catch up with the registry once (bounded by the store), then are read again:
        a schema registered just before its first record is produced is known by then."""
        decoded = [None if value is None else self.decode(value) for value in values]
        if self.synced is None:
            return decoded
        highest = self.view().highest_id
        newer = [
            (i, value)
            for i, (value, got) in enumerate(zip(values, decoded, strict=True))
            if value is not None
            and isinstance(got, Undecoded)
            and got.schema_id is not None
            and got.schema_id > highest
        ]
        if not newer:
            return decoded
        try:
            await self.synced()
        except SchemaError as exc:
            log.debug("the registry view could not catch up for decoding: %s", exc.message)
            return decoded
        for i, value in newer:
            decoded[i] = self.decode(value)
        return decoded

    def _unparsable_of(self, state: RegistryState) -> dict[int, str]:
        """The unparsable schemas remembered for this view as it stands (a schema that comes
        or goes, as references do, may change what parses)."""
        view, count = self._unparsable_in
        if view is not state or count != len(state.schemas):
            self._unparsable = {}
            self._unparsable_in = (state, len(state.schemas))
        return self._unparsable
