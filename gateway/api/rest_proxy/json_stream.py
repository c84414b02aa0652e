"""Concatenated JSON, as Confluent's v3 streaming produce sends it: the
bytes of each top-level object, found as chunks arrive, each at most `limit` bytes. Only the
boundaries are found here (strings and nesting tracked); each object is then parsed whole."""

from __future__ import annotations

import re

_INTERESTING = re.compile(rb'["{}\[\]]')
_STRING_END = re.compile(rb'["\\]')
_SPACE = b" \t\r\n"


class StreamError(ValueError):
    """The stream cannot go on: not an object where one should start, or one past the limit."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ObjectStream:
    """Feed chunks, get whole objects; `end()` says whether anything was left unfinished."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._scan = 0  # where scanning resumes in the buffer
        self._depth = 0  # containers open in the current object (0: between objects)
        self._in_string = False

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        found: list[bytes] = []
        buffer = self._buffer
        while True:
            if self._depth == 0:
                start = self._skip_space()
                if start == len(buffer):
                    buffer.clear()
                    self._scan = 0
                    break
                if buffer[start] != ord("{"):
                    raise StreamError(400, "each record must be a JSON object")
                del buffer[:start]
                self._scan, self._depth = 1, 1
            end = self._object_end()
            if end is None:
                if len(buffer) > self.limit:
                    raise StreamError(413, f"a record is larger than {self.limit} bytes")
                break
            if end > self.limit:
                raise StreamError(413, f"a record is larger than {self.limit} bytes")
            found.append(bytes(buffer[:end]))
            del buffer[:end]
            self._scan = 0
        return found

    def end(self) -> bool:
        """Whether the stream ended cleanly (between objects)."""
        return self._depth == 0 and not bytes(self._buffer).strip(_SPACE)

    def _skip_space(self) -> int:
        buffer, at = self._buffer, self._scan
        while at < len(buffer) and buffer[at] in _SPACE:
            at += 1
        return at

    def _object_end(self) -> int | None:
        """The current object's end (past its closing brace), or None if not in the buffer."""
        buffer, at = self._buffer, self._scan
        while True:
            if self._in_string:
                found = _STRING_END.search(buffer, at)
                if found is None:
                    self._scan = len(buffer)
                    return None
                at = found.start()
                if buffer[at] == ord("\\"):
                    if at + 1 >= len(buffer):
                        self._scan = at  # the escaped character has not come yet
                        return None
                    at += 2
                    continue
                self._in_string = False
                at += 1
                continue
            found = _INTERESTING.search(buffer, at)
            if found is None:
                self._scan = len(buffer)
                return None
            at = found.start()
            char = buffer[at]
            at += 1
            if char == ord('"'):
                self._in_string = True
            elif char in b"{[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    return at
