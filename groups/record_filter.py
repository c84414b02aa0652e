"""Which records a reader wants: a key prefix and header values, matched on the stored bytes.
Records that do not match are skipped, never delivered; the reader's position still passes
them."""

from __future__ import annotations

from dataclasses import dataclass

from engine.batch import Headers


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """Keep a record whose key starts with `key_prefix` (when given) and that carries every
    (name, value) of `headers`."""

    key_prefix: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def active(self) -> bool:
        return self.key_prefix is not None or bool(self.headers)

    def __call__(self, key: bytes | None, headers: Headers) -> bool:
        if self.key_prefix is not None and (key is None or not key.startswith(self.key_prefix)):
            return False
        return all((name, value) in headers for name, value in self.headers)
