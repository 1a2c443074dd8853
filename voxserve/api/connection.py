"""The HTTP/1.1 connection protocol: uvicorn's httptools protocol plus the limits that live
below the app, where only the connection can enforce them.

- **Header timeout** (`--header-timeout-s`). uvicorn waits forever for a request's headers, so
  a client that connects and sends half a request line holds its connection (and a
  `--limit-concurrency` place) for good. Here a timer runs whenever the connection has no
  request in progress: from the moment it is accepted, and again after each response.
  Complete headers stop it. When it fires, the connection closes; if part of a request had
  arrived, a 408 goes first. An idle keep-alive connection is closed earlier by uvicorn's
  own `timeout_keep_alive`.
- **Header size.** httptools sets no limit on the request line and headers. Past
  `MAX_HEAD_BYTES` or `MAX_HEADERS` the client gets 431 and the connection closes.
- **Send stall** (`--send-stall-timeout-s`). A client that stops reading fills the socket's
  buffers; the transport then pauses writing, and every `send()` of the response waits.
  If writing stays paused that long, the client has read nothing for that long: the
  connection is reset (unsent bytes dropped, nothing lingers in the kernel), and the app
  sees an ordinary disconnect, so the stream's clean-up runs and its admission slot is
  freed. This covers every HTTP
  response, streamed or not. The kernel's send buffer is capped (`SEND_BUFFER_BYTES`),
  so that a stall shows after a few seconds of audio instead of after 4 MB. WebSocket
  sessions have their own send timeout in the app.

Errors written here, outside the app, still use the OpenAI error shape. Nothing here knows
about routes or engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from voxserve.config import ServerConfig
from voxserve.errors import HeadersTooLarge, RequestTimeout, VoxError

__all__ = ["MAX_HEADERS", "MAX_HEAD_BYTES", "LimitedHttpProtocol", "connection_protocol"]

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
"""Most bytes of request line and headers (names, values and 4 bytes of framing each)."""
MAX_HEADERS = 128
"""Most header lines in one request."""
SEND_BUFFER_BYTES = 64 * 1024
"""The kernel's send buffer per connection (Linux doubles it for its own bookkeeping).
Left to autotuning it grows to 4 MB, about 80 s of 24 kHz PCM, which a client that
stops reading would let the server produce (and hold) before its stall could even begin
to count. 128 KiB in the kernel still carries ~1.3 MB/s at 100 ms round trip, over ten
times a 48 kHz PCM stream; a response only ever waits for its client."""


class _HeadTooLarge(Exception):
    """Raised from a parser callback; httptools turns it into a parser error."""


def raw_error(error: VoxError) -> bytes:
    """A whole HTTP/1.1 response for `error`, in the OpenAI shape, that closes the connection."""
    body = json.dumps(error.body(), separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {error.status} {_REASONS.get(error.status, 'Error')}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large"}


class LimitedHttpProtocol(HttpToolsProtocol):
    """Set the limits through `connection_protocol(config)`, which subclasses this."""

    header_timeout_s: float = ServerConfig.header_timeout_s
    send_stall_timeout_s: float = ServerConfig.send_stall_timeout_s
    max_head_bytes: int = MAX_HEAD_BYTES
    max_headers: int = MAX_HEADERS

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._head_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._head_lines = 0
        self._head_refused = False
        self._begun = False
        """A request's first bytes have arrived, its headers have not."""

    # Header timeout
    # Narrower than asyncio.Protocol's BaseTransport, as in uvicorn's own override.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # uvicorn arms its keep-alive timer only when no pipelined request was started:
        # then the connection is between requests, and the next one's headers are due.
        if self.timeout_keep_alive_task is not None:
            self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._begun = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._begun:
            self.transport.write(
                raw_error(RequestTimeout(f"the request headers did not arrive within {self.header_timeout_s:g} s"))
            )
        log.info("%s: no complete request headers within %g s; connection closed", _peer(self), self.header_timeout_s)
        self.transport.close()

    # Header size
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun = True
        self._head_bytes = 0
        self._head_lines = 0

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url), 0)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4, 1)
        super().on_header(name, value)

    def _count_head(self, size: int, lines: int) -> None:
        self._head_bytes += size
        self._head_lines += lines
        if self._head_bytes > self.max_head_bytes or self._head_lines > self.max_headers:
            self._head_refused = True
            raise _HeadTooLarge

    def send_400_response(self, msg: str) -> None:
        if not self._head_refused:
            super().send_400_response(msg)
            return
        error = HeadersTooLarge(
            f"the request line and headers pass {self.max_head_bytes} bytes or {self.max_headers} "
            "header lines; send fewer or shorter headers"
        )
        log.info("%s: %s", _peer(self), error.message)
        self.transport.write(raw_error(error))
        self.transport.close()

    # Send stall
    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.send_stall_timeout_s, self._send_stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel_stall_timer()

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _send_stalled(self) -> None:
        self._stall_timer = None
        if not self.flow.write_paused:
            return
        log.info(
            "%s read nothing of its response for %g s; connection reset", _peer(self), self.send_stall_timeout_s
        )
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # Linger 0: close with a reset and drop the unsent bytes. A plain close would
            # leave the kernel holding them, retrying against the client's closed window.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()  # connection_lost follows: the app sees a disconnect

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_stall_timer()
        super().connection_lost(exc)


def _peer(protocol: HttpToolsProtocol) -> str:
    client = protocol.client
    return f"{client[0]}:{client[1]}" if client else "client"


def connection_protocol(config: ServerConfig) -> type[LimitedHttpProtocol]:
    """The protocol class to give uvicorn (`http=`), with `config`'s limits."""

    class Configured(LimitedHttpProtocol):
        header_timeout_s = config.header_timeout_s
        send_stall_timeout_s = config.send_stall_timeout_s

    return Configured
