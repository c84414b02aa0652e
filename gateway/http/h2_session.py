"""The server HTTP/2 session `gateway.http.http2` drives: ours over libnghttp2 when it is built
(``gateway/http/_h2session.c``), else the same calls and events over ``ngh2``.

Events are tuples ``(kind, stream_id, a, b)``:

- ``REQUEST``: a request's header block (``name\\0value\\0`` a field, one bytes key for the
  gateway's memo of parsed requests), and whether it ended the stream;
- ``REQUEST_WITH_BODY``: a request's header block and its whole body, when the body's frames
  (up to its END_STREAM) followed the block in the same read with no other event between: the
  REQUEST and DATA events it stands for, in one (a one-record produce is one read); its bytes
  hold window until acknowledged, as DATA's do;
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

Both sessions read the client's frame headers before libnghttp2 does, for the stream rules it
leaves out (`_PeerStreams`): a frame refused there ends the connection with the library's
GOAWAY once the frames before it are read. After that, or ``terminate``, a session reads
nothing more, refuses to send, and ignores acknowledgements.

``SLUICE_H2_SESSION=ngh2`` in the environment, read once at import, makes ``Session`` the
ngh2 one even where the C session is built: how the tests run a real server on the fallback.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any, Final, Protocol

import ngh2
from ngh2 import ErrorCode

__all__ = (
    "CLOSED",
    "DATA",
    "GOAWAY",
    "REQUEST",
    "REQUEST_WITH_BODY",
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
REQUEST_WITH_BODY: Final = 9

Event = tuple[int, int, Any, Any]
Headers = list[tuple[bytes, bytes]]

_PREFACE_LENGTH: Final = 24
_FRAME_HEADER: Final = 9
_HEADERS, _PRIORITY, _RST_STREAM, _WINDOW_UPDATE = 0x1, 0x2, 0x3, 0x8  # DATA is 0x0
_END_STREAM: Final = 0x1
_PEER_WINDOW: Final = 256  # client streams remembered below the last one opened
_SKIPPED, _OPEN, _ENDED = 0, 1, 2
_U31: Final = 2**31 - 1  # the largest 31-bit number: a stream id's mask, the largest window
_FRAME: Final = struct.Struct(">BHBBI")  # a frame's header: length (24 bits), type, flags, stream
_WORD: Final = struct.Struct(">I")  # a PRIORITY frame's dependency, a WINDOW_UPDATE's increment
_RST_STREAM_FRAME: Final = struct.Struct(">xHBBII")  # length (24 bits), type, flags, stream, code


class SessionLike(Protocol):
    """What `gateway.http.http2` calls on a session (both implementations)."""

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


class _PeerStreams:
    """The client's streams as its own frames make them (RFC 9113 §5.1), for what libnghttp2
    does not check: `_h2session.c`'s peer_scan and peer_check, for `NgH2Session` (see there
    for the rules). Also where a WINDOW_UPDATE on a stream is, which ngh2's libnghttp2 makes
    a connection error when it overflows the stream's window (§6.9.1 wants the stream reset)."""

    __slots__ = ("_held", "_last", "_skip", "_streams")

    def __init__(self) -> None:
        self._held = b""  # a frame's first bytes, too few to judge it by
        self._skip = _PREFACE_LENGTH  # the preface's or the frame's payload bytes to pass
        self._last = 0  # the highest stream a HEADERS frame opened
        self._streams = bytearray(_PEER_WINDOW)  # a state by (stream id // 2) % _PEER_WINDOW

    def scan(self, data: bytes) -> list[tuple[int, int, int, int]]:
        """Each frame in `data` to act on before the library reads it (most reads have none):
        where it begins in `data` (0 if in an earlier read), the connection error it is (0:
        none), its stream, and a stream WINDOW_UPDATE's increment (0: not one). A refused
        frame is the last."""
        stops: list[tuple[int, int, int, int]] = []
        held = len(self._held)
        if held:
            data = self._held + data
        at, end, skip = 0, len(data), self._skip
        streams = self._streams
        while True:
            if skip >= end - at:
                self._held, self._skip = b"", skip - (end - at)
                return stops
            at += skip
            if end - at < _FRAME_HEADER:
                break
            high, skip, kind, flags, stream_id = _FRAME.unpack_from(data, at)
            skip |= high << 16  # the frame's length: its payload is passed over
            stream_id &= _U31
            code = 0
            if kind <= _HEADERS:  # DATA or HEADERS
                if stream_id & 1:  # else stream 0 or a server's: the library's PROTOCOL_ERROR
                    slot = (stream_id >> 1) % _PEER_WINDOW
                    if stream_id > self._last:
                        if kind == _HEADERS:  # DATA on an idle stream is the library's
                            self._open(stream_id)
                            if flags & _END_STREAM:
                                streams[slot] = _ENDED
                    elif self._last - stream_id < 2 * _PEER_WINDOW:  # older: the library's
                        state = streams[slot]
                        if state == _ENDED:
                            code = ErrorCode.STREAM_CLOSED
                        elif state == _SKIPPED:
                            code = ErrorCode.PROTOCOL_ERROR if kind == _HEADERS else 0
                        elif flags & _END_STREAM:
                            streams[slot] = _ENDED
            elif kind == _RST_STREAM:
                if skip == 4 and stream_id & 1 and 0 <= self._last - stream_id < 2 * _PEER_WINDOW:
                    slot = (stream_id >> 1) % _PEER_WINDOW
                    if streams[slot] == _OPEN:
                        streams[slot] = _ENDED
            elif (kind == _PRIORITY and skip == 5) or (
                kind == _WINDOW_UPDATE and skip == 4 and stream_id
            ):  # judged by their payload too, whole (as the C session reads it)
                if end - at < _FRAME_HEADER + skip:
                    break
                word = _WORD.unpack_from(data, at + _FRAME_HEADER)[0] & _U31
                if kind == _WINDOW_UPDATE:
                    stops.append((max(at - held, 0), 0, stream_id, word))
                elif stream_id in (0, word):
                    code = ErrorCode.PROTOCOL_ERROR
            if code:
                stops.append((max(at - held, 0), code, stream_id, 0))
                return stops
            at += _FRAME_HEADER
        self._held, self._skip = data[at:], 0
        return stops

    def _open(self, stream_id: int) -> None:
        """The client opened `stream_id`, above the last: the identifiers between are skipped."""
        streams = self._streams
        if stream_id - 2 > self._last:
            for skipped in range(stream_id - 2, max(self._last, stream_id - 2 * _PEER_WINDOW), -2):
                streams[(skipped >> 1) % _PEER_WINDOW] = _SKIPPED
        self._last = stream_id
        streams[(stream_id >> 1) % _PEER_WINDOW] = _OPEN


