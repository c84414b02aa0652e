"""The server HTTP/2 session `gateway.http2` drives: ours over libnghttp2 when it is built
(``gateway/_h2session.c``), else the same calls and events over ``ngh2``.

Events are tuples ``(kind, stream_id, a, b)``:

- ``REQUEST``: a request's header block (``name\\0value\\0`` a field, one bytes key for the
  gateway's memo of parsed requests), and whether it ended the stream;
- ``DATA``: body bytes, and whether they ended the stream;
- ``TRAILERS``: the stream's trailers came (they end it);
- ``CLOSED``: the stream closed, with its error code (not raised for a forgotten stream);
- ``RESET``: the peer reset the stream, with its error code;
- ``WINDOW``: the peer gave send window, to a stream or (0) the connection;
- ``SETTINGS``: the peer's SETTINGS (the initial window may have changed);
- ``GOAWAY``: the peer is going away, with its error code;
- ``TERMINATED``: the session sent its final GOAWAY and ends the connection.

``receive`` raises ``CalmError`` when the peer passed a resource limit (a header list over
``max_header_list_size``, a CONTINUATION or acknowledgement flood) and ``SessionError`` for any
other fatal error; after either the session is unusable.

``SLUICE_H2_SESSION=ngh2`` in the environment, read once at import, makes ``Session`` the
ngh2 one even where the C session is built: how the tests run a real server on the fallback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Final, Protocol

import ngh2
from ngh2 import ErrorCode

__all__ = (
    "CLOSED",
    "DATA",
    "GOAWAY",
    "REQUEST",
    "RESET",
    "SETTINGS",
    "TERMINATED",
    "TRAILERS",
    "WINDOW",
    "CalmError",
    "ErrorCode",
    "Event",
    "NgH2Session",
    "Session",
    "SessionError",
    "StreamClosedError",
    "header_block",
    "native",
)

REQUEST: Final = 0
DATA: Final = 1
TRAILERS: Final = 2
CLOSED: Final = 3
RESET: Final = 4
WINDOW: Final = 5
SETTINGS: Final = 6
GOAWAY: Final = 7
TERMINATED: Final = 8

Event = tuple[int, int, Any, Any]
Headers = list[tuple[bytes, bytes]]


class SessionLike(Protocol):
    """What `gateway.http2` calls on a session (both implementations)."""

    @property
    def want_read(self) -> bool: ...
    @property
    def want_write(self) -> bool: ...
    def receive(self, data: bytes, /) -> list[Event]: ...
    def events(self) -> list[Event]: ...
    def data_to_send(self) -> bytes: ...
    def respond(self, stream_id: int, headers: Headers, body: bytes, /) -> None: ...
    def send_headers(self, stream_id: int, headers: Headers, end_stream: bool, /) -> None: ...
    def send_data(
        self, stream_id: int, data: bytes | bytearray | memoryview, end_stream: bool, /
    ) -> None: ...
    def send_informational(self, stream_id: int, headers: Headers, /) -> None: ...
    def reset_stream(self, stream_id: int, error_code: int, /) -> None: ...
    def acknowledge_received_data(self, amount: int, stream_id: int, /) -> None: ...
    def queued_body_size(self, stream_id: int, /) -> int: ...
    def forget(self, stream_id: int, /) -> None: ...
    def terminate(self, error_code: int, last_stream_id: int, /) -> None: ...


class _SessionError(Exception):
    """A fatal HTTP/2 session error: the connection cannot go on."""


class _CalmError(_SessionError):
    """The peer passed a resource limit: the connection ends with ENHANCE_YOUR_CALM."""


class _StreamClosedError(_SessionError):
    """The stream is closed (or reset): nothing more can be sent on it."""


def header_block(fields: tuple[tuple[bytes, bytes], ...]) -> bytes:
    """A header list as the one bytes key a REQUEST event carries."""
    return b"".join(b"%s\0%s\0" % field for field in fields)


class NgH2Session:
    """`SessionLike` over ngh2: the session where the C binding was not built (no compiler
    or no libnghttp2 headers at install), and the reference it is tested against."""

    __slots__ = ("_conn", "_forgotten")

    def __init__(
        self,
        *,
        max_concurrent_streams: int,
        max_header_list_size: int,
        initial_window_size: int,
        max_frame_size: int,
        connection_window_size: int,
    ) -> None:
        from ngh2 import Configuration, Connection, Role, Setting

        self._forgotten: set[int] = set()
        config = Configuration(
            auto_window_update=False, max_inbound_header_list_size=max_header_list_size
        )
        self._conn = conn = Connection(Role.SERVER, config)
        conn.initiate_connection(
            {
                Setting.MAX_CONCURRENT_STREAMS: max_concurrent_streams,
                Setting.MAX_HEADER_LIST_SIZE: max_header_list_size,
                Setting.INITIAL_WINDOW_SIZE: initial_window_size,
                Setting.MAX_FRAME_SIZE: max_frame_size,
                Setting.NO_RFC7540_PRIORITIES: 1,
            }
        )
        if connection_window_size != 65535:
            conn.set_local_window_size(connection_window_size)

    @property
    def want_read(self) -> bool:
        return self._conn.want_read

    @property
    def want_write(self) -> bool:
        return self._conn.want_write

    def receive(self, data: bytes, /) -> list[Event]:
        try:
            self._conn.receive_data(data)
        except ngh2.DenialOfServiceError as exc:
            raise CalmError(str(exc)) from exc
        except ngh2.NGH2Error as exc:
            raise SessionError(str(exc)) from exc
        return self.events()

    def events(self) -> list[Event]:
        out: list[Event] = []
        for event in self._conn.events():
            if isinstance(event, ngh2.RequestReceived):
                block = header_block(event.headers)
                out.append((REQUEST, event.stream_id, block, event.end_stream))
            elif isinstance(event, ngh2.DataReceived):
                out.append((DATA, event.stream_id, event.data, event.end_stream))
            elif isinstance(event, ngh2.TrailersReceived):
                out.append((TRAILERS, event.stream_id, None, True))
            elif isinstance(event, ngh2.StreamClosed):
                if event.stream_id in self._forgotten:
                    self._forgotten.discard(event.stream_id)
                else:
                    out.append((CLOSED, event.stream_id, event.error_code, None))
            elif isinstance(event, ngh2.StreamReset):
                out.append((RESET, event.stream_id, event.error_code, None))
            elif isinstance(event, ngh2.WindowUpdated):
                out.append((WINDOW, event.stream_id, None, None))
            elif isinstance(event, ngh2.SettingsReceived):
                out.append((SETTINGS, 0, None, None))
            elif isinstance(event, ngh2.GoAwayReceived):
                out.append((GOAWAY, 0, event.error_code, None))
            elif isinstance(event, ngh2.ConnectionClosed):
                out.append((TERMINATED, 0, None, None))
        return out

    def data_to_send(self) -> bytes:
        return self._conn.data_to_send()

    def respond(self, stream_id: int, headers: Headers, body: bytes, /) -> None:
        try:
            self._conn.send_response(stream_id, headers, end_stream=not body)
            if body:
                self._conn.send_data(stream_id, body, end_stream=True)
        except ngh2.NGH2Error as exc:
            raise StreamClosedError(str(exc)) from exc

    def send_headers(self, stream_id: int, headers: Headers, end_stream: bool, /) -> None:
        try:
            self._conn.send_response(stream_id, headers, end_stream=end_stream)
        except ngh2.NGH2Error as exc:
            raise StreamClosedError(str(exc)) from exc

    def send_data(
        self, stream_id: int, data: bytes | bytearray | memoryview, end_stream: bool, /
    ) -> None:
        try:
            self._conn.send_data(stream_id, data, end_stream=end_stream)
        except ngh2.NGH2Error as exc:
            raise StreamClosedError(str(exc)) from exc

    def send_informational(self, stream_id: int, headers: Headers, /) -> None:
        try:
            self._conn.send_informational_response(stream_id, headers)
        except ngh2.NGH2Error as exc:
            raise StreamClosedError(str(exc)) from exc

    def reset_stream(self, stream_id: int, error_code: int, /) -> None:
        try:
            self._conn.reset_stream(stream_id, error_code)
        except ngh2.NGH2Error as exc:
            raise SessionError(str(exc)) from exc

    def acknowledge_received_data(self, amount: int, stream_id: int, /) -> None:
        try:
            self._conn.acknowledge_received_data(amount, stream_id)
        except ngh2.NGH2Error as exc:  # e.g. the session has ended
            raise SessionError(str(exc)) from exc

    def queued_body_size(self, stream_id: int, /) -> int:
        return self._conn.queued_body_size(stream_id)

    def forget(self, stream_id: int, /) -> None:
        self._forgotten.add(stream_id)

    def terminate(self, error_code: int, last_stream_id: int, /) -> None:
        self._conn.terminate_connection(error_code, last_stream_id=last_stream_id)


SessionError: type[Exception]
CalmError: type[Exception]
StreamClosedError: type[Exception]
Session: Callable[..., SessionLike]
native = os.environ.get("SLUICE_H2_SESSION") != "ngh2"
if native:
    try:
        from gateway import _h2session
    except ImportError:  # built without libnghttp2's headers: the slower, equivalent session
        native = False
if native:
    SessionError = _h2session.SessionError
    CalmError = _h2session.CalmError
    StreamClosedError = _h2session.StreamClosedError
    Session = _h2session.Session
else:
    SessionError, CalmError, StreamClosedError = _SessionError, _CalmError, _StreamClosedError
    Session = NgH2Session
