"""One structured access line per request, written when the response ends.

Plain ASGI middleware (it wraps `send`, so streaming is untouched). The line holds the
request id (the response's, else the client's own when it is valid), method, route,
status, time to the first body byte (for speech, the first audio) and total duration. It never logs bodies: no audio and no input text.

Every client-controlled field (method, path, request id) goes through `loggable`: bytes
outside printable ASCII and the backslash are written as escapes (ESC as `\\x1b`, a line
break as `\\n`, a space as `\\x20`), and a field is cut at `MAX_FIELD` characters, so a
request can neither forge a second log line, nor colour a terminal, nor split a field.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from voxserve.api.request_id import request_id_error

__all__ = ["MAX_FIELD", "AccessLog", "loggable"]

log = logging.getLogger("voxserve.access")

MAX_FIELD = 256
"""Longest client-controlled field written to a line, in characters before escaping."""

_UNSAFE = re.compile(r"[^\x21-\x5b\x5d-\x7e]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def loggable(text: str, limit: int = MAX_FIELD) -> str:
    """`text` as one visible token of printable ASCII: escapes for everything else,
    and a trailing `...` when it was longer than `limit`."""
    cut = len(text) > limit
    out = _UNSAFE.sub(_escape, text[:limit])
    return out + "..." if cut else out or "-"


class AccessLog:
    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        headers = scope.get("headers", [])
        request_id = "-"
        if request_id_error(headers) is None:
            request_id = next((v.decode() for k, v in headers if k == b"x-request-id"), "-")
        first_byte: float | None = None

        async def watch(message: dict[str, Any]) -> None:
            nonlocal status, request_id, first_byte
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", ()):
                    if name.lower() == b"x-request-id":
                        request_id = value.decode("latin-1")
            elif message["type"] == "http.response.body" and first_byte is None and message.get("body"):
                first_byte = time.perf_counter() - started
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if log.isEnabledFor(logging.INFO):
                route = getattr(scope.get("route"), "path", None) or scope.get("path", "?")
                ttfb = "-" if first_byte is None else f"{first_byte * 1e3:.1f}"
                log.info(
                    "request_id=%s method=%s route=%s status=%d ttfb_ms=%s duration_ms=%.1f",
                    loggable(request_id),
                    loggable(str(scope.get("method", "?"))),
                    loggable(str(route)),
                    status or 500,
                    ttfb,
                    (time.perf_counter() - started) * 1e3,
                )