def header_block(fields: tuple[tuple[bytes, bytes], ...]) -> bytes:
    """A header list as the one bytes key a REQUEST event carries."""
    return b"".join(b"%s\0%s\0" % field for field in fields)


class NgH2Session:
    """`SessionLike` over ngh2: the session where the C binding was not built (no compiler
    or no libnghttp2 headers at install), and the reference it is tested against."""

    __slots__ = ("_ahead", "_conn", "_ending", "_forgotten", "_overflowed", "_peer")

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
        self._peer = _PeerStreams()
        self._ending = False  # we ended the connection (terminate, or a frame refused)
        self._ahead = b""  # frames of ours to send before the library's
        self._overflowed = False  # a stream's window overflowed: the library ends the connection
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
        if self._ending:
            return self.events()
        conn = self._conn
        fed = 0
        try:
            for at, code, stream_id, increment in self._peer.scan(data):
                if at > fed:
                    conn.receive_data(memoryview(data)[fed:at])
                    fed = at
                if increment:
                    self._check_window(stream_id, increment)
                    continue
                self._ending = True
                conn.terminate_connection(code)
                return self.events()
            conn.receive_data(memoryview(data)[fed:] if fed else data)
        except ngh2.DenialOfServiceError as exc:
            raise CalmError(str(exc)) from exc
        except ngh2.NGH2Error as exc:
            raise SessionError(str(exc)) from exc
        return self.events()

    def _check_window(self, stream_id: int, increment: int) -> None:
        """Before a client's WINDOW_UPDATE that takes a stream's window past 2**31-1, which
        ngh2's libnghttp2 answers with GOAWAY FLOW_CONTROL_ERROR alone, our RST_STREAM
        FLOW_CONTROL_ERROR of the stream (RFC 9113 §6.9.1): the frames the C session sends
        (libnghttp2 1.52 resets the stream, the session then ends the connection)."""
        if self._overflowed:
            return  # the library ignores all that follows
        try:
            window = self._conn.stream_remote_window_size(stream_id)
        except ngh2.StreamUnavailableError:
            return  # no open stream: nothing to overflow
        if window + increment > _U31:
            self._overflowed = True
            self._ahead += _RST_STREAM_FRAME.pack(
                4, _RST_STREAM, 0, stream_id, ErrorCode.FLOW_CONTROL_ERROR
            )

    def events(self) -> list[Event]:
        out: list[Event] = []
        held = -1  # where a request not ended stands, followed only by DATA events of its own
        for event in self._conn.events():
            count = len(out)
            if isinstance(event, ngh2.RequestReceived):
                block = header_block(event.headers)
                held = -1 if event.end_stream else count
                out.append((REQUEST, event.stream_id, block, event.end_stream))
                continue
            if isinstance(event, ngh2.DataReceived):
                stream_id, data, ended = event.stream_id, event.data, event.end_stream
                if not data and not ended:
                    continue  # an empty frame hands nothing over (the C session raises no event)
                if held >= 0 and out[held][1] == stream_id:
                    if ended:  # the body whole after its request: one event, as the C session's
                        body = b"".join([*(e[2] for e in out[held + 1 :]), data])
                        out[held:] = [(REQUEST_WITH_BODY, stream_id, out[held][2], body)]
                        held = -1
                    else:
                        out.append((DATA, stream_id, data, False))
                    continue
                held = -1
                out.append((DATA, stream_id, data, ended))
                continue
            if isinstance(event, ngh2.TrailersReceived):
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
            if len(out) > count:
                held = -1
        return out

    def data_to_send(self) -> bytes:
        if self._ahead:
            ahead, self._ahead = self._ahead, b""
            return ahead + self._conn.data_to_send()
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
        if self._ending:
            return  # no window goes out after the final GOAWAY
        try:
            self._conn.acknowledge_received_data(amount, stream_id)
        except ngh2.NGH2Error as exc:  # e.g. the session has ended
            raise SessionError(str(exc)) from exc

    def queued_body_size(self, stream_id: int, /) -> int:
        return self._conn.queued_body_size(stream_id)

    def forget(self, stream_id: int, /) -> None:
        self._forgotten.add(stream_id)

    def terminate(self, error_code: int, last_stream_id: int, /) -> None:
        if not self._ending:  # once is all libnghttp2 takes
            self._ending = True
            self._conn.terminate_connection(error_code, last_stream_id=last_stream_id)


SessionError: type[Exception]
CalmError: type[Exception]
StreamClosedError: type[Exception]
Session: Callable[..., SessionLike]
native = os.environ.get("SLUICE_H2_SESSION") != "ngh2"
if native:
    try:
        from gateway.http import _h2session
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
